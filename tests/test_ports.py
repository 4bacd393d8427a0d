"""The kernel port model on real veths and qdiscs: rate, strict classes, gates, buffers."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from testbed.config.constants import gate_major
from testbed.machine.ports import HTB_BURST_BYTES, PortGates
from tests.portrig import port
from traffic.packets import pfc_frame

pytestmark = pytest.mark.root
FRAME = 4200  # about a RoCE MTU frame

SENDER = r"""
import json, socket, struct, sys, time
spec = json.loads(sys.argv[1])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)
s.bind(("pa", 0))
for dscp, n, size, seq0 in spec:
    for i in range(n):
        if dscp < 0:   # a PFC frame
            f = bytes.fromhex(sys.argv[2])
        else:
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2, size - 14, 0, 0, 64, 17, 0,
                             bytes(4), bytes(4))
            f = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + struct.pack("!I", seq0 + i)
            f += b"\x00" * (size - len(f))
        try:
            s.send(f)
        except OSError:   # ENOBUFS: the qdisc dropped it (a full buffer)
            pass
"""

RECEIVER = r"""
import socket, struct, sys, time, json
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("pb", 0))
s.settimeout(float(sys.argv[1]))
out = []
try:
    while True:
        f, a = s.recvfrom(65536)
        if a[2] == 4:
            continue
        t = time.monotonic()
        if f[12:14] == b"\x88\x08":
            out.append(["pfc", t, 0])
        elif f[12:14] == b"\x08\x00":
            out.append([f[15] >> 2, t, struct.unpack("!I", f[34:38])[0]])
except socket.timeout:
    pass
