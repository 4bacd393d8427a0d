"""The packet load a scenario offers the machine: packet passes per switch and frames per host,
each a second, at the scenario's link rates (issue #32, "Every host busy").

BMv2 forwards packets, not bits, and an endpoint handles frames, so what a run costs in CPU is
a count of packets, which this module works out from the flows alone, without running them:

* **Rates.** Every queue pair sends at its host's line rate (or its ``rate_cap_mbps``), and
  the QPs that share a link share it max-min fairly (progressive filling, Bertsekas and
  Gallager, *Data Networks*, 6.5.2): what a lossless fabric under PFC and DCQCN converges to,
  and the most it can carry. A QP whose ECMP next hops are several is split over them evenly
  (the expected share of a hash; the sum over the switches is the same either way).
* **Data packets.** A message of M bytes is ceil(M / MTU) packets (the RoCE path MTU,
  :func:`testbed.topology.qos.roce_mtu`), each with its headers on the wire (Ethernet 14, IPv4 20,
  UDP 8, BTH 12, ICRC 4, and the RETH 16 on a WRITE's first).
* **ACKs.** The requester asks for an ACK every ``ack_req_every`` packets and on a message's
  last (traffic/qp.py), and the responder answers each: ceil(packets / 8) a message.
* **CNPs.** Where DCQCN is on and the class is ECN-marked, a QP held back by a switch's egress
  link (not by its own NIC) gets at most one CNP per notification interval, 50 us scaled to
  the link (traffic/dcqcn.py, NotificationPoint): that at most is counted.
* **Time.** The load is taken at each flow's start, with every flow that runs then (a flow of
  ``count`` messages is taken to run until the end: an upper bound); the peak is what a run
  must afford.

* **Background.** A best-effort background flow (:mod:`traffic.background`) sends
  ``rate / frame size`` frames a second whatever the fabric does, and is counted at that rate
  at every switch on its path (an upper bound: what a congested port drops goes no further)
  and at both hosts (its sender's process, and the receiving host's endpoint, whose socket sees
  every frame). It takes no part in the QPs' max-min share: below a lossless class in the
  ports' strict priority, it gets what the QPs leave.

Every frame passes each switch on its path once (ACKs and CNPs take the reverse path), and is
handled twice by endpoints: by its sender and by its receiver. PFC frames, ARP and the agents'
own work per pause are not counted here (the budget's margin covers them); mode ib-credit's
credit frames, sent every credit period on every port while traffic flows, are
(:func:`add_credit_frames`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import TypeVar

from testbed.topology.graph import DownLinks, Topology, compute_routes
from testbed.topology.qos import roce_mtu
from traffic.background import BackgroundSpec, frame_size, offered_mbps
from traffic.dcqcn import REFERENCE_LINK_BPS
from traffic.flows import FlowSpec
from traffic.wire import (
    BTH_LEN,
    ETH_HEADER_LEN,
    ICRC_LEN,
    IPV4_HEADER_LEN,
    RETH_LEN,
    UDP_HEADER_LEN,
)

#: traffic/qp.py's Requester default: an ACK request every 8 packets (and on a message's last).
ACK_REQ_EVERY = 8
#: Headers of every RoCE data packet on the wire: Ethernet, IPv4, UDP, BTH, ICRC.
DATA_HEADER_BYTES = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN + ICRC_LEN
#: [Z15]'s CNP interval N at 40 Gbit/s (traffic/dcqcn.py, NotificationPoint.scaled).
CNP_INTERVAL_S_AT_40G = 50e-6
#: The most switch hops a path may take (bounce routes loop on purpose; a packet's TTL ends
#: a real loop, this ends the walk).
MAX_HOPS = 16

#: A directed link: the node that sends on it and its port (0 for a host's NIC).
Hop = tuple[str, int]


@dataclass
class Load:
    """What a scenario offers each switch and host, per second, at one pair of link rates."""

    host_mbps: float
    fabric_mbps: float
    #: the instant (s from the run's start) the load peaks at, and the flows running then
    at_s: float = 0.0
    flows: list[str] = field(default_factory=list)
    switch_pps: dict[str, float] = field(default_factory=dict)
    host_fps: dict[str, float] = field(default_factory=dict)
    #: the QPs each host's endpoint holds then, requesters and responders (what a frame costs
    #: grows with them: testbed.budget.cores.demand)
    host_qps: dict[str, int] = field(default_factory=dict)
    #: each flow's goodput in Mbit/s (payload bytes), summed over its QPs
    flow_mbps: dict[str, float] = field(default_factory=dict)
    #: wake-ups a second each switch's agent makes beyond those the calibration measured
    #: (mode ib-credit: a credit tick every credit period, traffic or not)
    agent_ticks_per_s: float = 0.0

    @property
    def passes(self) -> float:
        """Packet passes a second, every switch together."""
        return sum(self.switch_pps.values())

    @property
    def frames(self) -> float:
        """Frames endpoints handle a second, every host together."""
        return sum(self.host_fps.values())


@dataclass(frozen=True)
class Wire:
    """One message's cost on the wire: packets, their bytes, ACKs."""

    packets: int
    wire_bytes: int
    acks: int


