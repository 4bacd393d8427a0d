"""The switch egress port in the kernel: link rate, eight strict-priority classes, a buffer per
class, and a gate per class that PFC closes and opens.

BMv2 cannot pause a queue (behavioral-model's QueueingLogicPriRL stamps each packet's departure
when it is enqueued), so the port is built on the switch's veth:

    root htb 1:  -- class 1:1 at the link rate
                     |-- class 1:1<c> (c = 0..7), prio 7-c, borrowing up to the link rate
                     |       `-- tbf <10+c>:  the gate: open = 1 Gbit/s, closed = 1 kbit/s;
                     |                        its byte limit is the class buffer
                     `-- class 1:20, prio 0: MAC control (PFC) frames, never paused
    u32 filters: EtherType 0x8808 -> 1:20; IPv4 DSCP d -> the class of d (DSCP_TO_TC_MAP);
    anything else -> the default class.

Closing a gate is a `tbf change` to a rate of 1 kbit/s with a burst of the largest frame (tbf
drops at enqueue any frame larger than its burst, so the burst must stay that large); it leaks
the frame already eligible, like a frame already on the wire. Opening resets the tokens.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from testbed.constants import ETH_P_MAC_CONTROL, NUM_TCS, gate_class, gate_major

CONTROL_CLASSID = 0x20
#: A class whose queue keeps nothing: a "kick" frame sent into it makes the kernel run the
#: port's qdisc once more. tbf stops its own timer when its rate is changed, and htb does not
#: look at a class again until something is enqueued, so an opened gate with nothing else to
#: send would keep its held packets until the next frame arrived.
KICK_CLASSID = 0x21
ETH_P_KICK = 0x88B7
OPEN_RATE_BPS = 1_000_000_000  # 1 Gbit/s: far above any emulated link, never the bottleneck
CLOSED_RATE_BPS = 1_000  # 1 kbit/s (8 bit/s overflows tbf's burst field with jumbo frames)
#: No tbf burst is smaller than this, whatever the MTU (testbed.qos counts it as leak).
MIN_BURST_BYTES = 1600


def gate_burst_bytes(max_frame: int) -> int:
    """A gate's tbf burst, open or closed: the largest frame (tbf drops at enqueue any frame
    larger than its burst), so also what a closing gate lets through."""
    return max(max_frame, MIN_BURST_BYTES)

#: htb's buckets (burst and cburst of every class): what a class may send at once, beyond its
#: rate, after it idled or was paused. A real port never sends faster than its line rate, and
#: the P4 phantom drains at exactly that rate: with a burst of the largest frame (9014 bytes),
#: every reopened gate let three 4 KB frames out back to back, and the phantom stood two
#: frames above the kernel queue after every pause (15 KB between two resyncs at 20 Mbit/s,
#: measured). Under one frame, a class sends one frame and then waits its turn. The bucket is
#: also how late the kernel may serve a class without losing rate: 1600 bytes is 0.64 ms at
#: 20 Mbit/s, 0.16 ms at 80.
HTB_BURST_BYTES = 1600


@dataclass(frozen=True)
class PortSpec:
    """One egress port's scheduler."""

    ifname: str
    rate_mbps: float
    buffers: tuple[int, ...]  # bytes per class, 8 entries
    dscp_to_tc: tuple[tuple[int, int], ...]
    default_tc: int = 0
    max_frame: int = 9014  # MTU + Ethernet header: the largest frame the gate must admit

    @property
    def rate_bps(self) -> int:
        return int(self.rate_mbps * 1_000_000)


def class_handle(tc: int) -> str:
    return f"1:{gate_major(tc):x}"


def gate_handle(tc: int) -> int:
    """The tbf gate's qdisc handle (major number), as an int for netlink."""
    return gate_major(tc) << 16