print(json.dumps(out))
"""


def receive(ns: str, idle_s: float) -> subprocess.Popen:
    p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", RECEIVER,
                          str(idle_s)], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    return p


def send(ns: str, spec: list) -> None:
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", SENDER, json.dumps(spec),
                    pfc_frame("02:00:00:00:00:09", {3: 100}).hex()], check=True)


def test_link_rate_is_held() -> None:
    with port(10.0, buffers=2_000_000) as (ns, _gates):
        rx = receive(ns, 1.5)
        send(ns, [[0, 200, FRAME, 0]])
        got = json.loads(rx.communicate()[0])
    assert len(got) == 200
    span = got[-1][1] - got[0][1]
    rate = (len(got) - 1) * FRAME * 8 / span
    assert rate == pytest.approx(10e6, rel=0.06), rate


def wait_gate(gates: PortGates, tc: int, closed: bool) -> None:
    """The gate is as asked the moment the call returns: the agent kicks an opened gate right
    after (a netlink request is carried out within its send)."""
    assert (gates.gate_rate(tc) < 1e6) == closed, gates.gate_rate(tc)


def test_closed_gate_holds_one_class_while_others_and_pfc_flow() -> None:
    with port(10.0) as (ns, gates):
        gates.close(3)
        wait_gate(gates, 3, True)
        rx = receive(ns, 2.0)
        send(ns, [[26, 40, FRAME, 0], [0, 60, FRAME, 1000], [48, 20, FRAME, 2000],
                  [-1, 5, 64, 0]])
        time.sleep(1.0)
        held = gates.stats()[3]
        gates.open(3)
        got = json.loads(rx.communicate()[0])
        after = gates.stats()[3]
    by = {d: [x for x in got if x[0] == d] for d in (26, 0, 48, "pfc")}
    # one frame leaks as the gate closes (it was already eligible); the rest is held, not lost
    assert held.backlog_packets >= 38
    assert len(by[0]) == 60 and len(by[48]) == 20 and len(by["pfc"]) == 5
    assert len(by[26]) == 40 and after.drops == 0
    assert [x[2] for x in by[26]] == list(range(40)), "class 3 out of order"
    # class 3 came out after everything else had gone, once the gate opened
    assert by[26][-1][1] > max(x[1] for x in by[0] + by[48])


def test_a_reopened_gate_sends_at_the_link_rate_not_in_a_burst() -> None:
    """After a pause (or any idle time) the port sends its held frames one frame time apart,
    as a real port does and as the P4 phantom drains: htb's buckets hold less than a frame.
    With a bucket of the largest frame, three 4 KB frames left back to back at every reopen
    and the phantom stood two frames above the kernel queue after each pause."""
    rate = 1.0
    frame_s = FRAME * 8 / (rate * 1e6)  # 33.6 ms
    with port(rate) as (ns, gates):
        gates.close(3)
        wait_gate(gates, 3, True)
        rx = receive(ns, 1.5)
        send(ns, [[26, 6, FRAME, 0]])
        time.sleep(0.3)  # the leak has gone, the link idles: every bucket fills
        gates.open(3)
        got = json.loads(rx.communicate()[0])
    times = [t for d, t, _ in got if d == 26]
    assert len(times) == 6
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # a frame may leave a bucket's worth early (1600 bytes: 12.8 ms of the 33.6 ms a 4,200-byte
    # frame takes at 1 Mbit/s), never back to back
    assert HTB_BURST_BYTES < FRAME / 2
    assert min(gaps) >= 0.5 * frame_s, [round(g * 1e3, 1) for g in gaps]


def test_gate_admits_the_largest_frame_when_closed() -> None:
    with port(10.0) as (ns, gates):
        gates.close(3)
        wait_gate(gates, 3, True)
        send(ns, [[26, 5, 9014, 0]])
        time.sleep(0.3)
        st = gates.stats()[3]
    assert st.drops == 0 and st.backlog_packets >= 4


def test_buffer_limit_drops_visibly() -> None:
    with port(10.0, buffers=5 * FRAME) as (ns, gates):
        gates.close(3)
        wait_gate(gates, 3, True)
        send(ns, [[26, 20, FRAME, 0]])
        time.sleep(0.3)
        st = gates.stats()[3]
    assert st.drops >= 10
    assert st.backlog_bytes <= 5 * FRAME


def test_drops_are_costed_once_at_the_size_of_the_frames_the_queue_held() -> None:
    """The bytes a class released (sent or dropped), which a resync tick subtracts from the
    bytes the P4 program admitted: a drop is costed when counted, at the mean size of the
    frames the queue held, and small frames sent afterwards do not cost it again (costed at
    each reading, an empty queue read 180 KB full once a class had dropped data frames and
    then sent ACKs)."""
    with port(80.0, buffers=5 * FRAME) as (ns, gates):
        send(ns, [[26, 50, 100, 0]])  # small frames sent first: not what the queue drops
        time.sleep(0.1)
        gates.close(3)
        wait_gate(gates, 3, True)
        send(ns, [[26, 20, FRAME, 100]])  # five held, a couple leaked, the rest dropped
        time.sleep(0.1)
        full = gates.stats()[3]  # the agent reads the gates every tick and sample
        assert full.drops >= 10 and full.backlog_packets >= 4
        assert full.released_bytes == 50 * 100 + (20 - full.backlog_packets) * FRAME
        gates.open(3)
        send(ns, [[26, 200, 100, 200]])  # small frames, sent
        time.sleep(0.2)
        after = gates.stats()[3]
    assert after.backlog_packets == 0 and after.drops == full.drops, after
    assert after.released_bytes == 50 * 100 + 20 * FRAME + 200 * 100, after


def test_the_watchdogs_drops_are_counted_from_what_the_program_admitted() -> None:
    """While the watchdog drops whatever comes, the frames' bytes are unknown (the kernel
    counts packets): the released bytes say so (None), and the agent rebases them at restore
    from the bytes the P4 program admitted (here: what was offered) less the backlog."""
    with port(80.0) as (ns, gates):
        send(ns, [[26, 5, FRAME, 0]])
        time.sleep(0.1)
        gates.close(3)
        wait_gate(gates, 3, True)
        send(ns, [[26, 10, FRAME, 10]])
        time.sleep(0.1)
        gates.drop_all(3)  # the watchdog: the backlog is purged...
        send(ns, [[26, 6, FRAME, 20], [26, 30, 300, 30]])  # ...and what arrives is dropped
        time.sleep(0.1)
        dropping = gates.stats()[3]
        assert dropping.released_bytes is None and dropping.backlog_packets == 0
        gates.restore(3)
        gates.rebase(3, 21 * FRAME + 30 * 300 - gates.stats()[3].backlog_bytes)
        send(ns, [[26, 200, 100, 100]])
        time.sleep(0.2)
        after = gates.stats()[3]
    assert after.drops == dropping.drops and after.backlog_packets == 0, after
    assert after.released_bytes == 21 * FRAME + 30 * 300 + 200 * 100, after


def test_strict_priority_under_overload() -> None:
    with port(10.0) as (ns, _gates):
        rx = receive(ns, 1.5)
        # class 0 and class 6 both backlogged: class 6 leaves first
        send(ns, [[0, 30, FRAME, 0], [48, 30, FRAME, 100]])
        got = json.loads(rx.communicate()[0])
    order = [x[0] for x in got]
    last6 = max(i for i, d in enumerate(order) if d == 48)
    zeros_before = sum(1 for d in order[:last6] if d == 0)
    assert zeros_before <= 3, order




def _gate_line(ns: str, tc: int) -> str:
    """How `tc qdisc show` shows the class's gate."""
    r = subprocess.run(["ip", "netns", "exec", ns, "tc", "-d", "qdisc", "show", "dev", "pa"],
                       capture_output=True, text=True, check=True)
    head = f"qdisc tbf {gate_major(tc):x}:"
    return next(ln for ln in r.stdout.splitlines() if ln.startswith(head))


