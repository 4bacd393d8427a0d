"""The RoCEv2 endpoint: one process per host, the host's RDMA NIC at emulation scale.

It owns a raw socket on the host's interface and does what a ConnectX NIC does for RC traffic:
paces each QP at its DCQCN rate and the port at line rate, answers data with ACK/NAK, sends
CNPs for CE-marked packets, reacts to CNPs, and stops a traffic class while the switch pauses it
with PFC. Two fault modes serve the experiments: a slow receiver (sends PFC when its receive
queue backs up) and a broken NIC (sends PAUSE continuously).

Control: a unix socket taking one JSON object per line and answering one per line (see
:mod:`traffic.client` and ``python -m traffic.endpoint --help``). Output: ``qp_timeseries.csv``
(one row per QP per sample) and ``messages.csv`` (one row per completed message) in ``out_dir``,
with the schema documented in :data:`QP_COLUMNS` and :data:`MESSAGE_COLUMNS`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import json
import logging
import os
import select
import signal
import socket
import struct
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.constants import ETH_P_ALL, NUM_TCS, PACKET_OUTGOING, PFC_MAX_QUANTA, PFC_QUANTUM_BITS
from traffic.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint
from traffic.packets import (
    ACK,
    CNP,
    DATA_OPCODES,
    DSCP_CNP,
    ECN_CE,
    REJECT_REASONS,
    Malformed,
    ParsedRoce,
    Rejected,
    RoceFrameBuilder,
    parse_pfc,
    parse_roce,
    pfc_frame,
)
from traffic.qp import Requester, Responder

log = logging.getLogger("roce.endpoint")

SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20+: do not hand our own sent frames back to us
PACKET_STATISTICS = 6  # packet(7): struct tpacket_stats {tp_packets, tp_drops}
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # socket(7); Python may not name them
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SOCKET_BUFFER_BYTES = 8 * 1024 * 1024
#: How far behind schedule a pacer may fall before it forgets the debt; keeps the average rate
#: exact when the loop wakes late, without letting a stalled QP burst afterwards.
PACING_SLACK_S = 0.005
#: A sleeping loop wakes for a QP pacer's next frame no sooner than this: at 1,000 frames/s it
#: sends three frames per wake-up instead of one (a wake-up costs more than a frame: ~30 us of
#: CPU on a VM). The pacers keep the debt of a late wake (see PACING_SLACK_S), so the average
#: rate stays exact; must stay below PACING_SLACK_S with a margin for scheduling delay. The NIC's
#: line-rate pacer is not put off. (1,000 frames/s: 2 ms -> 4.4% of a core, 3 ms -> 3.0%.)
TIMER_GRANULARITY_S = 0.003
#: Frames sent per loop turn before the loop looks at received frames and commands again.
BURST_FRAMES = 64
STORM_INTERVAL_S = 0.02  # a storming NIC's PAUSE frames: 50 per second
HOUSEKEEPING_S = 0.01

#: DSCP for each traffic class when no table is given (run by hand): the class selectors, and
#: 26 for RoCE. The testbed passes its fabric's own (--tc-dscp, from qos.dscp_to_tc_map), so
#: that each class lands in that class at the switches.
TC_TO_DSCP = {0: 0, 1: 8, 2: 16, 3: 26, 4: 32, 5: 40, 6: 48, 7: 56}
#: The class of CNPs when none is given: where DSCP_CNP lands in the fabric's default map.
CNP_TC = 6

QP_COLUMNS = [
    ("t_s", "seconds on the run's clock (the endpoint's own start when run by hand)"),
    ("qpn", "local QP number"),
    ("role", "requester (sends data) or responder (receives it)"),
    ("tc", "traffic class"),
    ("rate_bps", "DCQCN current rate RC (requester)"),
    ("target_bps", "DCQCN target rate RT (requester)"),
    ("alpha", "DCQCN alpha (requester)"),
    ("goodput_bps", "payload bytes acknowledged (requester) or accepted (responder) per second "
                    "over the last sample"),
    ("bytes", "payload bytes acknowledged or accepted so far"),
    ("packets_sent", "data packets sent, retransmissions included"),
    ("retransmitted", "data packets sent again (Go-Back-N or timeout)"),
    ("naks", "NAKs received (requester) or sent (responder)"),
    ("timeouts", "retransmission timeouts"),
    ("cnps_received", "CNPs received (requester)"),
    ("cnps_sent", "CNPs sent (responder)"),
    ("ce_marked", "CE-marked data packets received (responder)"),
    ("paused_s", "seconds this QP's class has been paused by PFC so far"),
]
MESSAGE_COLUMNS = [
    ("qpn", "local QP number"), ("msg_id", "message number on that QP"),
    ("kind", "write or send"), ("size", "bytes"),
    ("posted_s", "when posted, on the same clock as t_s"),
    ("completed_s", "when its last packet was acknowledged"),
    ("fct_s", "flow (message) completion time"),
]


_INF = float("inf")


def _paced(next_time: float, now: float, cost: float) -> float:
    """Advance a pacer's next-send time by one frame's cost, forgiving lateness past a slack."""
    return max(next_time, now - PACING_SLACK_S) + cost


def qp_source_port(qpn: int, dqpn: int) -> int:
    """UDP source port of a QP: a hash of the QP numbers into 49152-65535, as rxe does."""
    return 0xC000 | (zlib.crc32(f"{qpn}:{dqpn}".encode()) & 0x3FFF)


@dataclass
class EndpointConfig:
    intf: str
    mac: str
    ip: str
    next_hop_mac: str
    line_rate_bps: float
    control_socket: Path
    out_dir: Path
    mtu: int = 4096  # RoCE path MTU: payload bytes per packet
    tc_to_dscp: dict[int, int] = field(default_factory=lambda: dict(TC_TO_DSCP))
    cnp_dscp: int = DSCP_CNP
    cnp_tc: int = CNP_TC  # the class the CNP's DSCP lands in: a pause of it holds CNPs back
    sample_period_s: float = 0.1
    cnp_interval_s: float | None = None  # default: [Z15]'s 50 us scaled to the link
    dcqcn: dict = field(default_factory=dict)  # overrides of DcqcnParams.scaled
    dcqcn_enabled: bool = True
    rx_buffer_packets: int = 256  # slow-receiver queue before it drops
    t0_monotonic: float | None = None  # origin of t_s; the testbed passes the run's


#: The endpoint-wide counters of the ``stats`` command (its ``"stats"`` object), in the order of
#: :class:`EndpointStats`. Every received frame is counted once in ``frames_rx`` and, if it is
#: dropped, once in exactly one of not_roce, rx_rejected, malformed, bad_icrc, unknown_qp,
#: rx_dropped.
STATS_COLUMNS = [
    ("frames_rx", "frames received (PFC included)"),
    ("frames_tx", "frames sent"),
    ("malformed", "RoCEv2 frames dropped as broken: truncated, an opcode the endpoint does not "
                  "implement, or a data opcode to a requester / an ACK or CNP to a responder"),
    ("bad_icrc", "RoCEv2 frames dropped for a wrong ICRC"),
    ("unknown_qp", "RoCEv2 frames to a QP number this endpoint does not have"),
    ("not_roce", "frames that are neither PFC nor IPv4/UDP (ARP, IPv6, TCP...): ignored"),
    ("rx_rejected", "frames dropped by the receive path's header checks, as a RoCE NIC drops "
                    "them, by reason: ip_version, ip_ihl (options), ip_checksum, ip_fragment, "
                    "udp_port (UDP not to 4791), udp_length (disagrees with IPv4's), bth_tver"),
    ("pfc_rx", "PFC frames received"),
    ("pfc_tx", "PFC frames sent (slow-receiver or storm fault)"),
    ("cnps_sent", "CNPs sent"),
    ("cnps_received", "CNPs received"),
    ("rx_dropped", "data frames a slow receiver dropped because its queue was full"),
    ("send_errors", "frames the socket refused (ENOBUFS while the qdisc is full)"),
    ("rx_socket_drops", "frames the kernel dropped because the endpoint's receive buffer was "
                        "full (the process did not keep up; a NIC's RX overflow)"),
]


@dataclass
class EndpointStats:
    """Endpoint-wide counters; :data:`STATS_COLUMNS` says what each counts."""

    frames_rx: int = 0
    frames_tx: int = 0
    malformed: int = 0
    bad_icrc: int = 0
    unknown_qp: int = 0
    not_roce: int = 0
    rx_rejected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))
    pfc_rx: int = 0
    pfc_tx: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0
    rx_dropped: int = 0
    send_errors: int = 0
    rx_socket_drops: int = 0


@dataclass
class QpState:
    qpn: int
    role: str
    tc: int
    peer_ip: str
    peer_qpn: int
    sport: int
    requester: Requester | None = None
    responder: Responder | None = None
    rp: ReactionPoint | None = None
    rate_cap_bps: float | None = None
    next_time: float = 0.0
    cnps_received: int = 0
    cnps_sent: int = 0
    post_until: float = 0.0  # keep the send queue topped up until then (duration flows)
    post_kind: str = "write"
    post_size: int = 0
    _last_bytes: int = 0
    builder: RoceFrameBuilder | None = None  # ACKs (responder)
    cnp_builder: RoceFrameBuilder | None = None  # CNPs, with the CNP DSCP (responder)

    @property
    def rate_bps(self) -> float:
        r = self.rp.rc if self.rp else float("inf")
        return min(r, self.rate_cap_bps) if self.rate_cap_bps else r


class Endpoint:
    def __init__(self, cfg: EndpointConfig, clock=time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        # the run's clock when the testbed gives its origin, so the endpoints' series line up
        # with the switches' telemetry; else the endpoint's own start
        self.t0 = cfg.t0_monotonic if cfg.t0_monotonic is not None else clock()
        self.stats = EndpointStats()
        self.qps: dict[int, QpState] = {}
        self.np = NotificationPoint(cfg.cnp_interval_s) if cfg.cnp_interval_s is not None else \
            NotificationPoint.scaled(cfg.line_rate_bps)
        self.dcqcn = DcqcnParams.scaled(cfg.line_rate_bps, **cfg.dcqcn)
        self.paused_until = [0.0] * NUM_TCS
        self.paused_total = [0.0] * NUM_TCS
        self._pause_mark = [0.0] * NUM_TCS
        self.nic_free_at = 0.0
        self.ctrl_q: list[collections.deque[bytes]] = [collections.deque() for _ in range(NUM_TCS)]
        self.fault: dict = {"mode": "none"}
        self.rx_queue: collections.deque[tuple[bytes, float]] = collections.deque()
        self._rx_next = 0.0
        self._xoff_sent = False
        self._storm_next = 0.0
        self._rr = 0
        self._running = True
        self._next_sample = 0.0
        self._builders: dict[tuple[str, int, int], RoceFrameBuilder] = {}
        self._requesters: list[QpState] = []
        self._next_housekeeping = 0.0
        self._ctrl_queued = 0  # frames waiting in ctrl_q, so the loop skips the check when 0
        self._byte_s = 8 / cfg.line_rate_bps  # NIC seconds per byte
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        self._qp_csv = open(cfg.out_dir / "qp_timeseries.csv", "w", newline="")  # noqa: SIM115
        self._qp_w = csv.writer(self._qp_csv)
        self._qp_w.writerow([c for c, _ in QP_COLUMNS])
        self._msg_csv = open(cfg.out_dir / "messages.csv", "w", newline="")  # noqa: SIM115
        self._msg_w = csv.writer(self._msg_csv)
        self._msg_w.writerow([c for c, _ in MESSAGE_COLUMNS])
        self._open_sockets()

    # -- sockets ------------------------------------------------------------------------
    def _open_sockets(self) -> None:
        self.raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        # A NIC's buffers: deep enough to ride out a few tens of ms without the CPU. The
        # FORCE options pass net.core.rmem_max/wmem_max, which would cap them at 208 KB (root).
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF),
                             (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                self.raw.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER_BYTES)
            except OSError:
                self.raw.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER_BYTES)
        self.raw.bind((self.cfg.intf, 0))
        # Without our own frames coming back, recv() serves: recvfrom() would cost an extra
        # ioctl per frame (CPython looks up the interface name for the address it returns).
        self._ignore_outgoing = True
        try:
            self.raw.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            self._ignore_outgoing = False
        self.raw.setblocking(False)
        # Hold UDP 4791 so the host kernel does not answer RoCE with ICMP port unreachable.
        self.quiet = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.quiet.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.quiet.bind((self.cfg.ip, 4791))
        with contextlib.suppress(FileNotFoundError):
            self.cfg.control_socket.unlink()
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ctl.bind(str(self.cfg.control_socket))
        self.ctl.listen(8)
        self.ctl.setblocking(False)
        self.clients: dict[socket.socket, bytes] = {}

    def close(self) -> None:
        self.sample(force=True)
        for s in [self.raw, self.quiet, self.ctl, *self.clients]:
            with contextlib.suppress(OSError):
                s.close()
        with contextlib.suppress(FileNotFoundError):
            self.cfg.control_socket.unlink()
        self._qp_csv.close()
        self._msg_csv.close()

    def now(self) -> float:
        return self.clock() - self.t0

    def _builder(self, peer_ip: str, sport: int, dscp: int) -> RoceFrameBuilder:
        key = (peer_ip, sport, dscp)
        b = self._builders.get(key)
        if b is None:
            b = RoceFrameBuilder(self.cfg.mac, self.cfg.next_hop_mac, self.cfg.ip, peer_ip, sport,
                                 dscp=dscp)
            self._builders[key] = b
        return b

    def _send(self, frame: bytes, now: float | None = None) -> None:
        try:
            self.raw.send(frame)
            self.stats.frames_tx += 1
        except OSError as exc:  # ENOBUFS while the qdisc is full: counted, not fatal
            self.stats.send_errors += 1
            log.debug("send failed: %s", exc)
        self.nic_free_at = _paced(self.nic_free_at, self.now() if now is None else now,
                                  len(frame) * self._byte_s)

    def _send_ctrl(self, tc: int, frame: bytes, now: float) -> None:
        if self.paused_until[tc] > now:
            self.ctrl_q[tc].append(frame)
            self._ctrl_queued += 1
        else:
            self._send(frame, now)

    # -- QPs ----------------------------------------------------------------------------
    def create_qp(self, qpn: int, role: str, peer_ip: str, peer_qpn: int, tc: int = 3,
                  sport: int | None = None, rate_cap_mbps: float | None = None,
                  start_psn: int = 0, max_outstanding: int = 32, rto_s: float = 0.5) -> QpState:
        if qpn in self.qps:
            raise ValueError(f"QP {qpn} exists")
        if role not in ("requester", "responder"):
            raise ValueError("role must be 'requester' or 'responder'")
        if not 0 <= tc <= 7:
            raise ValueError("tc must be 0..7")
        dscp = self.cfg.tc_to_dscp.get(tc)
        if dscp is None:
            raise ValueError(f"class {tc} has no DSCP on this host (--tc-dscp); classes: "
                             f"{', '.join(map(str, sorted(self.cfg.tc_to_dscp)))}")
        sport = sport or qp_source_port(qpn, peer_qpn)
        st = QpState(qpn, role, tc, peer_ip, peer_qpn, sport,
                     rate_cap_bps=rate_cap_mbps * 1e6 if rate_cap_mbps else None)
        builder = self._builder(peer_ip, sport, dscp)
        if role == "requester":
            st.requester = Requester(qpn, peer_qpn, builder, mtu=self.cfg.mtu,
                                     start_psn=start_psn, max_outstanding=max_outstanding,
                                     rto_s=rto_s)
            if self.cfg.dcqcn_enabled:
                st.rp = ReactionPoint(self.dcqcn, now=self.now())
            self._requesters.append(st)
        else:
            st.responder = Responder(qpn, peer_qpn, start_psn=start_psn)
            st.builder = builder
            st.cnp_builder = self._builder(peer_ip, sport, self.cfg.cnp_dscp)
        self.qps[qpn] = st
        return st

    # -- receive ------------------------------------------------------------------------
    def _expected_payload_crc(self, p: ParsedRoce) -> int | None:
        """For :func:`parse_roce`: the payload's CRC if a responder QP expected exactly it."""
        st = self.qps.get(p.dqpn)
        if st is None or st.responder is None:
            return None
        return st.responder.payload_crc(p)

    def _on_frame(self, frame: bytes, now: float) -> None:
        self.stats.frames_rx += 1
        pfc = parse_pfc(frame)
        if pfc is not None:
            self.stats.pfc_rx += 1
            for tc, quanta in pfc.items():
                self._pause(tc, quanta, now)
            return
        try:
            p = parse_roce(frame, self._expected_payload_crc)
        except Malformed as exc:
            self.stats.malformed += 1
            log.debug("malformed: %s", exc)
            return
        except Rejected as exc:  # a header check a NIC makes (packets.REJECT_REASONS)
            self.stats.rx_rejected[exc.reason] += 1
            log.debug("rejected (%s): %s", exc.reason, exc)
            return
        if p is None:
            self.stats.not_roce += 1
            return
        if not p.icrc_ok:
            self.stats.bad_icrc += 1
            return
        st = self.qps.get(p.dqpn)
        if st is None:
            self.stats.unknown_qp += 1
            return
        if p.opcode == ACK and st.requester:
            st.requester.on_ack(p, now)
            self._log_completions(st)
        elif p.opcode == CNP and st.requester:
            self.stats.cnps_received += 1
            st.cnps_received += 1
            if st.rp:
                st.rp.on_cnp(now)
        elif p.opcode in DATA_OPCODES and st.responder:
            if self.fault["mode"] == "slow_receiver":
                self._enqueue_slow(frame, p, now)
                return
            self._deliver(st, p, now)
        else:
            self.stats.malformed += 1  # a data opcode to a requester, an ACK to a responder

    def _deliver(self, st: QpState, p: ParsedRoce, now: float) -> None:
        assert st.responder is not None and st.builder is not None
        reply = st.responder.on_data(p)
        if reply is not None:
            syn, psn, msn = reply
            b = st.builder
            self._send_ctrl(st.tc, b.frame(ACK, st.peer_qpn, psn, ext=b.aeth(syn, msn)), now)
        if p.ecn == ECN_CE:
            st.responder.stats.ce_marked += 1
            if self.np.should_send(st.qpn, now):
                assert st.cnp_builder is not None
                cnp = st.cnp_builder.frame(CNP, st.peer_qpn, 0, b"\x00" * 16, becn=True)
                self._send_ctrl(self.cfg.cnp_tc, cnp, now)
                st.cnps_sent += 1
                self.stats.cnps_sent += 1

    def _pause(self, tc: int, quanta: int, now: float) -> None:
        was = self.paused_until[tc] > now
        if was:
            self.paused_total[tc] += now - self._pause_mark[tc]
        self._pause_mark[tc] = now
        self.paused_until[tc] = now + quanta * PFC_QUANTUM_BITS / self.cfg.line_rate_bps

    def paused_seconds(self, tc: int, now: float) -> float:
        extra = min(now, self.paused_until[tc]) - self._pause_mark[tc]
        return self.paused_total[tc] + max(0.0, extra)

    # -- faults -------------------------------------------------------------------------
    def _enqueue_slow(self, frame: bytes, p, now: float) -> None:
        if len(self.rx_queue) >= self.cfg.rx_buffer_packets:
            self.stats.rx_dropped += 1
            return
        self.rx_queue.append((frame, now))

    def _service_slow(self, now: float) -> float | None:
        f = self.fault
        if f["mode"] != "slow_receiver":
            return None
        period = 1.0 / f["max_rx_pps"]
        while self.rx_queue and self._rx_next <= now:
            frame, _ = self.rx_queue.popleft()
            p = parse_roce(frame, self._expected_payload_crc)  # its ICRC was checked on arrival
            st = self.qps.get(p.dqpn)
            if st is not None and st.responder is not None:
                self._deliver(st, p, now)
            self._rx_next = max(self._rx_next, now) + period
        depth = len(self.rx_queue)
        tc = f.get("tc", 3)
        if depth >= f["xoff_packets"] and not self._xoff_sent:
            self._send(pfc_frame(self.cfg.mac, {tc: PFC_MAX_QUANTA}))
            self.stats.pfc_tx += 1
            self._xoff_sent = True
            self._xoff_at = now
        elif self._xoff_sent and (depth <= f["xon_packets"]):
            self._send(pfc_frame(self.cfg.mac, {tc: 0}))
            self.stats.pfc_tx += 1
            self._xoff_sent = False
        elif self._xoff_sent and now - self._xoff_at > self._refresh_s(PFC_MAX_QUANTA):
            self._send(pfc_frame(self.cfg.mac, {tc: PFC_MAX_QUANTA}))  # refresh before expiry
            self.stats.pfc_tx += 1
            self._xoff_at = now
        return self._rx_next if self.rx_queue else None

    def _refresh_s(self, quanta: int) -> float:
        return quanta * PFC_QUANTUM_BITS / self.cfg.line_rate_bps / 2

    def _service_storm(self, now: float) -> float | None:
        f = self.fault
        if f["mode"] != "storm":
            return None
        if now >= self._storm_next:
            self._send(pfc_frame(self.cfg.mac, {f.get("tc", 3): f.get("quanta", PFC_MAX_QUANTA)}))
            self.stats.pfc_tx += 1
            # a broken NIC floods PAUSE: far more often than a pause needs refreshing
            self._storm_next = now + min(self._refresh_s(f.get("quanta", PFC_MAX_QUANTA)),
                                         STORM_INTERVAL_S)
        return self._storm_next

    def set_fault(self, mode: str, **kw) -> dict:
        if mode == "none":
            if self.fault["mode"] == "slow_receiver" and self._xoff_sent:
                self._send(pfc_frame(self.cfg.mac, {self.fault.get("tc", 3): 0}))
                self._xoff_sent = False
            self.fault = {"mode": "none"}
        elif mode == "storm":
            self.fault = {"mode": "storm", "tc": int(kw.get("tc", 3)),
                          "quanta": int(kw.get("quanta", PFC_MAX_QUANTA))}
            self._storm_next = 0.0
        elif mode == "slow_receiver":
            pps = float(kw.get("max_rx_pps", 0))
            if pps <= 0:
                raise ValueError("slow_receiver needs max_rx_pps > 0")
            xoff = int(kw.get("xoff_packets", 32))
            self.fault = {"mode": "slow_receiver", "tc": int(kw.get("tc", 3)),
                          "max_rx_pps": pps, "xoff_packets": xoff,
                          "xon_packets": int(kw.get("xon_packets", xoff // 2))}
        else:
            raise ValueError("fault mode must be none, storm or slow_receiver")
        return self.fault

    # -- transmit -----------------------------------------------------------------------
    def _flush_ctrl(self, now: float) -> None:
        for tc in range(NUM_TCS):
            q = self.ctrl_q[tc]
            while q and self.paused_until[tc] <= now:
                self._send(q.popleft(), now)
                self._ctrl_queued -= 1

    def _transmit(self, now: float) -> float | None:
        """Send the frames that are due (a burst at most); return when the next one is due.

        The hot path of a sender: one pass per frame through locals, no per-frame clock read
        (``now`` is at most a burst old, well inside the pacers' slack).
        """
        nic_free_at = self.nic_free_at
        if nic_free_at > now:
            return nic_free_at
        qps = self._requesters
        n = len(qps)
        if not n:
            return None
        paused_until = self.paused_until
        send = self.raw.send
        byte_s = self._byte_s
        rr = self._rr
        sent = errors = 0
        soonest = None
        while sent < BURST_FRAMES and nic_free_at <= now:
            soonest = None
            for i in range(n):
                st = qps[(rr + i) % n]
                req = st.requester
                ready = st.next_time
                if paused_until[st.tc] > ready:
                    ready = paused_until[st.tc]
                if ready > now:
                    if req.has_work() and (soonest is None or ready < soonest):
                        soonest = ready
                    continue
                out = req.next_frame(now)
                if out is None:
                    continue
                frame = out[0]
                size = len(frame)
                try:
                    send(frame)
                except OSError as exc:  # ENOBUFS while the qdisc is full: counted, not fatal
                    errors += 1
                    log.debug("send failed: %s", exc)
                nic_free_at = (nic_free_at if nic_free_at > now - PACING_SLACK_S
                               else now - PACING_SLACK_S) + size * byte_s
                rate = st.rate_bps
                if rate != _INF:
                    st.next_time = _paced(st.next_time, now, size * 8 / rate)
                if st.rp:
                    st.rp.on_sent(size, now)
                rr = (rr + i + 1) % n
                sent += 1
                break
            else:
                break  # nothing due
        self.nic_free_at = nic_free_at
        self._rr = rr
        self.stats.frames_tx += sent - errors
        self.stats.send_errors += errors
        if sent < BURST_FRAMES and nic_free_at <= now:
            return soonest  # stopped because nothing more is due
        return nic_free_at if nic_free_at > now else now

    def _log_completions(self, st: QpState) -> None:
        req = st.requester
        assert req is not None
        while req.completed:
            m = req.completed.pop(0)
            self._msg_w.writerow([st.qpn, m.msg_id, m.kind, m.size, f"{m.posted_at:.6f}",
                                  f"{m.completed_at:.6f}", f"{m.completed_at - m.posted_at:.6f}"])

    # -- telemetry ----------------------------------------------------------------------
    def sample(self, now: float | None = None, force: bool = False) -> None:
        """One row per QP into qp_timeseries.csv, if a sample period has passed (or ``force``)."""
        if now is None:
            now = self.now()
        if not force and now < self._next_sample:
            return
        dt = self.cfg.sample_period_s
        self._next_sample = now + dt
        self._count_socket_drops()
        for st in self.qps.values():
            if st.requester:
                s = st.requester.stats
                total, sent, retx, naks, tmo = (s.bytes_acked, s.packets_sent, s.retransmitted,
                                                s.naks, s.timeouts)
            else:
                s = st.responder.stats
                total, sent, retx, naks, tmo = s.bytes, 0, 0, s.naks_sent, 0
            good = (total - st._last_bytes) * 8 / dt
            st._last_bytes = total
            rp = st.rp
            self._qp_w.writerow([
                f"{now:.4f}", st.qpn, st.role, st.tc,
                f"{st.rate_bps:.0f}" if rp or st.rate_cap_bps else "",
                f"{rp.rt:.0f}" if rp else "", f"{rp.alpha:.5f}" if rp else "",
                f"{good:.0f}", total, sent, retx, naks, tmo, st.cnps_received, st.cnps_sent,
                st.responder.stats.ce_marked if st.responder else 0,
                f"{self.paused_seconds(st.tc, now):.4f}"])
        self._qp_csv.flush()
        self._msg_csv.flush()

    def snapshot(self) -> dict:
        now = self.now()
        self._count_socket_drops()
        qps = {}
        for st in self.qps.values():
            d: dict = {"role": st.role, "tc": st.tc, "sport": st.sport, "peer_qpn": st.peer_qpn}
            if st.requester:
                d.update(asdict(st.requester.stats),
                         idle=st.requester.idle and st.post_until <= now,
                         rate_bps=st.rate_bps, cnps_received=st.cnps_received)
                if st.rp:
                    d.update(target_bps=st.rp.rt, alpha=st.rp.alpha)
            else:
                d.update(asdict(st.responder.stats), cnps_sent=st.cnps_sent,
                         epsn=st.responder.epsn)
            qps[str(st.qpn)] = d
        return {"t_s": now, "stats": asdict(self.stats), "qps": qps, "fault": self.fault,
                "paused": [self.paused_until[c] > now for c in range(NUM_TCS)],
                "paused_s": [self.paused_seconds(c, now) for c in range(NUM_TCS)]}

    # -- control ------------------------------------------------------------------------
    def handle(self, req: dict) -> dict:
        cmd = req.get("cmd")
        now = self.now()
        if cmd == "qp":
            args = {k: req[k] for k in ("qpn", "role", "peer_ip", "peer_qpn", "tc", "sport",
                                        "rate_cap_mbps", "start_psn", "max_outstanding", "rto_s")
                    if k in req}
            st = self.create_qp(**args)
            return {"ok": True, "qpn": st.qpn, "sport": st.sport}
        if cmd == "post":
            st = self.qps.get(req["qpn"])
            if st is None or st.requester is None:
                raise ValueError(f"no requester QP {req['qpn']}")
            kind, size = req.get("kind", "write"), int(req["size"])
            if "duration_s" in req:  # keep posting messages until the duration ends
                st.post_until, st.post_kind, st.post_size = now + float(req["duration_s"]), \
                    kind, size
                st.requester.post(kind, size, now)
            else:
                for _ in range(int(req.get("count", 1))):
                    st.requester.post(kind, size, now)
            return {"ok": True}
        if cmd == "stats":
            return {"ok": True, **self.snapshot()}
        if cmd == "fault":
            return {"ok": True, "fault": self.set_fault(**{k: v for k, v in req.items()
                                                           if k != "cmd"})}
        if cmd == "halt":  # the application stops: every QP drops what it had to send
            for st in self._requesters:
                st.post_until = 0.0
                st.requester.pending.clear()
                st.requester._pending_offset = 0
                st.requester.unacked.clear()
                st.requester.cursor = 0
            return {"ok": True}
        if cmd == "stop":
            self._running = False
            return {"ok": True}
        raise ValueError(f"unknown cmd {cmd!r}; use qp, post, stats, fault, halt or stop")

    def _serve_client(self, c: socket.socket) -> bool:
        """Answer the complete command lines waiting on ``c``; False once the client has gone."""
        try:
            data = c.recv(65536)  # a blocking socket, read only when epoll says it is readable
        except OSError:
            data = b""
        if not data:
            self.clients.pop(c, None)
            return False
        buf = self.clients[c] + data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                resp = self.handle(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                resp = {"ok": False, "error": str(exc)}
            with contextlib.suppress(OSError):
                c.sendall(json.dumps(resp).encode() + b"\n")
        self.clients[c] = buf
        return True

    # -- loop ---------------------------------------------------------------------------
    def _receive(self, now: float) -> bool:
        """Take the frames waiting on the raw socket (a bounded batch); True if more may wait."""
        raw = self.raw
        on_frame = self._on_frame
        if self._ignore_outgoing:
            recv = raw.recv
            for _ in range(256):
                try:
                    frame = recv(65536)
                except BlockingIOError:
                    return False
                on_frame(frame, now)
        else:
            recvfrom = raw.recvfrom
            for _ in range(256):
                try:
                    frame, addr = recvfrom(65536)
                except BlockingIOError:
                    return False
                if addr[2] != PACKET_OUTGOING:
                    on_frame(frame, now)
        return True

    def _count_socket_drops(self) -> None:
        """Frames the kernel dropped at our receive buffer since the last call
        (PACKET_STATISTICS, packet(7): reading it resets it)."""
        with contextlib.suppress(OSError):
            _packets, drops = struct.unpack(
                "II", self.raw.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.stats.rx_socket_drops += drops

    def _housekeeping(self, now: float) -> None:
        """Duration flows' refills, retransmission timeouts and DCQCN timers: every 10 ms."""
        for st in self._requesters:
            if st.post_until > now and len(st.requester.pending) < 2:
                st.requester.post(st.post_kind, st.post_size, now)
            st.requester.check_timeout(now)
            if st.rp:
                st.rp.advance(now)

    def _next_wake(self, now: float, tx: float | None) -> float:
        """When the loop must look again, at the latest: the earliest of its deadlines.

        Two deadlines are soft: a QP pacer's next frame and housekeeping. Their earliest is put
        off to at least TIMER_GRANULARITY_S from now, so a fast pacer's frames go out a few per
        wake-up and housekeeping rides on the same wake-ups. The others are kept exact, the
        NIC's line-rate pacer among them: frames that wait for the NIC leave spaced as before.
        """
        soft = self._next_housekeeping if self._requesters else _INF
        nxt = self._next_sample
        if tx is not None:
            if tx == self.nic_free_at:  # the NIC at line rate: spacing on the wire, kept exact
                nxt = min(nxt, tx)
            elif tx < soft:
                soft = tx
        if soft > now:
            soft = max(soft, now + TIMER_GRANULARITY_S)
        nxt = min(nxt, soft)
        if self.fault["mode"] != "none":
            for w in (self._service_slow(now), self._service_storm(now)):
                if w is not None and w < nxt:
                    nxt = w
        for u in self.paused_until:
            if now < u < nxt:
                nxt = u
        return nxt

    def run(self, until: float | None = None) -> None:
        """The event loop: select() on the raw socket and the control sockets, never a spin.

        select() rather than epoll: its timeout has microsecond resolution where epoll's has a
        millisecond's, and line-rate pacing needs the finer one (a 1 KiB frame lasts 0.8 ms at
        10 Mbit/s); with a handful of sockets the two cost the same per wake-up.
        """
        raw, ctl = self.raw, self.ctl
        socks = [raw, ctl]
        rx_ready = True
        while self._running:
            now = self.now()
            if until is not None and now >= until:
                break
            if rx_ready:
                rx_ready = self._receive(now)
            if now >= self._next_housekeeping:
                self._next_housekeeping = now + HOUSEKEEPING_S
                self._housekeeping(now)
            if self._ctrl_queued:
                self._flush_ctrl(now)
            nxt = self._next_wake(now, self._transmit(now))
            if now >= self._next_sample:
                self.sample(now)
                nxt = min(nxt, self._next_sample)
            timeout = 0.0 if rx_ready else max(0.0, min(nxt - self.now(), 0.05))
            ready, _, _ = select.select(socks, [], [], timeout)
            for s in ready:
                if s is raw:
                    rx_ready = True
                elif s is ctl:
                    with contextlib.suppress(BlockingIOError):
                        c, _ = ctl.accept()
                        self.clients[c] = b""
                        socks.append(c)
                elif not self._serve_client(s):
                    socks.remove(s)
                    s.close()


def _tc_dscp_table(text: str) -> dict[int, int]:
    """``3=26,6=48`` -> {3: 26, 6: 48}, for --tc-dscp."""
    try:
        table = {int(tc): int(d) for tc, d in (kv.split("=") for kv in text.split(",") if kv)}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write TC=DSCP pairs, e.g. 3=26,6=48") \
            from None
    if not all(0 <= tc <= 7 and 0 <= d <= 63 for tc, d in table.items()):
        raise argparse.ArgumentTypeError(f"{text!r}: classes are 0..7, DSCPs 0..63")
    return table


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m traffic.endpoint",
        description="RoCEv2 endpoint (RC QPs, Go-Back-N, DCQCN, PFC) on one interface.")
    ap.add_argument("--intf", required=True)
    ap.add_argument("--mac", required=True)
    ap.add_argument("--ip", required=True)
    ap.add_argument("--next-hop-mac", required=True, help="the leaf's (or peer's) MAC")
    ap.add_argument("--line-rate-mbps", type=float, default=10.0)
    ap.add_argument("--mtu", type=int, default=4096, help="RoCE path MTU (payload per packet); "
                    "the testbed derives it from fabric.mtu")
    ap.add_argument("--tc-dscp", type=_tc_dscp_table, default=dict(TC_TO_DSCP),
                    help="DSCP of each class the host may send, as TC=DSCP pairs, e.g. "
                         "0=0,3=26,6=48 (the testbed's comes from qos.dscp_to_tc_map); "
                         "default: the class selectors, and 26 for class 3")
    ap.add_argument("--cnp-dscp", type=int, default=DSCP_CNP, choices=range(64), metavar="DSCP",
                    help="DSCP of CNPs (qos.cnp_dscp)")
    ap.add_argument("--cnp-tc", type=int, default=CNP_TC, choices=range(NUM_TCS), metavar="TC",
                    help="class the CNP DSCP lands in: CNPs wait while it is paused")
    ap.add_argument("--control", type=Path, required=True, help="unix socket for commands")
    ap.add_argument("--out", type=Path, required=True, help="folder for the CSV time series")
    ap.add_argument("--sample-period", type=float, default=0.1)
    ap.add_argument("--cnp-interval", type=float, default=None)
    ap.add_argument("--no-dcqcn", action="store_true")
    ap.add_argument("--dcqcn", type=json.loads, default={},
                    help='DCQCN overrides as JSON, e.g. \'{"timer_period_s": 0.1}\'')
    ap.add_argument("--t0", type=float, default=None,
                    help="origin of t_s (CLOCK_MONOTONIC seconds), default: now")
    ap.add_argument("--log", default="INFO")
    return ap


def config_from_args(a: argparse.Namespace) -> EndpointConfig:
    return EndpointConfig(
        intf=a.intf, mac=a.mac, ip=a.ip, next_hop_mac=a.next_hop_mac,
        line_rate_bps=a.line_rate_mbps * 1e6, control_socket=a.control, out_dir=a.out, mtu=a.mtu,
        tc_to_dscp=a.tc_dscp, cnp_dscp=a.cnp_dscp, cnp_tc=a.cnp_tc,
        sample_period_s=a.sample_period, cnp_interval_s=a.cnp_interval, dcqcn=a.dcqcn,
        dcqcn_enabled=not a.no_dcqcn, t0_monotonic=a.t0)


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=a.log, format="%(asctime)s %(name)s %(message)s")
    ep = Endpoint(config_from_args(a))
    signal.signal(signal.SIGTERM, lambda *_: setattr(ep, "_running", False))
    log.info("endpoint on %s (%s), control %s", a.intf, a.ip, a.control)
    try:
        ep.run()
    except KeyboardInterrupt:
        pass
    finally:
        ep.close()
        log.info("stopped: %s", json.dumps(asdict(ep.stats)))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
