"""The switch agent on real veths and qdiscs (no BMv2): PFC closes the right gate for the
right time, XON ends a pause early, ticks are sent for backlogged lossless queues."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from testbed.agent import AgentConfig, AgentPort, agent_config, tick_frame
from testbed.config.constants import ETH_P_TICK, gate_major
from testbed.config.models import QosConfig
from testbed.machine.ports import PortSpec, scheduler_commands
from testbed.results.telemetry import (
    EventRow,
    PfcwdQueue,
    events_path,
    pfcwd_path,
    read_events,
    read_pfcwd,
    read_telemetry,
    telemetry_path,
)
from traffic.packets import pfc_frame
from traffic.wire import PFC_QUANTUM_BITS

pytestmark = pytest.mark.root
RATE = 10.0
QUANTUM_S = PFC_QUANTUM_BITS / (RATE * 1e6)


def sh(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True)


@pytest.fixture(params=["inside", "outside"])
def agent_ns(tmp_path: Path, request):
    """The agent started inside the switch's namespace (a process per switch), or outside it,
    entering it to open the switch's sockets (agent.one_process)."""
    yield from _agent_ns(tmp_path, None, outside=request.param == "outside")


def _agent_ns(tmp_path: Path, watchdog, outside: bool = False):
    ns = f"rta{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    proc = None
    try:
        # switch port sw1 <-> peer; agent's tick port agt <-> tick (BMv2 would sit on tick)
        sh(ns, "link", "add", "dev", "sw1", "type", "veth", "peer", "name", "peer")
        sh(ns, "link", "add", "dev", "tick", "type", "veth", "peer", "name", "agt")
        for i in ("sw1", "peer", "tick", "agt"):
            sh(ns, "link", "set", "dev", i, "mtu", "9000", "up")
        qos = QosConfig()
        spec = PortSpec("sw1", RATE, (100_000,) * 8, tuple(qos.dscp_to_tc_map.items()))
        subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", "-"], check=True, text=True,
                       input="\n".join(scheduler_commands(spec)) + "\n")
        conf = agent_config("sw", [AgentPort(1, "sw1", RATE, [100_000] * 8)], qos, "agt",
                            0.01, 0.05, tmp_path, 9014, watchdog, pfcwd_path(tmp_path, "sw"),
                            netns=f"/run/netns/{ns}" if outside else None)
        path = tmp_path / "agent.json"
        path.write_text(json.dumps(conf))
        AgentConfig.load(path)  # the file round-trips
        enter = [] if outside else ["ip", "netns", "exec", ns]
        proc = subprocess.Popen([*enter, sys.executable, "-m", "testbed.agent", str(path)],
                                stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).parent.parent)
        # ready once it has opened its sockets and its event log (as the fabric waits for it):
        # a fixed wait lost the first PFC frame when a loaded machine started it slowly
        wait_for(lambda: proc.poll() is None and events_path(tmp_path, "sw").exists(),
                 timeout=20, step=0.02)
        time.sleep(0.2)
        yield ns, tmp_path
    finally:
        if proc is not None:
            proc.terminate()
            print(proc.communicate(timeout=10)[0])
        subprocess.run(["ip", "netns", "del", ns])


def send_from_peer(ns: str, frames: list[bytes], intf: str = "peer") -> float:
    """Send ``frames`` from ``intf``; returns when the last one was sent, on this process's
    monotonic clock (CLOCK_MONOTONIC is the machine's, whatever the namespace), which is
    tens of ms before the sending interpreter has exited."""
    script = ("import socket,sys,json,time\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n"
              f"s.bind(('{intf}',0))\n"
              "for h in json.load(sys.stdin):\n"
              "    try: s.send(bytes.fromhex(h))\n"
              "    except OSError: pass  # ENOBUFS: the queue dropped it\n"
              "print(time.monotonic())\n")
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script], check=True,
                         input=json.dumps([f.hex() for f in frames]), text=True,
                         capture_output=True).stdout
    return float(out.split()[-1])


