"""The endpoint's QP table: :class:`QpState` (one RC QP: its requester or responder, DCQCN
reaction point and pacer), creating QPs, and the frame builders they share."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traffic.chain import Chain
from traffic.dcqcn import DcqcnParams, ReactionPoint
from traffic.packets import RoceFrameBuilder
from traffic.qp import Requester, Responder

if TYPE_CHECKING:
    from traffic.endpoint_config import EndpointConfig


def qp_source_port(qpn: int, dqpn: int) -> int:
    """UDP source port of a QP: a hash (CRC32) of the QP numbers into 49152-65535, the range
    IBTA's RoCEv2 annex (A17.3.1) sets aside for this entropy. Linux's rxe derives it otherwise
    (rdma_get_udp_sport(): a flow label from the product of the QP numbers), which spreads
    ECMP better. Adopting it moves every QP's path: the 4:1 incast's placement then became
    unfair under PFC, and one QP paused past the then fixed 0.5 s retransmission timeout resent
    what was not lost; the timer now scales with the link (traffic.qp.local_ack_timeout_s),
    and moving the ports is a change of its own to measure."""
    return 0xC000 | (zlib.crc32(f"{qpn}:{dqpn}".encode()) & 0x3FFF)


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
    ack_tc: int = -1  # the class of its ACKs/NAKs (responder); create_qp sets it
    chain: Chain | None = None  # a collective's requester: it posts as its gates deliver
    chains: list[Chain] | None = None  # a responder: the chains waiting on its messages

    @property
    def idle(self) -> bool:
        """A requester with nothing to send now or later (every message posted and acked)."""
        return (self.requester is not None and self.requester.idle
                and (self.chain is None or not self.chain.waiting))

    @property
    def rate_bps(self) -> float:
        r = self.rp.rc if self.rp else float("inf")
        return min(r, self.rate_cap_bps) if self.rate_cap_bps else r


class QpTable:
    """Part of :class:`traffic.endpoint.Endpoint`: its QPs (``qps``, and ``_requesters``, the
    senders, for the send loop). Uses the endpoint's ``cfg``, ``dcqcn``, ``now()``,
    ``held_seconds()`` (each requester's timer reads the time its class could not send) and
    ``_housekeeping_by()``."""

    cfg: EndpointConfig
    dcqcn: DcqcnParams

    def _init_qps(self) -> None:
        self.qps: dict[int, QpState] = {}
        self._requesters: list[QpState] = []
        self._builders: dict[tuple[str, int, int], RoceFrameBuilder] = {}

    def _builder(self, peer_ip: str, sport: int, dscp: int) -> RoceFrameBuilder:
        key = (peer_ip, sport, dscp)
        b = self._builders.get(key)
        if b is None:
            b = RoceFrameBuilder(self.cfg.mac, self.cfg.next_hop_mac, self.cfg.ip, peer_ip, sport,
                                 dscp=dscp)
            self._builders[key] = b
        return b

    def create_qp(self, qpn: int, role: str, peer_ip: str, peer_qpn: int, tc: int = 3,
                  sport: int | None = None, rate_cap_mbps: float | None = None,
                  start_psn: int = 0, max_outstanding: int = 32,
                  rto_s: float | None = None, ack_tc: int | None = None) -> QpState:
        if qpn in self.qps:
            raise ValueError(f"QP {qpn} exists")
        if role not in ("requester", "responder"):
            raise ValueError("role must be 'requester' or 'responder'")
        if not 0 <= tc <= 7:
            raise ValueError("tc must be 0..7")
        ack_tc = tc if ack_tc is None else ack_tc
        for c in {tc, ack_tc}:
            if c not in self.cfg.tc_to_dscp:
                raise ValueError(f"class {c} has no DSCP on this host (--tc-dscp); classes: "
                                 f"{', '.join(map(str, sorted(self.cfg.tc_to_dscp)))}")
        dscp = self.cfg.tc_to_dscp[tc]
        sport = sport or qp_source_port(qpn, peer_qpn)
        st = QpState(qpn, role, tc, peer_ip, peer_qpn, sport,
                     rate_cap_bps=rate_cap_mbps * 1e6 if rate_cap_mbps else None)
        builder = self._builder(peer_ip, sport, dscp)
        if role == "requester":
            st.requester = Requester(qpn, peer_qpn, builder, mtu=self.cfg.mtu,
                                     start_psn=start_psn, max_outstanding=max_outstanding,
                                     rto_s=self.cfg.rto_s if rto_s is None else rto_s,
                                     retry_count=self.cfg.retry_count,
                                     paused=lambda now: self.held_seconds(tc, now))
            if self.cfg.dcqcn_enabled:
                st.rp = ReactionPoint(self.dcqcn, now=self.now())
            self._requesters.append(st)
        else:
            st.responder = Responder(qpn, peer_qpn, start_psn=start_psn)
            st.ack_tc = ack_tc
            st.builder = self._builder(peer_ip, sport, self.cfg.tc_to_dscp[ack_tc])
            st.cnp_builder = self._builder(peer_ip, sport, self.cfg.cnp_dscp)
        self.qps[qpn] = st
        return st

    def chain_post(self, st: QpState, kind: str, size: int, count: int, after: list[int],
                   now: float) -> None:
        """Post ``count`` messages on requester ``st``, message i once each responder QP of
        ``after`` (on this host) has delivered i (:class:`traffic.chain.Chain`)."""
        if st.chain is not None:
            raise ValueError(f"QP {st.qpn} already posts a chain")
        gates = []
        for q in after:
            g = self.qps.get(q)
            if g is None or g.responder is None:
                raise ValueError(f"after: no responder QP {q} on this host")
            gates.append(g)
        st.chain = Chain(st.requester, kind, size, count, [g.responder for g in gates])
        for g in gates:
            g.chains = [*(g.chains or ()), st.chain]
        st.chain.release(now)

    def _release_chains(self, st: QpState, now: float) -> None:
        """``st``, a gate, took a packet: post what its chains may now send. Work posted
        has housekeeping look at once, as a ``post`` command does: it sets the retransmission
        timer's deadline from the work there is (a lost tail is found by nothing else)."""
        if sum(c.release(now) for c in st.chains):
            self._housekeeping_by(now)