def message_wire(message_bytes: int, mtu: int, kind: str = "write") -> Wire:
    """The packets, wire bytes and ACKs of one message at an interface MTU."""
    pmtu = roce_mtu(mtu)
    n = max(1, math.ceil(message_bytes / pmtu))
    extra = RETH_LEN if kind == "write" else 0  # a WRITE's first packet also carries the RETH
    return Wire(n, message_bytes + n * DATA_HEADER_BYTES + extra, math.ceil(n / ACK_REQ_EVERY))


def _lookup(routes, ip: str):
    """The longest-prefix route for ``ip`` (None: no route)."""
    addr = IPv4Address(ip)
    best, best_len = None, -1
    for r in routes:
        net = IPv4Network(r.prefix)
        if addr in net and net.prefixlen > best_len:
            best, best_len = r, net.prefixlen
    return best


Shares = tuple[dict[str, float], dict[Hop, float]]


def path_shares(topo: Topology, src: str, dst: str, down: DownLinks = frozenset(),
                routes: dict | None = None) -> Shares:
    """How a packet from host ``src`` to host ``dst`` spreads: the share of it that passes each
    switch, and that leaves each node's port, ECMP next hops taken evenly. ``routes``: every
    switch's routes, if already computed (:func:`testbed.topology.graph.compute_routes`)."""
    h_src, h_dst = topo.host(src), topo.host(dst)
    if routes is None:
        routes = {s.name: compute_routes(topo, s, down) for s in topo.switches}
    passes: dict[str, float] = defaultdict(float)
    hops: dict[Hop, float] = defaultdict(float)
    hops[(src, 0)] = 1.0
    at: dict[str, float] = {h_src.leaf: 1.0}
    for _ in range(MAX_HOPS):
        nxt: dict[str, float] = defaultdict(float)
        for name, share in at.items():
            passes[name] += share
            route = _lookup(routes[name], h_dst.ip)
            if route is None:  # no route: the packet is dropped here
                continue
            sw = topo.switch(name)
            for nh in route.nexthops:
                part = share / len(route.nexthops)
                hops[(name, nh.port)] += part
                peer = sw.ports[nh.port].peer
                if peer != dst:
                    nxt[peer] += part
        if not nxt:
            break
        at = nxt
    return dict(passes), dict(hops)


def link_capacity_bps(topo: Topology, hop: Hop) -> float:
    """What a directed link carries a second, in bits: a host's NIC or a switch port's rate."""
    node, port = hop
    if port == 0:
        return topo.host(node).rate_mbps * 1e6
    return topo.switch(node).ports[port].rate_mbps * 1e6