def gate_rate(ns: str, tc: int) -> str:
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "sw1"],
                         capture_output=True, text=True).stdout
    line = next(ln for ln in out.splitlines() if f"tbf {gate_major(tc):x}:" in ln)
    return line.split(" rate ")[1].split()[0]


def events(tmp: Path) -> list[EventRow]:
    return read_events(events_path(tmp, "sw"))


def wait_for(pred, timeout: float = 2.0, step: float = 0.002) -> float:
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, "condition not reached"
        time.sleep(step)
    return time.monotonic() - t0


def test_pfc_pauses_the_class_for_its_quanta(agent_ns) -> None:
    ns, tmp = agent_ns
    quanta = 10_000  # 0.512 s at 10 Mbit/s
    send_from_peer(ns, [pfc_frame("02:00:00:00:00:01", {3: quanta})])
    wait_for(lambda: gate_rate(ns, 3) == "1Kbit")
    assert gate_rate(ns, 0) == "1Gbit"  # other classes untouched
    t0 = time.monotonic()
    wait_for(lambda: gate_rate(ns, 3) == "1Gbit", timeout=3)
    seen_closed = time.monotonic() - t0
    ev = events(tmp)
    assert [e.event for e in ev] == ["pause", "expire"]
    # the agent held the gate for the quanta: its own pause and expiry times say how long;
    # from outside, the test sees the gate closed only once its `tc` poll gets to run, so it
    # sees no more than that
    assert ev[1].t_s - ev[0].t_s == pytest.approx(quanta * QUANTUM_S, abs=0.05)
    assert seen_closed <= quanta * QUANTUM_S + 0.05
    # recorded; its distribution is benchmarks/lossless.py
    assert ev[0].reaction_us is not None and ev[0].reaction_us >= 0


def test_xon_ends_the_pause_early_and_refresh_extends_it(agent_ns) -> None:
    ns, tmp = agent_ns
    send_from_peer(ns, [pfc_frame("02:00:00:00:00:01", {3: 0xFFFF, 4: 0xFFFF})])
    wait_for(lambda: gate_rate(ns, 3) == "1Kbit" and gate_rate(ns, 4) == "1Kbit")
    time.sleep(0.2)
    send_from_peer(ns, [pfc_frame("02:00:00:00:00:01", {3: 0})])
    wait_for(lambda: gate_rate(ns, 3) == "1Gbit")
    assert gate_rate(ns, 4) == "1Kbit"
    kinds = [(e.tc, e.event) for e in events(tmp)]
    assert (3, "resume") in kinds and (4, "resume") not in kinds


def test_xon_releases_the_held_packets_with_nothing_else_to_send(agent_ns) -> None:
    """An opened gate sends what it held only once the port's qdisc runs again: the agent
    kicks it as soon as tc has applied the change (no wait in its loop), and
    nothing else is sent on the port here that would run it instead."""
    ns, _tmp = agent_ns
    # no IPv6 on the port: its router solicitations would run the qdisc in the kick's place
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                    "net.ipv6.conf.sw1.disable_ipv6=1"], check=True)
    send_from_peer(ns, [pfc_frame("02:00:00:00:00:01", {3: 0xFFFF})])
    wait_for(lambda: gate_rate(ns, 3) == "1Kbit")
    send_from_peer(ns, [DATA3] * 5, intf="sw1")
    time.sleep(0.1)
    assert class3_stats(ns)["qlen"] >= 3  # the closing gate lets its burst go, the rest waits
    send_from_peer(ns, [pfc_frame("02:00:00:00:00:01", {3: 0})])
    # without a kick they would wait for the next frame on the port, or tbf's own timer
    # (seconds at the closed gate's rate)
    wait_for(lambda: class3_stats(ns)["qlen"] == 0, timeout=0.3)
    assert class3_stats(ns)["drops"] == 0


