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
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from traffic.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint
from traffic.packets import (
    ACK,
    CNP,
    DATA_OPCODES,
    DSCP_CNP,
    ECN_CE,
    Malformed,
    RoceFrameBuilder,
    parse_pfc,
    parse_roce,
    pfc_frame,
)
from traffic.qp import Requester, Responder

log = logging.getLogger("roce.endpoint")

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20+: do not hand our own sent frames back to us
#: How far behind schedule a pacer may fall before it forgets the debt; keeps the average rate
#: exact when the loop wakes late, without letting a stalled QP burst afterwards.
PACING_SLACK_S = 0.005
BURST_FRAMES = 32
STORM_INTERVAL_S = 0.02  # a storming NIC's PAUSE frames: 50 per second
HOUSEKEEPING_S = 0.01
PFC_QUANTUM_BITS = 512
MAX_QUANTA = 0xFFFF

#: Default DSCP for each traffic class (the inverse of the fabric's DSCP_TO_TC_MAP defaults).
TC_TO_DSCP = {0: 0, 1: 8, 2: 16, 3: 26, 4: 32, 5: 40, 6: 48, 7: 56}

QP_COLUMNS = [
    ("t_s", "seconds since the endpoint started"),
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
    ("kind", "write or send"), ("size", "bytes"), ("posted_s", "when posted"),
    ("completed_s", "when its last packet was acknowledged"),
    ("fct_s", "flow (message) completion time"),
]


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
    mtu: int = 4096
    sample_period_s: float = 0.1
    cnp_interval_s: float | None = None  # default: [Z15]'s 50 us scaled to the link
    dcqcn: dict = field(default_factory=dict)  # overrides of DcqcnParams.scaled
    dcqcn_enabled: bool = True
    rx_buffer_packets: int = 256  # slow-receiver queue before it drops


@dataclass
class EndpointStats:
    frames_rx: int = 0
    frames_tx: int = 0
    malformed: int = 0
    bad_icrc: int = 0
    unknown_qp: int = 0
    not_roce: int = 0
    pfc_rx: int = 0
    pfc_tx: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0
    rx_dropped: int = 0
    send_errors: int = 0


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

    @property
    def rate_bps(self) -> float:
        r = self.rp.rc if self.rp else float("inf")
        return min(r, self.rate_cap_bps) if self.rate_cap_bps else r