@dataclass
class _Qp:
    """The ``n`` queue pairs of one flow: alike (same path, same demand), so filled as one."""

    flow: FlowSpec
    n: int
    demand_bps: float
    hops: dict[Hop, float]
    rate_bps: float = 0.0  # each QP's
    frozen_by: Hop | None = None


def max_min_rates(qps: list[_Qp], capacity: dict[Hop, float]) -> None:
    """Progressive filling: raise every unfrozen QP's rate together until a link fills or a QP
    reaches its demand; freeze those; repeat. Sets each QP's rate and what froze it."""
    active = [q for q in qps if q.demand_bps > 0]
    while active:
        step = min(q.demand_bps - q.rate_bps for q in active)
        full: Hop | None = None
        for hop, cap in capacity.items():
            use = sum(q.n * q.hops.get(hop, 0.0) for q in active)
            if use <= 0:
                continue
            left = cap - sum(q.n * q.rate_bps * q.hops.get(hop, 0.0) for q in qps)
            if left / use < step:
                step, full = max(left / use, 0.0), hop
        for q in active:
            q.rate_bps += step
        if full is None:
            done = [q for q in active if q.rate_bps >= q.demand_bps - 1e-6]
        else:
            done = [q for q in active if q.hops.get(full, 0.0) > 0]
            for q in done:
                q.frozen_by = full
        active = [q for q in active if q not in done]


#: A flow or a background flow: what :func:`running` filters.
F = TypeVar("F", FlowSpec, BackgroundSpec)


def running(flows: list[F], t: float, end_s: float) -> list[F]:
    """The flows that send at ``t`` (a flow of ``count`` messages, or a background flow
    without a duration: until ``end_s``)."""
    return [f for f in flows if f.start_s <= t < (
        f.start_s + f.duration_s if f.duration_s is not None else end_s)]


class Paths:
    """Every pair's :func:`path_shares` in one topology, each worked out once."""

    def __init__(self, topo: Topology, down: DownLinks = frozenset()) -> None:
        self.topo, self.down = topo, down
        self.routes = {s.name: compute_routes(topo, s, down) for s in topo.switches}
        self._shares: dict[tuple[str, str], Shares] = {}

    def __call__(self, src: str, dst: str) -> Shares:
        if (src, dst) not in self._shares:
            self._shares[(src, dst)] = path_shares(self.topo, src, dst, self.down, self.routes)
        return self._shares[(src, dst)]


def _qps_at(topo: Topology, flows: list[FlowSpec], paths: Paths) -> list[_Qp]:
    """One :class:`_Qp` per flow (its QPs), each QP's demand its NIC's rate or its cap."""
    out = []
    for f in flows:
        demand = topo.host(f.src).rate_mbps * 1e6
        if f.rate_cap_mbps is not None:
            demand = min(demand, f.rate_cap_mbps * 1e6)
        out.append(_Qp(f, f.qps, demand, paths(f.src, f.dst)[1]))
    return out


