"""The RoCEv2 endpoint: one process per host, the host's RDMA NIC at emulation scale.

It owns a raw socket on the host's interface and does what a ConnectX NIC does for RC traffic:
paces each QP at its DCQCN rate and the port at line rate, answers data with ACK/NAK, sends
CNPs for CE-marked packets, reacts to CNPs, and stops a traffic class while the switch pauses it
with PFC. Three fault modes serve the experiments: a slow receiver (sends PFC when its receive
queue backs up), a broken NIC (sends PAUSE continuously) and random loss on the way in
(rx_loss).

Control: a unix socket taking one JSON object per line and answering one per line (see
:mod:`traffic.client` and ``python -m traffic.endpoint --help``). Output: ``qp_timeseries.csv``
(one row per QP per sample) and ``messages.csv`` (one row per completed message) in ``out_dir``
(:data:`QP_COLUMNS`, :data:`MESSAGE_COLUMNS`). ``--transport tcp``: :mod:`traffic.tcp_endpoint`.

This module is the core (sockets, receive path, send loop and pacers, housekeeping, event loop)
and the command; :class:`Endpoint` gathers the other parts, each a class of its own module whose
methods and state are the endpoint's own (no object between them and the per-frame path):
:mod:`traffic.endpoint_config` (configuration, command line), :mod:`traffic.endpoint_qps` (the QP
table), :mod:`traffic.endpoint_pfc` (PFC obedience, faults), :mod:`traffic.endpoint_credit`
(credits), :mod:`traffic.endpoint_telemetry` (counters, CSV files, snapshots) and
:mod:`traffic.endpoint_control` (the control server), importable from here too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import time
from dataclasses import asdict

from traffic.dcqcn import DcqcnParams, NotificationPoint
from traffic.endpoint_config import (
    CNP_TC,
    TC_TO_DSCP,
    EndpointConfig,
    build_parser,
    config_from_args,
)
from traffic.endpoint_control import ControlServer
from traffic.endpoint_credit import CREDIT_ETHERTYPE, CreditNic
from traffic.endpoint_pfc import STORM_INTERVAL_S, PfcPort
from traffic.endpoint_qps import QpState, QpTable, qp_source_port
from traffic.endpoint_telemetry import (
    MESSAGE_COLUMNS,
    QP_COLUMNS,
    STATS_COLUMNS,
    EndpointStats,
    Telemetry,
)
from traffic.pacing import PACING_SLACK_S, LatenessMeter, paced
from traffic.packets import (
    ACK,
    CNP,
    DATA_OPCODES,
    ECN_CE,
    Malformed,
    ParsedRoce,
    Rejected,
    parse_pfc,
    parse_roce,
)
from traffic.tcp_endpoint import TcpEndpoint
from traffic.wire import ETH_P_ALL, PACKET_OUTGOING, PFC_QUANTUM_BITS, ROCEV2_UDP_PORT, SOL_PACKET

__all__ = ["CNP_TC", "MESSAGE_COLUMNS", "PFC_QUANTUM_BITS", "QP_COLUMNS", "STATS_COLUMNS",
           "STORM_INTERVAL_S", "TC_TO_DSCP", "Endpoint", "EndpointConfig", "EndpointStats",
           "QpState", "build_parser", "config_from_args", "main", "parse_pfc", "qp_source_port"]

log = logging.getLogger("roce.endpoint")

PACKET_IGNORE_OUTGOING = 23  # Linux 4.20+: do not hand our own sent frames back to us
SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32  # socket(7); Python may not name them
SOCKET_BUFFER_BYTES = 8 * 1024 * 1024
#: A sleeping loop wakes for a QP pacer's next frame no sooner than this: at 1,000 frames/s it
#: sends three frames per wake-up instead of one (a wake-up costs more than a frame: ~30 us of
#: CPU on a VM). The pacers keep the debt of a late wake (see PACING_SLACK_S), so the average
#: rate stays exact; must stay below PACING_SLACK_S with a margin for scheduling delay. The NIC's
#: line-rate pacer is not put off. (1,000 frames/s: 2 ms -> 4.4% of a core, 3 ms -> 3.0%.)
TIMER_GRANULARITY_S = 0.003
#: Frames sent per loop turn before the loop looks at received frames and commands again.
BURST_FRAMES = 64
#: The shortest interval between two housekeeping looks (:meth:`Endpoint._housekeeping`), and
#: the period of duration flows' refills.
HOUSEKEEPING_S = 0.01
_INF = float("inf")


class Endpoint(QpTable, PfcPort, CreditNic, Telemetry, ControlServer):
    """One host's RoCE NIC: its sockets, receive path, send loop and event loop, with the parts
    of the other modules (their methods and state are this object's own)."""

    def __init__(self, cfg: EndpointConfig, clock=time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        # the run's clock when the testbed gives its origin, so the endpoints' series line up
        # with the switches' telemetry; else the endpoint's own start
        self.t0 = cfg.t0_monotonic if cfg.t0_monotonic is not None else clock()
        self.stats = EndpointStats()
        self._init_qps()
        self.dcqcn = DcqcnParams.scaled(cfg.line_rate_bps, cfg.dcqcn_profile, **cfg.dcqcn)
        self.np = NotificationPoint(cfg.cnp_interval_s if cfg.cnp_interval_s is not None
                                    else self.dcqcn.cnp_interval_s)
        self._init_pfc()
        self._init_credit()
        self.nic_free_at = 0.0
        self.lateness = LatenessMeter(PACING_SLACK_S, self.stats)
        self._rr = 0
        self._running = True
        self._next_housekeeping = 0.0
        self._byte_s = 8 / cfg.line_rate_bps  # NIC seconds per byte
        self._open_telemetry()
        self._open_sockets()
        self._credit_hello()

    # -- sockets ------------------------------------------------------------------------
    def _open_sockets(self) -> None:
        # no protocol until bind, as testbed.agent.frames.pfc_socket opens its own: bound to
        # the NIC at once, with no wait for the kernel to unhook it from every other interface
        self.raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        # A NIC's buffers: deep enough to ride out a few tens of ms without the CPU. The
        # FORCE options pass net.core.rmem_max/wmem_max, which would cap them at 208 KB (root).
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF),
                             (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                self.raw.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER_BYTES)
            except OSError:
                self.raw.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER_BYTES)
        self.raw.bind((self.cfg.intf, ETH_P_ALL))
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
        self.quiet.bind((self.cfg.ip, ROCEV2_UDP_PORT))
        self._open_control()

    def close(self) -> None:
        self.sample(force=True)
        for s in [self.raw, self.quiet]:
            with contextlib.suppress(OSError):
                s.close()
        self._close_control()
        self._close_telemetry()

    def now(self) -> float:
        return self.clock() - self.t0

    def _send(self, frame: bytes, now: float | None = None) -> None:
        try:
            self.raw.send(frame)
            self.stats.frames_tx += 1
        except OSError as exc:  # ENOBUFS while the qdisc is full: counted, not fatal
            self.stats.send_errors += 1
            log.debug("send failed: %s", exc)
        self.nic_free_at = paced(self.nic_free_at, self.now() if now is None else now,
                                 len(frame) * self._byte_s)

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
                self.stats.pfc_rx_by_class[tc] += 1
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
        if p is None:  # neither PFC nor RoCE: a credit frame (mode ib-credit), or not ours
            if frame[12:14] == CREDIT_ETHERTYPE:
                return self._on_credit(frame, now)
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
                self._housekeeping_by(st.rp.next_increase())
        elif p.opcode in DATA_OPCODES and st.responder:
            mode = self.fault["mode"]
            if mode != "none":
                if mode == "rx_loss" and self._lost_on_arrival():
                    return
                if mode == "slow_receiver":
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
            self._send_ctrl(st.ack_tc, b.frame(ACK, st.peer_qpn, psn, ext=b.aeth(syn, msn)), now)
        if st.chains:  # a collective's requesters wait on this QP's messages (traffic.chain)
            self._release_chains(st, now)
        if p.ecn == ECN_CE:
            st.responder.stats.ce_marked += 1
            if self.np.should_send(st.qpn, now):
                assert st.cnp_builder is not None
                cnp = st.cnp_builder.frame(CNP, st.peer_qpn, 0, b"\x00" * 16, becn=True)
                self._send_ctrl(self.cfg.cnp_tc, cnp, now)
                st.cnps_sent += 1
                self.stats.cnps_sent += 1

    # -- transmit -----------------------------------------------------------------------
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
        credit, credit_sent, big = self.credit_left, self.credit_sent, self.credit_frame
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
                if credit[st.tc] < big:  # mode ib-credit: a credit frame wakes the loop
                    if req.has_work():
                        self._credit_starved(st.tc, now)
                    continue
                out = req.next_frame(now)
                if out is None:
                    continue
                frame = out[0]
                size = len(frame)
                credit[st.tc] -= size
                credit_sent[st.tc] += size
                if credit[st.tc] < big:  # short now: the class's QP timers stand still
                    self.credit_short[st.tc].note(now, True)
                try:
                    send(frame)
                except OSError as exc:  # ENOBUFS while the qdisc is full: counted, not fatal
                    errors += 1
                    log.debug("send failed: %s", exc)
                nic_free_at = (nic_free_at if nic_free_at > now - PACING_SLACK_S
                               else now - PACING_SLACK_S) + size * byte_s
                rate = st.rate_bps
                if rate != _INF:
                    st.next_time = paced(st.next_time, now, size * 8 / rate)
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

    def _housekeeping(self, now: float) -> float:
        """Duration flows' refills, retransmission timeouts and DCQCN's rate-increase timer;
        returns when they next need a look.

        They run when one of them can be due, not every HOUSEKEEPING_S: a 4:1 incast's sender
        at 10 Mbit/s woke for them 100 times a second, for about 80 frames. A deadline put
        off after this (a pause, an ACK) makes a look early, which finds nothing to do; the
        events that bring one sooner say so (:meth:`_housekeeping_by`): a command that adds
        work, a CNP that cuts a rate. Duration flows keep the period (their refill waits on
        what was sent); HOUSEKEEPING_S stays the shortest interval.
        """
        nxt = _INF
        for st in self._requesters:
            req = st.requester
            if st.post_until > now:
                if len(req.pending) < 2:
                    req.post(st.post_kind, st.post_size, now)
                nxt = now
            req.check_timeout(now)  # its class's time paused from its own clock
            t = req.timeout_at(now)
            if t < nxt:
                nxt = t
            if st.rp:
                st.rp.advance(now)
                t = st.rp.next_increase()
                if t < nxt:
                    nxt = t
        return max(nxt, now + HOUSEKEEPING_S)

    def _housekeeping_by(self, when: float) -> None:
        """Housekeeping must look again no later than ``when`` (an event brought a deadline)."""
        if when < self._next_housekeeping:
            self._next_housekeeping = when

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
            self.lateness.turn(now)
            if rx_ready:
                rx_ready = self._receive(now)
            if now >= self._next_housekeeping:
                self._next_housekeeping = self._housekeeping(now)
            if self._ctrl_queued:
                self._flush_ctrl(now)
            tx = self._transmit(now)
            self.lateness.next_due(tx)
            nxt = self._next_wake(now, tx)
            if now >= self._next_sample:
                self.sample(now)
                nxt = min(nxt, self._next_sample)
            timeout = 0.0 if rx_ready else max(0.0, min(nxt - self.now(), 0.05))
            ready, _, _ = select.select(socks, [], [], timeout)
            for s in ready:
                if s is raw:
                    rx_ready = True
                elif s is ctl:
                    self._accept_client(socks)
                elif not self._serve_client(s):
                    socks.remove(s)
                    s.close()


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=a.log, format="%(asctime)s %(name)s %(message)s")
    cfg = config_from_args(a)  # mode tcp: the same flows over kernel TCP
    ep = TcpEndpoint(cfg) if cfg.transport == "tcp" else Endpoint(cfg)
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