def test_ticks_for_a_backlogged_lossless_queue(agent_ns) -> None:
    ns, _tmp = agent_ns
    # hold class 3 with a PFC pause, then queue class-3 frames on the port
    send_from_peer(ns, [pfc_frame("02:00:00:00:00:01", {3: 0xFFFF})])
    wait_for(lambda: gate_rate(ns, 3) == "1Kbit")
    ip = bytes([0x45, 26 << 2]) + b"\x10\x00" + b"\x00" * 16
    frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + b"\x00" * 4000
    send_from_peer(ns, [frame] * 5, intf="sw1")
    cap = subprocess.run(["ip", "netns", "exec", ns, "timeout", "2", "tcpdump",
                          "--immediate-mode", "-c", "3", "-i", "tick", "-xx",
                          f"ether proto {ETH_P_TICK:#06x}"], capture_output=True, text=True)
    assert "3 packets captured" in cap.stderr, cap.stderr
    hexdump = "".join(ln.split(":", 1)[1] for ln in cap.stdout.splitlines() if "0x00" in ln)
    assert "88b6 0001 03" in hexdump.replace("  ", " "), cap.stdout[:400]


def test_telemetry_samples_the_classes_traffic_can_reach_and_every_class_last(
        tmp_path: Path) -> None:
    """Each sample has a row per port for the classes a packet can join (the default map's 3
    and 6, the default class 0; 3 is lossless) and for a class PFC named (4 here); the five
    others never hold, send or drop anything until they are named. The last sample, as the
    agent stops, has all eight, so every class's totals are on record."""
    gen = _agent_ns(tmp_path, None)
    ns, tmp = next(gen)
    try:
        send_from_peer(ns, [pfc_frame("02:00:00:00:00:01", {4: 100})])
        wait_for(lambda: any(e.tc == 4 for e in events(tmp)), timeout=3)
        time.sleep(0.25)  # a few samples (every 50 ms here) after the pause
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)  # stops the agent
    by_t: dict[float, set[int]] = {}
    for r in read_telemetry(telemetry_path(tmp, "sw")):
        by_t.setdefault(r.t_s, set()).add(r.tc)
    samples = [by_t[t] for t in sorted(by_t)]
    assert len(samples) >= 5
    assert samples[0] == {0, 3, 6}
    assert {0, 3, 4, 6} in samples[:-1]  # once class 4 was paused
    assert all(s in ({0, 3, 6}, {0, 3, 4, 6}) for s in samples[:-1])
    assert samples[-1] == set(range(8))


def test_tick_frame_layout() -> None:
    f = tick_frame("02:00:00:00:00:fe", 7, 3, 12345)
    assert len(f) == 60 and f[12:14] == ETH_P_TICK.to_bytes(2, "big")
    assert f[14:16] == b"\x00\x07" and f[16] == 3 and int.from_bytes(f[17:21], "big") == 12345
    # the sent field: all ones when unknown (the program then takes the backlog alone), else
    # the bytes released modulo 2^32, never all ones
    assert f[21:25] == b"\xff\xff\xff\xff"
    sent = {r: int.from_bytes(tick_frame("02:00:00:00:00:fe", 7, 3, 0, r)[21:25], "big")
            for r in (0, 5, 2**32 - 1, 2**32 + 7)}
    assert sent == {0: 0, 5: 5, 2**32 - 1: 2**32 - 2, 2**32 + 7: 7}


# -- PFC watchdog -------------------------------------------------------------------------

DETECT, RESTORE, POLL = 0.4, 0.6, 0.1


def watchdog_ns(tmp_path: Path, action: str):
    from testbed.config.models import PfcWatchdogConfig

    wd = PfcWatchdogConfig(enabled=True, detection_time_ms=int(DETECT * 1000),
                           restoration_time_ms=int(RESTORE * 1000),
                           polling_interval_ms=int(POLL * 1000), action=action)
    return _agent_ns(tmp_path, wd)


STORM = ("import socket,sys,time\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n"
         "s.bind(('peer',0))\nf=bytes.fromhex(sys.argv[1])\nend=time.time()+float(sys.argv[2])\n"
         "while time.time()<end:\n    s.send(f)\n    time.sleep(0.05)\n")
DATA3 = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + bytes([0x45, 26 << 2]) + b"\x10\x00" + \
    b"\x00" * 16 + b"\x00" * 4000


