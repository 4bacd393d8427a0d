"""Mode ib-credit at the endpoint: the NIC sends a credited class only while its leaf has
advertised room for it (InfiniBand's link-level flow control, IBA vol. 1, 7.9;
:mod:`traffic.credits`), and counts the time it had a frame and no credit (IB's PortXmitWait).

The leaf's agent sends the host a credit frame every credit period with, per credited class,
the limit (FCCL) up to which the host may send: what the host's frames have let go of in the
leaf plus the buffer the leaf keeps for the host's port (testbed.agent.credit). The NIC keeps,
per class, the credit left: the limit less the bytes it sent, a running total; the send loop
takes a frame of a class only while that credit covers the largest frame, and every frame sent
uses up its length. A class that is not credited has unlimited credit, so the loop's test costs
one comparison a frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from traffic.credits import (
    MAX_CREDIT_BLOCKS,
    FlowControlPacket,
    XmitWait,
    credit_frame,
    credit_left,
    parse_credit_frame,
)
from traffic.wire import ETH_P_CREDIT, NUM_TCS, ROCE_PACKET_OVERHEAD

if TYPE_CHECKING:
    from traffic.endpoint_config import EndpointConfig
    from traffic.endpoint_telemetry import EndpointStats

#: A credit frame's EtherType as it stands in a frame (bytes 12-13), for the receive path.
CREDIT_ETHERTYPE = ETH_P_CREDIT.to_bytes(2, "big")
#: An Ethernet header: what a RoCE frame adds to its packet on the wire.
_ETH = 14


class CreditNic:
    """Part of :class:`traffic.endpoint.Endpoint`: the credit per class. Uses the endpoint's
    ``cfg`` and ``stats``."""

    cfg: EndpointConfig
    stats: EndpointStats
    _send: Callable[[bytes], None]  # the endpoint's

    def _init_credit(self) -> None:
        inf = float("inf")
        #: per class: the bytes the NIC may still send (inf: a class under no credit)
        self.credit_left: list[float] = [inf] * NUM_TCS
        #: per credited class: the bytes sent so far (what the limits are reckoned against)
        self.credit_sent = [0] * NUM_TCS
        self.credit_wait = [XmitWait() for _ in range(NUM_TCS)]
        #: per class: the time its credit was short of a frame, whether a frame waited or not:
        #: the class could not send, so its QPs' Local ACK Timeout stands still, as it does
        #: while PFC pauses the class (traffic.qp.Requester.check_timeout). Counted from the
        #: send that left it short to the limit that covers a frame again.
        self.credit_short = [XmitWait() for _ in range(NUM_TCS)]
        for tc in self.cfg.credited:
            self.credit_left[tc] = 0.0  # nothing until the leaf's first limit
        #: the largest frame the NIC sends: a class sends only with credit for one
        self.credit_frame = self.cfg.mtu + ROCE_PACKET_OVERHEAD + _ETH

    def _credit_hello(self) -> None:
        """The NIC's own flow control packets, once its socket is open: its FCTBS (nothing
        sent yet) and room for anything (a host takes every frame as it comes, so its leaf's
        port toward it is not gated). Its leaf answers with its limits, which the NIC may
        have missed if the leaf's agent spoke before the NIC was up."""
        if self.cfg.credited:
            self._send(credit_frame(self.cfg.mac, [
                FlowControlPacket(vl=tc, fctbs=0, fccl=MAX_CREDIT_BLOCKS)
                for tc in self.cfg.credited]))

    def _on_credit(self, frame: bytes, now: float) -> None:
        """The leaf's flow control packets: a new limit for each credited class."""
        packets = parse_credit_frame(frame)
        self.stats.credit_rx += 1
        for p in packets or ():
            tc = p.vl
            if tc not in self.cfg.credited:
                continue
            self.credit_left[tc] = left = credit_left(self.credit_sent[tc], p.fccl)
            self.credit_short[tc].note(now, left < self.credit_frame)
            if left >= self.credit_frame:
                self.credit_wait[tc].note(now, False)

    def _credit_starved(self, tc: int, now: float) -> None:
        """A QP of class ``tc`` has a frame to send and the class has no credit for it."""
        self.credit_wait[tc].note(now, True)

    def _credit_used(self, tc: int, size: int, now: float) -> None:
        """A frame of ``size`` bytes of a credited class went out (ACKs and CNPs: the send
        loop's own frames count inline)."""
        self.credit_left[tc] -= size
        self.credit_sent[tc] += size
        if self.credit_left[tc] < self.credit_frame:
            self.credit_short[tc].note(now, True)

    def credit_wait_s(self, now: float) -> list[float]:
        return [w.total(now) for w in self.credit_wait]