def load_at(topo: Topology, flows: list[FlowSpec], cnp_classes: set[int],
            down: DownLinks = frozenset(), paths: Paths | None = None,
            background: list[BackgroundSpec] | tuple = ()) -> Load:
    """The load of ``flows`` and ``background`` all sending at once. ``cnp_classes``: the
    classes whose congestion makes receivers send CNPs (ECN-marked, DCQCN on)."""
    paths = paths or Paths(topo, down)
    qps = _qps_at(topo, flows, paths)
    capacity = {hop: link_capacity_bps(topo, hop) for q in qps for hop in q.hops}
    max_min_rates(qps, capacity)
    load = Load(topo.hosts[0].rate_mbps if topo.hosts else 0.0,
                _fabric_rate(topo), flows=[f.name for f in [*flows, *background]])
    sw: dict[str, float] = defaultdict(float)
    hosts: dict[str, float] = defaultdict(float)
    host_qps: dict[str, int] = defaultdict(int)
    goodput: dict[str, float] = defaultdict(float)
    for q in qps:
        f = q.flow
        wire = message_wire(f.message_bytes, topo.mtu, f.kind)
        msgs = q.n * q.rate_bps / 8 / wire.wire_bytes
        data, acks = msgs * wire.packets, msgs * wire.acks
        cnps = 0.0
        if f.tc in cnp_classes and q.frozen_by is not None and q.frozen_by[1] != 0:
            rate_bps = topo.host(f.dst).rate_mbps * 1e6
            cnps = q.n / (CNP_INTERVAL_S_AT_40G * REFERENCE_LINK_BPS / rate_bps)
        for name, share in paths(f.src, f.dst)[0].items():
            sw[name] += data * share
        for name, share in paths(f.dst, f.src)[0].items():
            sw[name] += (acks + cnps) * share
        hosts[f.src] += data + acks + cnps
        hosts[f.dst] += data + acks + cnps
        host_qps[f.src] += q.n
        host_qps[f.dst] += q.n
        goodput[f.name] += msgs * f.message_bytes * 8 / 1e6
    for b in background:
        fps = offered_mbps(b, topo.host(b.src).rate_mbps) * 1e6 / 8 / frame_size(b, topo.mtu)
        for name, share in paths(b.src, b.dst)[0].items():
            sw[name] += fps * share
        hosts[b.src] += fps
        hosts[b.dst] += fps
    load.switch_pps = {s.name: sw.get(s.name, 0.0) for s in topo.switches}
    load.host_fps = {h.name: hosts.get(h.name, 0.0) for h in topo.hosts}
    load.host_qps = {h.name: host_qps.get(h.name, 0) for h in topo.hosts}
    load.flow_mbps = dict(goodput)
    return load


def _fabric_rate(topo: Topology) -> float:
    fabric = [ln.rate_mbps for ln in topo.links if ln.tier == "fabric"]
    return fabric[0] if fabric else (topo.hosts[0].rate_mbps if topo.hosts else 0.0)


def peak_load(topo: Topology, flows: list[FlowSpec], end_s: float, cnp_classes: set[int],
              down: DownLinks = frozenset(),
              background: list[BackgroundSpec] | tuple = ()) -> Load:
    """The load at the busiest instant: at each flow's start, every flow sending then; the
    instant with the most packet work (passes plus endpoint frames) is the peak."""
    best = Load(topo.hosts[0].rate_mbps if topo.hosts else 0.0, _fabric_rate(topo),
                switch_pps={s.name: 0.0 for s in topo.switches},
                host_fps={h.name: 0.0 for h in topo.hosts})
    paths = Paths(topo, down)
    for t in sorted({f.start_s for f in [*flows, *background]}):
        load = load_at(topo, running(flows, t, end_s), cnp_classes, down, paths,
                       running(list(background), t, end_s))
        load.at_s = t
        if load.passes + load.frames > best.passes + best.frames:
            best = load
    return best


def add_credit_frames(load: Load, topo: Topology, period_s: float) -> None:
    """Mode ib-credit's credit frames (testbed.agent.credit), at most one a port a credit
    period while its books move, as the load's peak is taken: each switch's BMv2 passes its
    neighbours' frames and its own (its packet socket sees what its agent sends out of a port),
    and each host's endpoint handles its leaf's; and the credit tick that makes them, which
    every agent runs every period, priced as one more wake-up (benchmarks/mode_cpu.py measured
    a tick at 155 us at rest and 265 us under the all-reduce, against this machine's 357 us a
    calibrated wake-up)."""
    per_s = 1 / period_s
    load.agent_ticks_per_s += per_s
    for sw in topo.switches:
        load.switch_pps[sw.name] = load.switch_pps.get(sw.name, 0.0) + 2 * len(sw.ports) * per_s
    for h in topo.hosts:
        load.host_fps[h.name] = load.host_fps.get(h.name, 0.0) + per_s
