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
import sys
from dataclasses import dataclass

from testbed.config.constants import ETH_P_KICK, gate_class, gate_major
from testbed.machine.inputs import input_commands
from testbed.machine.netns import inside
from testbed.machine.qdisc_netlink import QdiscSocket, delete_request, tbf_request
from traffic.wire import ETH_P_MAC_CONTROL, NUM_TCS

CONTROL_CLASSID = 0x20
#: A class whose queue keeps nothing: a "kick" frame sent into it makes the kernel run the
#: port's qdisc once more. tbf stops its own timer when its rate is changed, and htb does not
#: look at a class again until something is enqueued, so an opened gate with nothing else to
#: send would keep its held packets until the next frame arrived.
KICK_CLASSID = 0x21
OPEN_RATE_BPS = 1_000_000_000  # 1 Gbit/s: far above any emulated link, never the bottleneck
CLOSED_RATE_BPS = 1_000  # 1 kbit/s (8 bit/s overflows tbf's burst field with jumbo frames)
#: No tbf burst is smaller than this, whatever the MTU (testbed.topology.qos counts it as leak).
MIN_BURST_BYTES = 1600


def gate_burst_bytes(max_frame: int) -> int:
    """A gate's tbf burst, open or closed: the largest frame (tbf drops at enqueue any frame
    larger than its burst), so also what a closing gate lets through."""
    return max(max_frame, MIN_BURST_BYTES)


#: The smallest Ethernet frame, without its FCS: the shortest plug.
MIN_FRAME_BYTES = 60


def plug_sizes(burst: int, max_frame: int) -> list[int]:
    """The frames that use up a closing gate's whole burst: as few as the largest frame
    allows, none shorter than an Ethernet frame (1600 bytes at a 1500-byte MTU: 1514 + 86).

    Why plugs: tbf refills its bucket to the whole burst whenever it is changed, so a gate
    that closes still lets its burst through, and the burst must hold the largest frame. Of
    4 KB data frames that is two; of 62-byte ACKs it is some 145, which crossed a 6 s pause at
    their unpaused rate (measured), where a real paused port holds every frame but the one on
    the wire. A closing gate whose queue is empty is handed its burst in plugs, which it
    sends at once: what comes after is held until the gate opens. (This kernel has no qdisc
    that holds packets indefinitely: no sch_plug.)"""
    sizes, left = [], burst
    while left > 0:
        n = min(left, max_frame)
        if 0 < left - n < MIN_FRAME_BYTES:
            n = left - MIN_FRAME_BYTES
        sizes.append(n)
        left -= n
    return sizes

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
    #: Mode ib-credit: the credited classes, whose gates hold one FIFO per input port
    #: (testbed.machine.inputs), and the switch's ports that may feed this one.
    credited: tuple[int, ...] = ()
    inputs: tuple[int, ...] = ()
    input_limit: int = 0  # bytes each input's FIFO holds (0: the class buffer)

    @property
    def rate_bps(self) -> int:
        return int(self.rate_mbps * 1_000_000)


def class_handle(tc: int) -> str:
    return f"1:{gate_major(tc):x}"


def gate_handle(tc: int) -> int:
    """The tbf gate's qdisc handle (major number), as an int for netlink."""
    return gate_major(tc) << 16


def gate_parent(tc: int) -> int:
    """The htb class the gate hangs from (:func:`class_handle`), as an int for netlink."""
    return (1 << 16) | gate_major(tc)


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
    for tc in spec.credited:
        lines += input_commands(dev, tc, spec.inputs, spec.input_limit or spec.buffers[tc],
                                gate_burst)
    return lines


@dataclass
class ClassStats:
    backlog_bytes: int
    backlog_packets: int
    drops: int
    sent_bytes: int
    sent_packets: int
    #: Bytes the class's queue dropped, as far as known: the kernel counts drops in packets
    #: only (PortGates estimates them when it counts them). None: not known at all (while the
    #: watchdog drops whatever comes, until :meth:`PortGates.rebase`).
    dropped_bytes: int | None = 0

    @property
    def released_bytes(self) -> int | None:
        """Bytes the queue has let go of, sent or dropped: what a resync tick subtracts from
        the bytes the P4 program admitted to find the queue's occupancy (None: unknown)."""
        return None if self.dropped_bytes is None else self.sent_bytes + self.dropped_bytes