def storm(ns: str, seconds: float) -> subprocess.Popen:
    frame = pfc_frame("02:00:00:00:00:01", {3: 2000}).hex()  # 0.1 s pauses, refreshed
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", STORM, frame,
                             str(seconds)])


def class3_stats(ns: str) -> dict:
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "-j", "qdisc", "show", "dev",
                          "sw1"], capture_output=True, text=True).stdout
    return next(q for q in json.loads(out) if q["handle"] == f"{gate_major(3):x}:")


def run_storm(tmp_path: Path, action: str):
    gen = watchdog_ns(tmp_path, action)
    ns, tmp = next(gen)
    try:
        st = storm(ns, 2.0)
        wait_for(lambda: gate_rate(ns, 3) == "1Kbit")
        # packets wait in the paused queue: all five, since the gate's burst went in plugs
        t_start = send_from_peer(ns, [DATA3] * 5, intf="sw1")
        seen: list[PfcwdQueue] = []  # the watchdog's view of the queue, as it changed

        def detected() -> bool:
            with contextlib.suppress(FileNotFoundError, ValueError):
                q = read_pfcwd(pfcwd_path(tmp, "sw")).queues[0]
                if not seen or seen[-1] != q:
                    seen.append(q)
                return q.storm
            return False

        wait_for(detected, timeout=3, step=0.005)
        detect_s = time.monotonic() - t_start
        time.sleep(0.1)  # let the action take effect
        during = class3_stats(ns)
        gate_during = gate_rate(ns, 3)
        send_from_peer(ns, [DATA3] * 3, intf="sw1")
        time.sleep(0.2)
        after_more = class3_stats(ns)
        state = read_pfcwd(pfcwd_path(tmp, "sw"))
        st.wait()
        time.sleep(RESTORE + 3 * POLL)  # storm over: restored after restoration_time
        ev = events(tmp)
        countdown = [q.detection_left_ms for q in seen if not q.storm]
        return {"t_start": t_start, "detect_s": detect_s, "countdown": countdown,
                "during": during,
                "after_more": after_more,
                "gate_during": gate_during, "state": state, "events": ev,
                "gate_after": gate_rate(ns, 3)}
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)


def storm_events(ev: list[EventRow]) -> list[EventRow]:
    return [e for e in ev if e.event.startswith("storm")]


def test_watchdog_drop_detects_discards_and_restores(tmp_path: Path) -> None:
    r = run_storm(tmp_path, "drop")
    se = storm_events(r["events"])
    assert [e.event for e in se] == ["storm_detected", "storm_restored"], r["events"]
    assert "action=drop" in se[0].detail
    # the watchdog counted the detection time down a polling interval at each poll that found
    # the queue stuck, and declared the storm only when it ran out (pfc_detect)...
    left = [ms for ms in r["countdown"] if ms < DETECT * 1000]
    assert left and left[-1] == POLL * 1000 and left == sorted(left, reverse=True), r["countdown"]
    # ...within detection_time + polling_interval of the queue getting stuck (plus the time to
    # see the state file change)
    assert r["detect_s"] <= DETECT + POLL + 0.1, r["detect_s"]
    # the queue was discarded, later packets dropped, PFC no longer honoured
    assert r["during"]["qlen"] == 0 and r["gate_during"] == "1Gbit"
    assert r["after_more"]["drops"] >= 3
    assert r["state"].queues[0].storm is True
    restored = storm_events(r["events"])[1].detail
    assert int(restored.split("dropped=")[1]) >= 3 + 3  # the purged queue and later arrivals
    assert r["gate_after"] == "1Gbit"
    restored_after = se[1].t_s - se[0].t_s
    assert restored_after >= RESTORE
    # the telemetry's counters stay cumulative across the gate the drop re-created, and the
    # purged packets are among the drops
    rows = [r for r in read_telemetry(telemetry_path(tmp_path, "sw"))
            if r.port == 1 and r.tc == 3]
    for col in ("drops", "sent_packets"):
        vals = [getattr(r, col) for r in rows]
        assert vals == sorted(vals), (col, vals)
    assert rows[-1].drops >= 3 + 3