class Endpoint:
    def __init__(self, cfg: EndpointConfig, clock=time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self.t0 = clock()
        self.stats = EndpointStats()
        self.qps: dict[int, QpState] = {}
        self.np = NotificationPoint(cfg.cnp_interval_s) if cfg.cnp_interval_s is not None else \
            NotificationPoint.scaled(cfg.line_rate_bps)
        self.dcqcn = DcqcnParams.scaled(cfg.line_rate_bps, **cfg.dcqcn)
        self.paused_until = [0.0] * 8
        self.paused_total = [0.0] * 8
        self._pause_mark = [0.0] * 8
        self.nic_free_at = 0.0
        self.ctrl_q: list[collections.deque[bytes]] = [collections.deque() for _ in range(8)]
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
        self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        self.raw.bind((self.cfg.intf, 0))
        with contextlib.suppress(OSError):
            self.raw.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
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

    def _send(self, frame: bytes) -> None:
        try:
            self.raw.send(frame)
            self.stats.frames_tx += 1
        except OSError as exc:  # ENOBUFS while the qdisc is full: counted, not fatal
            self.stats.send_errors += 1
            log.debug("send failed: %s", exc)
        self.nic_free_at = _paced(self.nic_free_at, self.now(),
                                  len(frame) * 8 / self.cfg.line_rate_bps)

    def _send_ctrl(self, tc: int, frame: bytes) -> None:
        if self.paused_until[tc] > self.now():
            self.ctrl_q[tc].append(frame)
        else:
            self._send(frame)

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
        sport = sport or qp_source_port(qpn, peer_qpn)
        st = QpState(qpn, role, tc, peer_ip, peer_qpn, sport,
                     rate_cap_bps=rate_cap_mbps * 1e6 if rate_cap_mbps else None)
        builder = self._builder(peer_ip, sport, TC_TO_DSCP[tc])
        if role == "requester":
            st.requester = Requester(qpn, peer_qpn, builder, mtu=self.cfg.mtu,
                                     start_psn=start_psn, max_outstanding=max_outstanding,
                                     rto_s=rto_s)
            if self.cfg.dcqcn_enabled:
                st.rp = ReactionPoint(self.dcqcn, now=self.now())
            self._requesters.append(st)
        else:
            st.responder = Responder(qpn, peer_qpn, start_psn=start_psn)
        self.qps[qpn] = st
        return st

    # -- receive ------------------------------------------------------------------------
    def _on_frame(self, frame: bytes, now: float) -> None:
        self.stats.frames_rx += 1
        pfc = parse_pfc(frame)
        if pfc is not None:
            self.stats.pfc_rx += 1
            for tc, quanta in pfc.items():
                self._pause(tc, quanta, now)
            return
        try:
            p = parse_roce(frame)
        except Malformed as exc:
            self.stats.malformed += 1
            log.debug("malformed: %s", exc)
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

    def _deliver(self, st: QpState, p, now: float) -> None:
        assert st.responder is not None
        reply = st.responder.on_data(p)
        b = self._builder(st.peer_ip, st.sport, TC_TO_DSCP[st.tc])
        if reply is not None:
            syn, psn, msn = reply
            self._send_ctrl(st.tc, b.frame(ACK, st.peer_qpn, psn, ext=b.aeth(syn, msn)))
        if p.ecn == ECN_CE:
            st.responder.stats.ce_marked += 1
            if self.np.should_send(st.qpn, now):
                cb = self._builder(st.peer_ip, st.sport, DSCP_CNP)
                cnp = cb.frame(CNP, st.peer_qpn, 0, b"\x00" * 16, becn=True)
                self._send_ctrl(6, cnp)
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
            p = parse_roce(frame)
            st = self.qps.get(p.dqpn)
            if st is not None and st.responder is not None:
                self._deliver(st, p, now)
            self._rx_next = max(self._rx_next, now) + period
        depth = len(self.rx_queue)
        tc = f.get("tc", 3)
        if depth >= f["xoff_packets"] and not self._xoff_sent:
            self._send(pfc_frame(self.cfg.mac, {tc: MAX_QUANTA}))
            self.stats.pfc_tx += 1
            self._xoff_sent = True
            self._xoff_at = now
        elif self._xoff_sent and (depth <= f["xon_packets"]):
            self._send(pfc_frame(self.cfg.mac, {tc: 0}))
            self.stats.pfc_tx += 1
            self._xoff_sent = False
        elif self._xoff_sent and now - self._xoff_at > self._refresh_s(MAX_QUANTA):
            self._send(pfc_frame(self.cfg.mac, {tc: MAX_QUANTA}))  # refresh before expiry
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
            self._send(pfc_frame(self.cfg.mac, {f.get("tc", 3): f.get("quanta", MAX_QUANTA)}))
            self.stats.pfc_tx += 1
            # a broken NIC floods PAUSE: far more often than a pause needs refreshing
            self._storm_next = now + min(self._refresh_s(f.get("quanta", MAX_QUANTA)),
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
                          "quanta": int(kw.get("quanta", MAX_QUANTA))}
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
        if not any(self.ctrl_q):
            return
        for tc in range(8):
            while self.ctrl_q[tc] and self.paused_until[tc] <= now:
                self._send(self.ctrl_q[tc].popleft())

    def _transmit(self, now: float) -> float | None:
        """Send the frames that are due (a burst at most); return when the next one is due."""
        if self.nic_free_at > now:
            return self.nic_free_at
        qps = self._requesters
        n = len(qps)
        sent = 0
        while sent < BURST_FRAMES and self.nic_free_at <= now:
            soonest = None
            progressed = False
            for i in range(n):
                st = qps[(self._rr + i) % n]
                req = st.requester
                if not req.has_work():
                    continue
                ready = st.next_time if st.next_time > self.paused_until[st.tc] else \
                    self.paused_until[st.tc]
                if ready > now:
                    soonest = ready if soonest is None or ready < soonest else soonest
                    continue
                out = req.next_frame(now)
                if out is None:
                    continue
                frame = out[0]
                self._send(frame)
                rate = st.rate_bps
                if rate != float("inf"):
                    st.next_time = _paced(st.next_time, now, len(frame) * 8 / rate)
                if st.rp:
                    st.rp.on_sent(len(frame), now)
                self._rr = (self._rr + i + 1) % n
                sent += 1
                progressed = True
                break
            if not progressed:
                return soonest
        return self.nic_free_at if self.nic_free_at > now else now

    def _log_completions(self, st: QpState) -> None:
        req = st.requester
        assert req is not None
        while req.completed:
            m = req.completed.pop(0)
            self._msg_w.writerow([st.qpn, m.msg_id, m.kind, m.size, f"{m.posted_at:.6f}",
                                  f"{m.completed_at:.6f}", f"{m.completed_at - m.posted_at:.6f}"])

    # -- telemetry ----------------------------------------------------------------------
    def sample(self, force: bool = False) -> None:
        now = self.now()
        if not force and now < self._next_sample:
            return
        dt = self.cfg.sample_period_s
        self._next_sample = now + dt
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
                "paused": [self.paused_until[c] > now for c in range(8)],
                "paused_s": [self.paused_seconds(c, now) for c in range(8)]}

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

    def _serve_client(self, c: socket.socket) -> None:
        try:
            data = c.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.clients.pop(c, None)
            c.close()
            return
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

    # -- loop ---------------------------------------------------------------------------
    def _receive(self, now: float) -> None:
        """Take every frame waiting on the raw socket (a bounded batch)."""
        for _ in range(256):
            try:
                frame, addr = self.raw.recvfrom(65536)
            except BlockingIOError:
                return
            if addr[2] != PACKET_OUTGOING:
                self._on_frame(frame, now)
        self._rx_ready = True  # more may be waiting

    def run(self, until: float | None = None) -> None:
        self._rx_ready = True
        while self._running:
            now = self.now()
            if until is not None and now >= until:
                break
            if self._rx_ready:
                self._rx_ready = False
                self._receive(now)
            if now >= self._next_housekeeping:
                self._next_housekeeping = now + HOUSEKEEPING_S
                for st in self._requesters:
                    if st.post_until > now and len(st.requester.pending) < 2:
                        st.requester.post(st.post_kind, st.post_size, now)
                    st.requester.check_timeout(now)
                    if st.rp:
                        st.rp.advance(now)
            self._flush_ctrl(now)
            wakes = [self._transmit(now), self._service_slow(now), self._service_storm(now),
                     self._next_sample]
            self.sample()
            nxt = min(w for w in wakes if w is not None)
            if self._requesters:
                nxt = min(nxt, self._next_housekeeping)
            paused = [u for u in self.paused_until if u > now]
            if paused:
                nxt = min(nxt, min(paused))
            timeout = max(0.0, min(nxt - self.now(), 0.05))
            socks = [self.raw, self.ctl, *self.clients]
            ready, _, _ = select.select(socks, [], [], timeout)
            for s in ready:
                if s is self.raw:
                    self._rx_ready = True
                elif s is self.ctl:
                    with contextlib.suppress(BlockingIOError):
                        c, _ = self.ctl.accept()
                        self.clients[c] = b""
                else:
                    self._serve_client(s)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m traffic.endpoint",
        description="RoCEv2 endpoint (RC QPs, Go-Back-N, DCQCN, PFC) on one interface.")
    ap.add_argument("--intf", required=True)
    ap.add_argument("--mac", required=True)
    ap.add_argument("--ip", required=True)
    ap.add_argument("--next-hop-mac", required=True, help="the leaf's (or peer's) MAC")
    ap.add_argument("--line-rate-mbps", type=float, default=10.0)
    ap.add_argument("--mtu", type=int, default=4096, help="RoCE path MTU (payload per packet)")
    ap.add_argument("--control", type=Path, required=True, help="unix socket for commands")
    ap.add_argument("--out", type=Path, required=True, help="folder for the CSV time series")
    ap.add_argument("--sample-period", type=float, default=0.1)
    ap.add_argument("--cnp-interval", type=float, default=None)
    ap.add_argument("--no-dcqcn", action="store_true")
    ap.add_argument("--dcqcn", type=json.loads, default={},
                    help='DCQCN overrides as JSON, e.g. \'{"timer_period_s": 0.1}\'')
    ap.add_argument("--log", default="INFO")
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log, format="%(asctime)s %(name)s %(message)s")
    ep = Endpoint(EndpointConfig(
        intf=a.intf, mac=a.mac, ip=a.ip, next_hop_mac=a.next_hop_mac,
        line_rate_bps=a.line_rate_mbps * 1e6, control_socket=a.control, out_dir=a.out, mtu=a.mtu,
        sample_period_s=a.sample_period, cnp_interval_s=a.cnp_interval, dcqcn=a.dcqcn,
        dcqcn_enabled=not a.no_dcqcn))
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