def test_a_gate_changed_over_netlink_is_the_gate_tc_makes() -> None:
    """Closed, opened, dropped to one byte and restored: the kernel shows the same gate as after
    the same `tc qdisc` command (rate, burst, link layer, and the limit as a latency)."""
    from testbed.machine.ports import gate_burst_bytes

    with port(10.0) as (ns, gates):
        burst = gate_burst_bytes(gates.spec.max_frame)

        def by_tc(how: str, rate: str, limit: int) -> str:
            gate = gate_major(3)
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", how, "dev", "pa", "parent",
                            f"1:{gate:x}", "handle", f"{gate:x}:", "tbf", "rate", rate, "burst",
                            str(burst), "limit", str(limit)], check=True)
            return _gate_line(ns, 3)

        gates.close(3)
        closed = _gate_line(ns, 3)  # its latency is the limit's time at the rate
        assert "rate 1Kbit" in closed and "linklayer ethernet" in closed, closed
        assert closed == by_tc("change", "1000bit", gates.spec.buffers[3])
        gates.open(3)
        opened = _gate_line(ns, 3)
        assert "rate 1Gbit" in opened, opened
        assert opened == by_tc("change", "1000000000bit", gates.spec.buffers[3])
        gates.drop_all(3)
        dropping = _gate_line(ns, 3)
        assert dropping != opened and dropping == by_tc("replace", "1000000000bit", 1)
        gates.restore(3)
        assert _gate_line(ns, 3) == opened


def test_a_refused_gate_change_is_logged_not_raised(capsys) -> None:
    """The port was deleted under the agent (a fault): the change is refused, the agent's log
    says which, and the agent goes on."""
    with port(10.0) as (ns, gates):
        subprocess.run(["ip", "-n", ns, "link", "del", "pa"], check=True)
        gates.close(3)
    err = capsys.readouterr().err
    assert "pa: qdisc change of the class 3 gate refused: No such device" in err, err


def test_a_plugged_closing_gate_holds_even_small_frames() -> None:
    """tbf refills its bucket whenever it is changed, so a closing gate lets its whole burst
    through: 40 of 40 62-byte frames (ACK-sized) cross a closed gate of class 6. Handed its
    burst in plugs, the closed gate of class 3 holds them but for what its closed rate
    refills (1 kbit/s: two such frames a second), and sends them in order when it opens;
    the plugs are not counted as the class's traffic."""
    with port(10.0) as (ns, gates):
        rx = receive(ns, 2.5)
        gates.close(6)
        gates.close(3)
        gates.plug(3)
        send(ns, [[26, 40, 62, 0], [48, 40, 62, 1000]])
        time.sleep(1.0)
        held = gates.stats()
        gates.open(3)
        gates.open(6)
        got = json.loads(rx.communicate()[0])
        after = gates.stats()[3]
    assert held[6].backlog_packets == 0  # unplugged: the burst let every frame through
    assert held[3].backlog_packets >= 36 and held[3].sent_packets <= 4, held[3]
    assert gates.plugs[3] == 1
    by = {d: [x[2] for x in got if x[0] == d] for d in (26, 48)}
    assert by[26] == list(range(40)) and len(by[48]) == 40
    assert (after.sent_packets, after.sent_bytes, after.drops) == (40, 40 * 62, 0)


def test_a_plug_is_counted_by_nobody_even_while_it_waits() -> None:
    """A gate closed again while it still holds packets that came after the last resync is
    plugged behind them: the plug waits in the queue until the gate opens. Meanwhile the
    class's statistics show its own packets alone (none sent, the 5 held), and after the
    opening, the 5 sent and nothing queued: never a packet un-sent, never the plug's 9 KB as
    the class's backlog."""
    size = 1000
    with port(10.0) as (ns, gates):
        gates.close(3)
        gates.plug(3)  # the burst gone: what comes is held
        send(ns, [[26, 5, size, 0]])
        time.sleep(0.2)
        gates.plug(3)  # behind the 5 held packets
        held = gates.stats()[3]
        gates.open(3)
        time.sleep(0.2)
        after = gates.stats()[3]
    assert gates.plugs[3] == 2
    assert (held.backlog_packets, held.backlog_bytes, held.sent_packets) == (5, 5 * size, 0), held
    assert (after.backlog_packets, after.sent_packets, after.sent_bytes, after.drops) == \
        (0, 5, 5 * size, 0), after