def test_watchdog_forward_ignores_pauses_and_transmits(tmp_path: Path) -> None:
    r = run_storm(tmp_path, "forward")
    se = storm_events(r["events"])
    assert se and "action=forward" in se[0].detail
    assert r["gate_during"] == "1Gbit" and r["during"]["qlen"] == 0
    assert r["after_more"]["drops"] == 0  # transmitted, not dropped
    assert r["during"]["packets"] >= 5


def test_watchdog_alert_only_logs(tmp_path: Path) -> None:
    r = run_storm(tmp_path, "alert")
    se = storm_events(r["events"])
    assert se and "action=alert" in se[0].detail
    assert r["gate_during"] == "1Kbit"  # still paused
    # 5 queued: the closing gate lets its burst (two 4 KB frames) go, 3 stay held
    assert r["during"]["qlen"] >= 3 and r["during"]["drops"] == 0


PFC_SOCKET_PROBE = """
import json, socket, sys, time
from testbed.agent.frames import pfc_socket, receive
s = pfc_socket("p1")
s.setblocking(False)
print("ready", flush=True)
sys.stdin.readline()  # the frames are sent
time.sleep(0.3)
print(json.dumps([[d.hex(), out] for d, _t, out in receive(s)]), flush=True)
"""


def test_the_pfc_socket_sees_its_own_port_both_ways_and_pfc_alone() -> None:
    """A port's PFC socket (testbed.agent.frames.pfc_socket) gets the PFC frames its port
    receives and sends, and nothing else: not a data frame, not another port's PFC frame."""
    ns = f"rtp{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for a, b in (("p1", "q1"), ("p2", "q2")):
            sh(ns, "link", "add", "dev", a, "type", "veth", "peer", "name", b)
            for i in (a, b):
                sh(ns, "link", "set", "dev", i, "up")
        probe = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                                  PFC_SOCKET_PROBE], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True,
                                 cwd=Path(__file__).parent.parent)
        assert probe.stdout.readline().strip() == "ready"
        rx = pfc_frame("02:00:00:00:00:01", {3: 100})
        tx = pfc_frame("02:00:00:00:00:02", {3: 0})
        other = pfc_frame("02:00:00:00:00:03", {4: 200})
        data = bytes.fromhex("02000000000102000000000208004500") + bytes(50)
        send_from_peer(ns, [rx, data], intf="q1")  # arrives on p1
        send_from_peer(ns, [tx], intf="p1")  # p1 sends it
        send_from_peer(ns, [other], intf="q2")  # arrives on p2
        out, _ = probe.communicate("sent\n", timeout=20)
        got = json.loads(out.strip().splitlines()[-1])
        assert got == [[rx.hex(), False], [tx.hex(), True]], got
    finally:
        subprocess.run(["ip", "netns", "del", ns])


def test_a_socket_opened_inside_a_namespace_works_from_outside() -> None:
    """What one agent process for every switch rests on: testbed.machine.netns.inside opens a
    switch's socket in its namespace and returns the thread home; the socket keeps its port."""
    import os
    import socket

    from testbed.machine.netns import inside

    ns = f"rtn{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        sh(ns, "link", "add", "dev", "swp", "type", "veth", "peer", "name", "far")
        sh(ns, "link", "set", "dev", "swp", "up")
        sh(ns, "link", "set", "dev", "far", "up")
        home = os.readlink("/proc/thread-self/ns/net")
        with inside(f"/run/netns/{ns}"):
            assert os.readlink("/proc/thread-self/ns/net") != home
            far = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5))
            far.bind(("far", 0x88B5))  # bind takes host order, socket() network order
            swp = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            swp.bind(("swp", 0))
        assert os.readlink("/proc/thread-self/ns/net") == home
        with pytest.raises(OSError):  # the port is not in this namespace
            socket.if_nametoindex("swp")
        frame = b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb5" + b"from outside".ljust(46, b"\0")
        swp.send(frame)
        far.settimeout(2)
        assert far.recv(2048)[:26] == frame[:26]
        swp.close()
        far.close()
    finally:
        subprocess.run(["ip", "netns", "del", ns])
