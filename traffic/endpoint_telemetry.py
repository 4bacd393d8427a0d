"""The endpoint's telemetry: its counters (:class:`EndpointStats`, :data:`STATS_COLUMNS`), the
``stats`` command's snapshot, and its two CSV files in ``out_dir``: ``qp_timeseries.csv`` (one
row per QP per sample, :data:`QP_COLUMNS`) and ``messages.csv`` (one row per completed message,
:data:`MESSAGE_COLUMNS`)."""

from __future__ import annotations

import contextlib
import csv
import struct
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from traffic.packets import REJECT_REASONS
from traffic.spool import Spool, SpooledFile
from traffic.wire import NUM_TCS, SOL_PACKET

PACKET_STATISTICS = 6  # packet(7): struct tpacket_stats {tp_packets, tp_drops}

if TYPE_CHECKING:
    from traffic.endpoint_config import EndpointConfig
    from traffic.endpoint_qps import QpState

#: The endpoint's two files in its folder of the results (``endpoints/<host>/``), named here,
#: by their writer, since traffic/ imports nothing of the testbed (testbed.results.files
#: re-exports them with every other name of a results folder).
QP_FILE = "qp_timeseries.csv"
MESSAGES_FILE = "messages.csv"

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
    ("timeouts", "retransmission timeouts (IB's Local ACK Timeout, endpoints.local_ack_timeout "
                 "scaled to the link, with no ACK, not counting the time PFC paused the QP's "
                 "class at this NIC)"),
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


#: The endpoint-wide counters of the ``stats`` command (its ``"stats"`` object), in the order of
#: :class:`EndpointStats`. Every received frame is counted once in ``frames_rx`` and, if it is
#: dropped, once in exactly one of not_roce, rx_rejected, malformed, bad_icrc, unknown_qp,
#: rx_dropped, rx_loss_dropped.
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
    ("pfc_rx_by_class", "PFC frames received, per class (a frame counts once in each class it "
                        "names, pause or resume): the tester's counter beside the switch's"),
    ("pfc_tx_by_class", "PFC frames sent, per class"),
    ("credit_rx", "credit frames received from the leaf (mode ib-credit: each carries the "
                  "limit up to which the NIC may send each credited class)"),
    ("cnps_sent", "CNPs sent"),
    ("cnps_received", "CNPs received"),
    ("rx_dropped", "data frames a slow receiver dropped because its queue was full"),
    ("rx_loss_dropped", "data frames the `rx_loss` fault dropped on arrival (injected loss)"),
    ("send_errors", "frames the socket refused (ENOBUFS while the qdisc is full)"),
    ("rx_socket_drops", "frames the kernel dropped because the endpoint's receive buffer was "
                        "full (the process did not keep up; a NIC's RX overflow)"),
    ("active_s", "seconds the endpoint had a frame due (or a paused class to resume); None "
                 "in mode tcp, where the kernel sends (traffic.pacing)"),
    ("late_lost_s", "seconds its NIC stood idle with a frame due because the process came "
                    "later than the pacers' slack repays: line-rate time lost to the host's "
                    "CPU, not to the protocol (fidelity check host_lag)"),
    ("late_max_s", "the latest the process came to a frame that was due (seconds)"),
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
    pfc_rx_by_class: list[int] = field(default_factory=lambda: [0] * NUM_TCS)
    pfc_tx_by_class: list[int] = field(default_factory=lambda: [0] * NUM_TCS)
    credit_rx: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0
    rx_dropped: int = 0
    rx_loss_dropped: int = 0
    send_errors: int = 0
    rx_socket_drops: int = 0
    active_s: float | None = None  # None: not measured (mode tcp); traffic.pacing sets them
    late_lost_s: float | None = None
    late_max_s: float | None = None


class Telemetry:
    """Part of :class:`traffic.endpoint.Endpoint`: its CSV files, samples and snapshots. Uses the
    endpoint's ``cfg``, ``stats``, ``qps``, ``now()``, ``paused_until``, ``paused_seconds()`` and
    ``_count_socket_drops()``."""

    cfg: EndpointConfig
    stats: EndpointStats
    qps: dict[int, QpState]
    paused_until: list[float]
    credit_wait: list  # traffic.endpoint_credit: per class, its XmitWait
    fault: dict

    def _count_socket_drops(self) -> None:
        """Frames the kernel dropped at our receive buffer since the last call
        (PACKET_STATISTICS, packet(7): reading it resets it)."""
        with contextlib.suppress(OSError):
            _packets, drops = struct.unpack(
                "II", self.raw.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.stats.rx_socket_drops += drops

    def _open_telemetry(self) -> None:
        self._next_sample = 0.0
        cfg = self.cfg
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        # written by a thread of their own: a flush that waits for the file system's journal
        # would stall the send loop (traffic.spool)
        self._spool = Spool("endpoint")
        self._qp_csv = SpooledFile(cfg.out_dir / QP_FILE, self._spool)
        self._qp_w = csv.writer(self._qp_csv)
        self._qp_w.writerow([c for c, _ in QP_COLUMNS])
        self._msg_csv = SpooledFile(cfg.out_dir / MESSAGES_FILE, self._spool)
        self._msg_w = csv.writer(self._msg_csv)
        self._msg_w.writerow([c for c, _ in MESSAGE_COLUMNS])

    def _close_telemetry(self) -> None:
        self._qp_csv.close()
        self._msg_csv.close()
        self._spool.close()  # every write done

    def _log_completions(self, st: QpState) -> None:
        req = st.requester
        assert req is not None
        while req.completed:
            m = req.completed.pop(0)
            self._msg_w.writerow([st.qpn, m.msg_id, m.kind, m.size, f"{m.posted_at:.6f}",
                                  f"{m.completed_at:.6f}", f"{m.completed_at - m.posted_at:.6f}"])

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
            if rp:
                rp.advance(now)  # its timers run only when due (Endpoint._housekeeping)
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
                if st.rp:
                    st.rp.advance(now)  # its timers run only when due (Endpoint._housekeeping)
                d.update(asdict(st.requester.stats),
                         idle=st.idle and st.post_until <= now,
                         unacked=len(st.requester.unacked),  # packets sent, not yet ACKed
                         rate_bps=st.rate_bps, cnps_received=st.cnps_received)
                if st.rp:
                    d.update(target_bps=st.rp.rt, alpha=st.rp.alpha)
            else:
                d.update(asdict(st.responder.stats), cnps_sent=st.cnps_sent,
                         epsn=st.responder.epsn)
            qps[str(st.qpn)] = d
        return {"t_s": now, "stats": asdict(self.stats), "qps": qps, "fault": self.fault,
                "paused": [self.paused_until[c] > now or self.credit_wait[c].waiting
                           for c in range(NUM_TCS)],
                "paused_s": [self.paused_seconds(c, now) for c in range(NUM_TCS)]}