class PortGates:
    """Opens and closes one port's class gates (over rtnetlink,
    :mod:`testbed.machine.qdisc_netlink`), and reads their statistics over netlink.

    Must be created inside the namespace that holds the interface (the switch agent runs there),
    or be given ``netns`` (a named namespace) for the netlink sockets.
    """

    def __init__(self, spec: PortSpec, ipr=None, netns: str | None = None,
                 reader=None) -> None:
        self.spec = spec
        # In our own namespace the fast dump reads the gates and the interface's index comes
        # from its name: no pyroute2, whose import costs each switch agent 0.15 s at start.
        # A test driving another namespace reads through pyroute2.
        self.reader = reader if netns is None else None
        self.ipr = ipr
        if netns is None:
            if self.reader is None:
                from testbed.machine.tcstats import QdiscReader

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
        # the port's sockets belong to its namespace, wherever this thread goes next
        with inside(f"/run/netns/{netns}" if netns else None):
            self.nl = QdiscSocket()
            self._kick_sock: socket.socket | None = self._open_kick_sock()
            # plugs go straight into a class: SO_PRIORITY names it (htb looks at it before any
            # filter), set before each plug
            self._plug_sock: socket.socket | None = self._open_kick_sock()
        # the plugs' source: the port's own MAC, by which its switch knows them (p4/ingress.p4)
        self._plug_header = (b"\x02" * 6 + self._plug_sock.getsockname()[4][:6]
                             + ETH_P_KICK.to_bytes(2, "big"))
        self.plugs = [0] * NUM_TCS  # plug frames sent, per class
        self.closed = [False] * NUM_TCS
        # What a class had sent and dropped before the watchdog re-created its gate (which
        # starts its counters from zero), so stats() stays cumulative; purged packets count
        # as drops.
        self._base = [(0, 0, 0)] * NUM_TCS  # (drops, sent_bytes, sent_packets)
        # Per class: the plugs still in the queue, by batch: the gate's sent-packet count at
        # which the batch's first plug leaves, and the plugs' sizes (plug(), _unplugged()).
        self._waiting: list[list[tuple[int, list[int]]]] = [[] for _ in range(NUM_TCS)]
        # Per class: the drops costed in bytes so far, and how many drops that covers; bytes
        # None while the watchdog drops whatever comes (drop_all to rebase).
        self._dropped: list[tuple[int, int | None]] = [(0, 0)] * NUM_TCS  # (drops, bytes)
        # Per class: the mean size of the frames its queue last held (0: it never held one).
        self._queued_mean = [0] * NUM_TCS

    def _request(self, message: bytes, what: str) -> None:
        """Carry out one request; a refusal (the port was deleted, say) goes to stderr, the
        agent's log, and the agent goes on, as with any other port fault."""
        try:
            self.nl.request(message)
        except OSError as e:
            print(f"{self.spec.ifname}: {what} refused: {e.strerror}", file=sys.stderr,
                  flush=True)

    def _gate(self, how: str, tc: int, closed: bool = False, limit: int | None = None) -> None:
        """``tc qdisc <how>`` of the class's tbf gate: applied when this returns."""
        self._request(tbf_request(
            how, self.ifindex, gate_parent(tc), gate_handle(tc),
            CLOSED_RATE_BPS if closed else OPEN_RATE_BPS,
            gate_burst_bytes(self.spec.max_frame),
            self.spec.buffers[tc] if limit is None else limit),
            f"qdisc {how} of the class {tc} gate")

    def _open_kick_sock(self):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((self.spec.ifname, 0))
        return s

    def kick(self) -> None:
        """Run the port's qdisc once (see KICK_CLASSID); the frame itself is dropped there."""
        if self._kick_sock is None:  # closed
            return
        with contextlib.suppress(OSError):  # dropped by design: ENOBUFS is the normal answer
            self._kick_sock.send(b"\x02" * 12 + ETH_P_KICK.to_bytes(2, "big") + bytes(46))

    def plug(self, tc: int) -> None:
        """Hand the class's closing gate its whole burst in plugs (:func:`plug_sizes`): with
        its queue empty, the gate sends them at once and then holds whatever comes until it
        opens. The plugs are no traffic of the class's: :meth:`stats` leaves them out, and
        the neighbour drops them."""
        sock = self._plug_sock
        if sock is None:  # closed
            return
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, gate_parent(tc))
        header = self._plug_header
        sizes: list[int] = []
        for size in plug_sizes(gate_burst_bytes(self.spec.max_frame), self.spec.max_frame):
            try:
                sock.send(header + bytes(size - len(header)))
            except OSError:  # the queue was full after all, and counted the plug a drop
                d, b, n = self._base[tc]
                self._base[tc] = (d - 1, b, n)
                continue
            sizes.append(size)
            self.plugs[tc] += 1
        # Read after the sends, not before: the plugs must follow the close at once, and a
        # netlink dump ahead of them widened the window in which data used the burst. The
        # plugs are the last frames the FIFO took, so the first leaves at the gate's count of
        # everything it took (sent + queued) less the plugs.
        kernel = self._kernel().get(tc) if sizes else None
        if kernel is not None:
            _backlog, qlen, _drops, _sent_bytes, sent_packets = kernel
            self._waiting[tc].append((sent_packets + qlen - len(sizes), sizes))

    def _unplugged(self, tc: int, backlog: int, qlen: int, sent_bytes: int,
                   sent_packets: int) -> tuple[int, int, int, int]:
        """The gate's own counters less its plugs: those gone from what it sent, those
        waiting from its queue. A plug is counted sent when it leaves, not when it is handed
        over: a plug that waited its turn behind another class's frames, or behind the
        class's own held packets, read as a packet the class had un-sent and as the plug's
        bytes in its queue (9,014 at a 9000-byte MTU), which a resync took for occupancy. A
        batch all gone goes into the base for good. (A packet that reaches the queue between
        plug()'s sends and its reading makes the plugs read as leaving one frame later than
        they do: microseconds of window.)"""
        batches = self._waiting[tc]
        if not batches:
            return backlog, qlen, sent_bytes, sent_packets
        gone_n = gone_b = wait_n = wait_b = 0
        keep = []
        for first, sizes in batches:
            gone = min(max(sent_packets - first, 0), len(sizes))
            if gone == len(sizes):
                d, b, n = self._base[tc]
                self._base[tc] = (d, b - sum(sizes), n - gone)
                continue
            keep.append((first, sizes))
            gone_n += gone
            gone_b += sum(sizes[:gone])
            wait_n += len(sizes) - gone
            wait_b += sum(sizes[gone:])
        self._waiting[tc] = keep
        return backlog - wait_b, qlen - wait_n, sent_bytes - gone_b, sent_packets - gone_n

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
        self._waiting[tc] = []  # purged with the queue, uncounted: the new gate counts from 0
        # Every frame that comes from now on is dropped, and the kernel counts them in packets
        # alone: their bytes are not known until rebase() is told what the P4 program admitted.
        self._dropped[tc] = (self._dropped[tc][0], None)
        self._request(delete_request(self.ifindex, gate_parent(tc), gate_handle(tc)),
                      f"qdisc del of the class {tc} gate")
        self._gate("add", tc, limit=1)
        self.closed[tc] = False

    def rebase(self, tc: int, released: int) -> None:
        """The class has let go of ``released`` bytes so far (modulo 2^32, as the P4 program
        counts what it admitted): its dropped bytes are what that leaves beside those sent.
        After the watchdog's drop action, from the bytes the program admitted less the
        backlog: the frames dropped meanwhile were of any size."""
        now = self.stats()[tc]
        self._dropped[tc] = (now.drops, (released - now.sent_bytes) & 0xFFFFFFFF)

    def restore(self, tc: int) -> None:
        """Back to the normal open gate with the class buffer."""
        self._gate("replace", tc)
        self.closed[tc] = False
        self.kick()

    def grant(self, tc: int, burst: int) -> None:
        """Mode ib-credit: the closed gate may send ``burst`` bytes more (a change refills tbf's
        bucket to the burst; a frame the bucket does not cover is held, one over the burst
        dropped at enqueue: the burst is at least the class's largest frame)."""
        self._request(tbf_request("change", self.ifindex, gate_parent(tc), gate_handle(tc),
                                  CLOSED_RATE_BPS, burst, self.spec.buffers[tc]),
                      f"qdisc change of the class {tc} gate")
        self.closed[tc] = True
        self.kick()

    def close(self, tc: int) -> None:
        self._gate("change", tc, closed=True)
        self.closed[tc] = True

    def open(self, tc: int) -> None:
        self._gate("change", tc)
        self.closed[tc] = False
        # The change is applied: kick now, and the held packets leave as the phantom (which
        # resumed draining with the XON) assumes. A fixed 2 ms wait before the kick left the
        # phantom 10 KB below the kernel queue after every pause at 40 Mbit/s; waiting for a
        # `tc` process to answer, as the gates were changed before, cost milliseconds more
        # when the cores were saturated.
        self.kick()

    def _kernel(self, dump=None) -> dict[int, tuple[int, int, int, int, int]]:
        """Per class, the gate's own counters: (backlog bytes, backlog packets, drops, sent
        bytes, sent packets), which start from zero whenever the gate is re-created."""
        if dump is None and self.reader is not None:
            dump = self.reader.dump()
        if dump is not None:
            return {q.tc: (q.backlog, q.qlen, q.drops, q.bytes, q.packets) for q in dump
                    if q.ifindex == self.ifindex and q.tc is not None}
        out: dict[int, tuple[int, int, int, int, int]] = {}
        for q in self.ipr.get_qdiscs(index=self.ifindex):
            tc = gate_class(q["handle"] >> 16)
            if tc is None or q.get_attr("TCA_KIND") != "tbf":
                continue
            st2 = q.get_attr("TCA_STATS2")
            basic = st2.get_attr("TCA_STATS_BASIC")
            queue = st2.get_attr("TCA_STATS_QUEUE")
            out[tc] = (queue["backlog"], queue["qlen"], queue["drops"], basic["bytes"],
                       basic["packets"])
        return out

    def stats(self, dump=None) -> dict[int, ClassStats]:
        """Per class: backlog, drops, sent, cumulative across re-created gates and without
        the plugs. ``dump`` is a QdiscReader dump to reuse."""
        out: dict[int, ClassStats] = {}
        for tc, (backlog, qlen, drops, sent_bytes, sent_packets) in self._kernel(dump).items():
            backlog, qlen, sent_bytes, sent_packets = self._unplugged(
                tc, backlog, qlen, sent_bytes, sent_packets)
            d, b, n = self._base[tc]
            out[tc] = self._class(tc, backlog, qlen, d + drops, b + sent_bytes, n + sent_packets)
        return out

    def _class(self, tc: int, backlog: int, qlen: int, drops: int, sent_bytes: int,
               sent_packets: int) -> ClassStats:
        """A class's statistics, its new drops costed in bytes once, as they are counted.

        A resync tick's occupancy is the P4 program's bytes admitted minus the bytes the queue
        released, so a drop costed wrong stays in it for the rest of the run. A queue drops
        the frames that find it full, which are like the frames it holds: a drop is costed at
        the mean size of the frames the queue held at the last reading that found any, else
        at the mean of those it sent (the largest frame before it sent any). The watchdog's
        drop action, which drops whatever comes, is counted by :meth:`rebase` instead.
        Costed at the mean of every frame sent, and again at each reading: when the watchdog
        had dropped 300 data frames and the class then sent ACKs, the occupancy grew by 172 KB
        that were never there (the phantom read 64 KB "below" an empty queue,
        deadlock-watchdog-on at 10 Mbit/s)."""
        if qlen:
            self._queued_mean[tc] = backlog // qlen
        seen, dropped = self._dropped[tc]
        if dropped is not None and drops > seen:
            mean = self._queued_mean[tc] or (sent_bytes // sent_packets if sent_packets
                                             else self.spec.max_frame)
            dropped += (drops - seen) * mean
            self._dropped[tc] = (drops, dropped)
        return ClassStats(backlog, qlen, drops, sent_bytes, sent_packets, dropped)

    def close_sockets(self) -> None:
        """The port's own sockets."""
        if self._plug_sock is not None:
            self._plug_sock.close()
            self._plug_sock = None
        self.nl.close()
        if self._kick_sock is not None:
            self._kick_sock.close()
            self._kick_sock = None
        if self.ipr is not None:
            with contextlib.suppress(Exception):
                self.ipr.close()
