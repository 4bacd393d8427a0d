"""PFC at the endpoint: obeying the switch's pauses (a paused class sends nothing; its ACKs and
CNPs wait in a queue of their own) and the two faults that send PFC: a slow receiver (PAUSE when
its receive queue backs up, resume when it drains) and a broken NIC (a PAUSE storm); and the
fault that loses packets on the way in (rx_loss: random loss, seeded)."""

from __future__ import annotations

import collections
import random
from typing import TYPE_CHECKING

from traffic.packets import parse_roce, pfc_frame
from traffic.wire import NUM_TCS, PFC_MAX_QUANTA, PFC_QUANTUM_BITS

if TYPE_CHECKING:
    from traffic.credits import XmitWait
    from traffic.endpoint_config import EndpointConfig
    from traffic.endpoint_qps import QpState
    from traffic.endpoint_telemetry import EndpointStats

STORM_INTERVAL_S = 0.02  # a storming NIC's PAUSE frames: 50 per second


class PfcPort:
    """Part of :class:`traffic.endpoint.Endpoint`: pause state per class, the held-back control
    frames, and the PFC faults. Uses the endpoint's ``cfg``, ``stats``, ``qps``, ``_send()``,
    ``_deliver()`` and ``_expected_payload_crc()``."""

    cfg: EndpointConfig
    stats: EndpointStats
    qps: dict[int, QpState]
    credit_left: list[float]  # CreditNic's
    credit_wait: list[XmitWait]

    def _init_pfc(self) -> None:
        self.paused_until = [0.0] * NUM_TCS
        self.paused_total = [0.0] * NUM_TCS
        self._pause_mark = [0.0] * NUM_TCS
        self.ctrl_q: list[collections.deque[bytes]] = [collections.deque() for _ in range(NUM_TCS)]
        self._ctrl_queued = 0  # frames waiting in ctrl_q, so the loop skips the check when 0
        self.fault: dict = {"mode": "none"}
        self.rx_queue: collections.deque[tuple[bytes, float]] = collections.deque()
        self._rx_next = 0.0
        self._xoff_sent = False
        self._xoff_at = 0.0
        self._storm_next = 0.0
        self._loss_rng = random.Random(1)

    def _lost_on_arrival(self) -> bool:
        """rx_loss: whether this arriving data packet is lost (and counted)."""
        if self._loss_rng.random() < self.fault["rate"]:
            self.stats.rx_loss_dropped += 1
            return True
        return False

    # -- obeying pauses -----------------------------------------------------------------
    def _pause(self, tc: int, quanta: int, now: float) -> None:
        was = self.paused_until[tc] > now
        if was:
            self.paused_total[tc] += now - self._pause_mark[tc]
        self._pause_mark[tc] = now
        self.paused_until[tc] = now + quanta * PFC_QUANTUM_BITS / self.cfg.line_rate_bps

    def _pfc_paused_s(self, tc: int, now: float) -> float:
        extra = min(now, self.paused_until[tc]) - self._pause_mark[tc]
        return self.paused_total[tc] + max(0.0, extra)

    def paused_seconds(self, tc: int, now: float) -> float:
        """How long the class was held at this NIC: paused by PFC, or (mode ib-credit)
        waiting for credit with a frame to send (PortXmitWait; traffic.endpoint_credit)."""
        return self._pfc_paused_s(tc, now) + self.credit_wait[tc].total(now)

    def held_seconds(self, tc: int, now: float) -> float:
        """How long the class could not send at this NIC, frame or not: paused by PFC, or
        (mode ib-credit) short of credit for a frame. Its QPs' Local ACK Timeout does not
        count it (traffic.qp.Requester.check_timeout)."""
        return self._pfc_paused_s(tc, now) + self.credit_short[tc].total(now)

    def _send_ctrl(self, tc: int, frame: bytes, now: float) -> None:
        """An ACK or CNP: sent now, unless its class is paused or (mode ib-credit) short of
        credit, or frames of its class wait already."""
        if self.paused_until[tc] > now or self.credit_left[tc] < len(frame) or self.ctrl_q[tc]:
            self.ctrl_q[tc].append(frame)
            self._ctrl_queued += 1
        else:
            self._send(frame, now)
            self._credit_used(tc, len(frame), now)

    def _flush_ctrl(self, now: float) -> None:
        for tc in range(NUM_TCS):
            q = self.ctrl_q[tc]
            while q and self.paused_until[tc] <= now and self.credit_left[tc] >= len(q[0]):
                frame = q.popleft()
                self._send(frame, now)
                self._credit_used(tc, len(frame), now)
                self._ctrl_queued -= 1

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
            self._send_pfc({tc: PFC_MAX_QUANTA})
            self._xoff_sent = True
            self._xoff_at = now
        elif self._xoff_sent and (depth <= f["xon_packets"]):
            self._send_pfc({tc: 0})
            self._xoff_sent = False
        elif self._xoff_sent and now - self._xoff_at > self._refresh_s(PFC_MAX_QUANTA):
            self._send_pfc({tc: PFC_MAX_QUANTA})  # refresh before expiry
            self._xoff_at = now
        return self._rx_next if self.rx_queue else None

    def _send_pfc(self, quanta: dict[int, int]) -> None:
        """A PFC frame for these classes (class -> pause quanta, 0 resumes), counted in total
        and per class (the tester's counters: testbed.analysis.tester) once it is on the wire
        (a frame the full qdisc refused is a send error, not a PFC frame sent)."""
        before = self.stats.frames_tx
        self._send(pfc_frame(self.cfg.mac, quanta))
        if self.stats.frames_tx == before:
            return
        self.stats.pfc_tx += 1
        for tc in quanta:
            self.stats.pfc_tx_by_class[tc] += 1

    def _refresh_s(self, quanta: int) -> float:
        return quanta * PFC_QUANTUM_BITS / self.cfg.line_rate_bps / 2

    def _service_storm(self, now: float) -> float | None:
        f = self.fault
        if f["mode"] != "storm":
            return None
        if now >= self._storm_next:
            self._send_pfc({f.get("tc", 3): f.get("quanta", PFC_MAX_QUANTA)})
            # a broken NIC floods PAUSE: far more often than a pause needs refreshing
            self._storm_next = now + min(self._refresh_s(f.get("quanta", PFC_MAX_QUANTA)),
                                         STORM_INTERVAL_S)
        return self._storm_next

    def set_fault(self, mode: str, **kw) -> dict:
        if mode == "none":
            if self.fault["mode"] == "slow_receiver" and self._xoff_sent:
                self._send_pfc({self.fault.get("tc", 3): 0})
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
        elif mode == "rx_loss":
            rate = float(kw.get("rate", -1))
            if not 0 <= rate <= 1:
                raise ValueError("rx_loss needs a rate from 0 to 1")
            seed = int(kw.get("seed", 1))
            self.fault = {"mode": "rx_loss", "rate": rate, "seed": seed}
            self._loss_rng = random.Random(seed)
        else:
            raise ValueError("fault mode must be none, storm, slow_receiver or rx_loss")
        return self.fault