def scheduler_commands(spec: PortSpec) -> list[str]:
    """`tc -batch` lines that install the port (replacing whatever root qdisc was there)."""
    dev = spec.ifname
    rate = spec.rate_bps
    guaranteed = max(rate // 100, 8000)  # each class's own share; the rest is borrowed by prio
    gate_burst = gate_burst_bytes(spec.max_frame)
    # htb's DRR quantum: a whole frame a turn, whatever the buckets hold
    buckets = f"burst {HTB_BURST_BYTES} cburst {HTB_BURST_BYTES} quantum {gate_burst}"
    default_flow = class_handle(spec.default_tc)
    lines = [
        f"qdisc replace dev {dev} root handle 1: htb default {gate_major(spec.default_tc):x}",
        f"class add dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
        f"{buckets}",
        f"class add dev {dev} parent 1:1 classid 1:{CONTROL_CLASSID:x} htb rate {guaranteed}bit "
        f"ceil {rate}bit prio 0 {buckets}",
        f"qdisc add dev {dev} parent 1:{CONTROL_CLASSID:x} handle {CONTROL_CLASSID:x}: pfifo "
        "limit 1000",
        f"class add dev {dev} parent 1:1 classid 1:{KICK_CLASSID:x} htb rate 8000bit "
        f"ceil {rate}bit prio 7 {buckets}",
        f"qdisc add dev {dev} parent 1:{KICK_CLASSID:x} handle {KICK_CLASSID:x}: pfifo limit 0",
    ]
    for tc in range(NUM_TCS):
        lines += [
            f"class add dev {dev} parent 1:1 classid {class_handle(tc)} htb rate {guaranteed}bit "
            f"ceil {rate}bit prio {NUM_TCS - 1 - tc} {buckets}",
            f"qdisc add dev {dev} parent {class_handle(tc)} handle {gate_major(tc):x}: tbf "
            f"rate {OPEN_RATE_BPS}bit burst {gate_burst} limit {spec.buffers[tc]}",
        ]
    lines.append(f"filter add dev {dev} parent 1: protocol {ETH_P_MAC_CONTROL:#06x} prio 1 u32 "
                 f"match u32 0 0 flowid 1:{CONTROL_CLASSID:x}")
    lines.append(f"filter add dev {dev} parent 1: protocol {ETH_P_KICK:#06x} prio 2 u32 match u32 "
                 f"0 0 flowid 1:{KICK_CLASSID:x}")
    for dscp, tc in spec.dscp_to_tc:
        lines.append(f"filter add dev {dev} parent 1: protocol ip prio 3 u32 match ip dsfield "
                     f"{dscp << 2:#04x} 0xfc flowid {class_handle(tc)}")
    lines.append(f"filter add dev {dev} parent 1: protocol all prio 4 u32 match u32 0 0 "
                 f"flowid {default_flow}")
    return lines


@dataclass
class ClassStats:
    backlog_bytes: int
    backlog_packets: int
    drops: int
    sent_bytes: int
    sent_packets: int


@dataclass
class _Waiting:
    """A call waiting for tc's answer to its marker (TcBatch.when_applied)."""

    call: Callable[[], None]
    written: float  # when its marker was written (monotonic)
    ran: bool = False

    def run(self) -> None:
        self.ran = True
        self.call()


class TcBatch:
    """One long-lived `tc -force -batch -` process: a gate change is a line written to its stdin.

    pyroute2's tbf request is refused by the kernel at 1 kbit/s with a jumbo burst (every frame
    is dropped at enqueue, while the same change through `tc` holds them), and forking `tc` per
    change costs milliseconds of CPU; a kept process costs neither.

    When a change has taken effect: tc runs the lines in order, so a marker line answers once
    every line before it is applied. The marker asks for a device that does not exist, and tc
    (with -force) says so on its unbuffered stderr and goes on; any other line there is a
    failed command, passed on to our stderr (the agent's log). :meth:`when_applied` queues a
    call for that moment, which the owner's loop runs from :meth:`dispatch` when
    :meth:`fileno` is readable; :meth:`wait_applied` blocks for it. A marker still unanswered
    after MARKER_LATE_S (a `tc` that words its messages otherwise) has its call run anyway by
    :meth:`fire_overdue`: an opened gate is then kicked late, never left waiting.
    """

    MARKER_DEV = "rtb-marker"
    MARKER = f"qdisc show dev {MARKER_DEV}"
    MARKER_LATE_S = 0.05

    def __init__(self, netns: str | None = None) -> None:
        import subprocess

        cmd = ["tc", "-force", "-batch", "-"]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self._pending: list[_Waiting] = []  # one per marker written, in order
        self._partial = b""  # the start of a line tc has not finished writing

    def run(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def fileno(self) -> int:
        assert self.proc.stderr is not None
        return self.proc.stderr.fileno()

    def when_applied(self, call: Callable[[], None]) -> None:
        """Have ``call`` run (from :meth:`dispatch`) once every line written so far is applied."""
        self._pending.append(_Waiting(call, time.monotonic()))
        self.run(self.MARKER)

    def overdue_at(self) -> float | None:
        """When (monotonic) the oldest call not yet run falls due without its answer."""
        first = next((w for w in self._pending if not w.ran), None)
        return None if first is None else first.written + self.MARKER_LATE_S

    def fire_overdue(self) -> None:
        """Run the calls whose markers are MARKER_LATE_S old and unanswered. They stay queued,
        so that the answers, if they come, still pair with their markers in order."""
        now = time.monotonic()
        for w in self._pending:
            if not w.ran and w.written <= now - self.MARKER_LATE_S:
                w.run()
        # an answer a second late is none: forget those, or a tc that never answers would
        # have the queue grow with every gate change
        while self._pending and self._pending[0].ran and self._pending[0].written < now - 1.0:
            self._pending.pop(0)

    def dispatch(self) -> None:
        """Run the calls whose markers tc has answered (call when :meth:`fileno` is readable)."""
        import os
        import sys

        try:
            data = os.read(self.fileno(), 65536)
        except OSError:
            data = b""
        if not data:  # tc ended: nothing will be answered any more, run what waits
            answered = len(self._pending)
        else:
            *lines, self._partial = (self._partial + data).split(b"\n")
            marker = self.MARKER_DEV.encode()
            answered = sum(marker in ln for ln in lines)
            for ln in lines:
                if marker not in ln and not ln.startswith(b"Command failed -:"):
                    print(f"tc: {ln.decode(errors='replace')}", file=sys.stderr, flush=True)
        done, self._pending = self._pending[:answered], self._pending[answered:]
        for w in done:
            if not w.ran:
                w.run()

    def wait_applied(self) -> None:
        """Block until every line written so far is applied (at most MARKER_LATE_S without an
        answer)."""
        import select

        done: list[bool] = []
        self.when_applied(lambda: done.append(True))
        while not done:
            due = self.overdue_at()
            wait = max(0.0, due - time.monotonic()) if due is not None else 0.0
            ready, _, _ = select.select([self], [], [], wait)
            if ready:
                self.dispatch()
            self.fire_overdue()

    def close(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self.proc.wait(2)


def gate_command(spec: PortSpec, tc: int, closed: bool, limit: int | None = None) -> str:
    rate = CLOSED_RATE_BPS if closed else OPEN_RATE_BPS
    limit = spec.buffers[tc] if limit is None else limit
    return (f"qdisc change dev {spec.ifname} parent {class_handle(tc)} "
            f"handle {gate_major(tc):x}: tbf rate {rate}bit "
            f"burst {gate_burst_bytes(spec.max_frame)} limit {limit}")


class PortGates:
    """Opens and closes one port's class gates, and reads their statistics over netlink.

    Must be created inside the namespace that holds the interface (the switch agent runs there),
    or be given ``netns`` (a named namespace) for both the netlink socket and the tc process.
    """

    def __init__(self, spec: PortSpec, ipr=None, batch: TcBatch | None = None,
                 netns: str | None = None, reader=None,
                 kick_when_applied: bool = False) -> None:
        self.spec = spec
        self.batch = batch or TcBatch(netns)
        # In our own namespace the fast dump reads the gates and the interface's index comes
        # from its name: no pyroute2, whose import costs each switch agent 0.15 s at start.
        # A test driving another namespace reads through pyroute2.
        self.reader = reader if netns is None else None
        self.ipr = ipr
        if netns is None:
            if self.reader is None:
                from testbed.tcstats import QdiscReader

                self.reader = QdiscReader()
            try:
                self.ifindex = socket.if_nametoindex(spec.ifname)
            except OSError:
                raise LookupError(f"no interface {spec.ifname} in this namespace") from None
        else:
            from pyroute2 import IPRoute

            self.ipr = ipr or IPRoute(netns=netns)
            links = self.ipr.link_lookup(ifname=spec.ifname)
            if not links:
                raise LookupError(f"no interface {spec.ifname} in namespace {netns}")
            self.ifindex = links[0]
        self.closed = [False] * NUM_TCS
        # What a class had sent and dropped before the watchdog re-created its gate (which
        # starts its counters from zero), so stats() stays cumulative; purged packets count
        # as drops.
        self._base = [(0, 0, 0)] * NUM_TCS  # (drops, sent_bytes, sent_packets)
        self._kick_sock = None
        self.netns = netns
        if netns is None:  # now, while in the port's namespace (the agent may leave it)
            self._kick_sock = self._open_kick_sock()
        #: False: open() waits until tc has applied the change, then kicks. True: it has the
        #: batch kick then (TcBatch.when_applied) and returns at once: the switch agent, whose
        #: single-threaded loop must not wait, runs the batch's dispatch when tc answers.
        self.kick_when_applied = kick_when_applied

    def _open_kick_sock(self):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((self.spec.ifname, 0))
        return s

    def kick(self) -> None:
        """Run the port's qdisc once (see KICK_CLASSID); the frame itself is dropped there."""
        if self._kick_sock is None:
            if self.netns:  # a test driving another namespace: no socket of ours there
                import subprocess

                subprocess.run(["ip", "netns", "exec", self.netns, "python3", "-c",
                                "import socket;s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW);"
                                f"s.bind(('{self.spec.ifname}',0));"
                                f"s.send(b'\\2'*12+bytes.fromhex('{ETH_P_KICK:04x}')+bytes(46))"],
                               check=False)
                return
            self._kick_sock = self._open_kick_sock()
        with contextlib.suppress(OSError):  # dropped by design: ENOBUFS is the normal answer
            self._kick_sock.send(b"\x02" * 12 + ETH_P_KICK.to_bytes(2, "big") + bytes(46))

    def _wait_rate(self, tc: int, opened: bool, timeout: float = 0.05) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self.gate_rate(tc) >= OPEN_RATE_BPS) == opened:
                return
            time.sleep(0.0005)

    def _set(self, tc: int, closed: bool) -> None:
        self.batch.run(gate_command(self.spec, tc, closed))

    def gate_rate(self, tc: int) -> int:
        """The gate's current rate in bit/s, read back from the kernel."""
        if self.reader is not None:
            for q in self.reader.dump():
                if q.ifindex == self.ifindex and q.handle == gate_handle(tc):
                    return q.rate_bps
            raise LookupError(f"no gate for class {tc} on {self.spec.ifname}")
        for q in self.ipr.get_qdiscs(index=self.ifindex):
            if q["handle"] == gate_handle(tc):
                return q.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")["rate"] * 8
        raise LookupError(f"no gate for class {tc} on {self.spec.ifname}")

    def drop_all(self, tc: int) -> None:
        """Watchdog drop: discard the queue (delete the gate) and put back an open gate that
        holds nothing, so whatever arrives is dropped and counted."""
        now = self.stats().get(tc)
        if now is not None:
            self._base[tc] = (now.drops + now.backlog_packets, now.sent_bytes, now.sent_packets)
        self.batch.run(f"qdisc del dev {self.spec.ifname} parent {class_handle(tc)} "
                       f"handle {gate_major(tc):x}:")
        self.batch.run(gate_command(self.spec, tc, False, limit=1).replace(
            "qdisc change", "qdisc add"))
        self.closed[tc] = False

    def restore(self, tc: int) -> None:
        """Back to the normal open gate with the class buffer."""
        self.batch.run(gate_command(self.spec, tc, False).replace("qdisc change",
                                                                  "qdisc replace"))
        self.closed[tc] = False
        self._wait_rate(tc, True)
        self.kick()

    def close(self, tc: int) -> None:
        self._set(tc, True)
        self.closed[tc] = True

    def open(self, tc: int) -> None:
        self._set(tc, False)
        self.closed[tc] = False
        # Kick the moment tc has applied the change: the held packets leave then, as the
        # phantom (which resumed draining with the XON) assumes. A fixed 2 ms wait before the
        # kick left the phantom 10 KB below the kernel queue after every pause at 40 Mbit/s;
        # polling the kernel until the rate changed cost the agent a third of a core.
        if self.kick_when_applied:
            self.batch.when_applied(self.kick)
            return
        self.batch.wait_applied()
        self.kick()

    def stats(self, dump=None) -> dict[int, ClassStats]:
        """Per class: backlog, drops, sent. ``dump`` is a QdiscReader dump to reuse."""
        if dump is None and self.reader is not None:
            dump = self.reader.dump()
        if dump is not None:
            out_fast: dict[int, ClassStats] = {}
            for q in dump:
                tc = gate_class(q.handle >> 16)
                if q.ifindex == self.ifindex and q.kind == "tbf" and tc is not None:
                    d, b, n = self._base[tc]
                    out_fast[tc] = ClassStats(q.backlog, q.qlen, d + q.drops, b + q.bytes,
                                              n + q.packets)
            return out_fast
        out: dict[int, ClassStats] = {}
        for q in self.ipr.get_qdiscs(index=self.ifindex):
            tc = gate_class(q["handle"] >> 16)
            if tc is None or q.get_attr("TCA_KIND") != "tbf":
                continue
            st2 = q.get_attr("TCA_STATS2")
            basic = st2.get_attr("TCA_STATS_BASIC")
            queue = st2.get_attr("TCA_STATS_QUEUE")
            d, b, n = self._base[tc]
            out[tc] = ClassStats(queue["backlog"], queue["qlen"], d + queue["drops"],
                                 b + basic["bytes"], n + basic["packets"])
        return out

    def close_sockets(self) -> None:
        """The port's own sockets (a shared tc batch is its owner's to close)."""
        if self._kick_sock is not None:
            self._kick_sock.close()
            self._kick_sock = None
        if self.ipr is not None:
            with contextlib.suppress(Exception):
                self.ipr.close()

    def shutdown(self) -> None:
        self.close_sockets()
        self.batch.close()
