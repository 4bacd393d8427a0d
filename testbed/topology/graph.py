"""The leaf-spine graph as pure data: nodes, ports, links, addresses and routes.

Like Mininet's ``Topo``, this module knows nothing of processes or interfaces; it turns a
:class:`FabricConfig` into a :class:`Topology` that the network, the control plane and the
report all read. The address plan is deterministic so that a run can be reproduced and a
result read without the run that produced it:

* host ``h<n>`` (numbered leaf by leaf from 1) on leaf L, position i (1-based):
  IPv4 ``10.0.L.i/32``, MAC ``02:00:0a:00:LL:ii``; its gateway is ``10.0.L.254`` on the leaf.
* switch port MACs: ``02:<role>:00:<index>:00:<port>``, role 0x51 for spines, 0x4c for leaves.
* leaf ports: 1..H to hosts, then one per (spine, parallel link), spine-major.
  spine ports: one per (leaf, parallel link), leaf-major.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from ipaddress import IPv4Network

from testbed.config.models import FabricConfig

SPINE_ROLE = 0x51
LEAF_ROLE = 0x4C


def switch_port_mac(role: int, index: int, port: int) -> str:
    return f"02:{role:02x}:00:{index:02x}:{port >> 8:02x}:{port & 0xFF:02x}"


@dataclass(frozen=True)
class Port:
    """One switch port and what is on the other end of its cable."""

    number: int
    mac: str
    peer: str
    peer_port: int  # 0 for a host (its only interface, eth0)
    rate_mbps: float


@dataclass
class Switch:
    name: str
    role: str  # "spine" | "leaf"
    index: int  # 1-based within the role
    device_id: int  # P4Runtime device id, unique in the fabric
    ports: dict[int, Port] = field(default_factory=dict)
    ecmp_seed: int = 0


@dataclass(frozen=True)
class Host:
    name: str
    leaf: str
    leaf_index: int
    position: int  # 1-based on its leaf
    ip: str
    mac: str
    leaf_port: int
    gateway_ip: str
    gateway_mac: str
    rate_mbps: float


@dataclass(frozen=True)
class Link:
    """A cable. ``intf`` names are what Mininet gives the veths (node-ethN)."""

    a: str
    a_port: int
    b: str
    b_port: int
    rate_mbps: float
    tier: str  # "host" | "fabric"


@dataclass(frozen=True)
class NextHop:
    port: int
    smac: str
    dmac: str


@dataclass(frozen=True)
class Route:
    """An IPv4 prefix and the equal-cost next hops that reach it."""

    prefix: str
    nexthops: tuple[NextHop, ...]


@dataclass
class Topology:
    name: str
    spines: list[Switch]
    leaves: list[Switch]
    hosts: list[Host]
    links: list[Link]
    mtu: int
    #: Static route overrides (path pinning, bounce routes): switch -> prefix -> ports.
    overrides: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def switches(self) -> list[Switch]:
        return self.spines + self.leaves

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(f"no switch named {name!r}; switches are "
                       f"{', '.join(s.name for s in self.switches)}")

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(f"no host named {name!r}; hosts are {', '.join(h.name for h in self.hosts)}")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "mtu": self.mtu,
            "spines": [_switch_dict(s) for s in self.spines],
            "leaves": [_switch_dict(s) for s in self.leaves],
            "hosts": [asdict(h) for h in self.hosts],
            "links": [asdict(link) for link in self.links],
            "route_overrides": {sw: {pfx: list(ports) for pfx, ports in o.items()}
                                for sw, o in self.overrides.items()},
            "routes": {
                s.name: [
                    {"prefix": r.prefix, "nexthops": [asdict(n) for n in r.nexthops]}
                    for r in compute_routes(self, s)
                ]
                for s in self.switches
            },
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _switch_dict(s: Switch) -> dict:
    d = asdict(s)
    d["ports"] = [asdict(p) for p in s.ports.values()]
    return d


def host_subnet(leaf_index: int) -> IPv4Network:
    return IPv4Network(f"10.0.{leaf_index}.0/24")


def _seed_for(cfg: FabricConfig, device_id: int) -> int:
    if cfg.ecmp.seed == "per_switch":
        # A fixed, well-spread value per switch: reproducible across runs, distinct per switch.
        return (device_id * 40503) & 0xFFFF
    return int(cfg.ecmp.seed)


def build_topology(cfg: FabricConfig) -> Topology:
    shape = cfg.fabric
    spines = [
        Switch(f"spine{i}", "spine", i, device_id=i) for i in range(1, shape.spines + 1)
    ]
    leaves = [
        Switch(f"leaf{i}", "leaf", i, device_id=shape.spines + i)
        for i in range(1, shape.leaves + 1)
    ]
    for s in spines + leaves:
        s.ecmp_seed = _seed_for(cfg, s.device_id)
    hosts: list[Host] = []
    links: list[Link] = []

    n = 0
    for leaf in leaves:
        for pos in range(1, shape.hosts_per_leaf + 1):
            n += 1
            port = pos
            gw_mac = switch_port_mac(LEAF_ROLE, leaf.index, port)
            host = Host(
                name=f"h{n}",
                leaf=leaf.name,
                leaf_index=leaf.index,
                position=pos,
                ip=f"10.0.{leaf.index}.{pos}",
                mac=f"02:00:0a:00:{leaf.index:02x}:{pos:02x}",
                leaf_port=port,
                gateway_ip=f"10.0.{leaf.index}.254",
                gateway_mac=gw_mac,
                rate_mbps=shape.host_link_mbps,
            )
            hosts.append(host)
            leaf.ports[port] = Port(port, gw_mac, host.name, 0, shape.host_link_mbps)
            links.append(Link(host.name, 0, leaf.name, port, shape.host_link_mbps, "host"))

    for leaf in leaves:
        for spine in spines:
            for k in range(shape.parallel_links):
                lport = shape.hosts_per_leaf + (spine.index - 1) * shape.parallel_links + k + 1
                sport = (leaf.index - 1) * shape.parallel_links + k + 1
                rate = shape.fabric_link_mbps
                leaf.ports[lport] = Port(
                    lport, switch_port_mac(LEAF_ROLE, leaf.index, lport), spine.name, sport, rate
                )
                spine.ports[sport] = Port(
                    sport, switch_port_mac(SPINE_ROLE, spine.index, sport), leaf.name, lport, rate
                )
                links.append(Link(leaf.name, lport, spine.name, sport, rate, "fabric"))

    for s in spines + leaves:
        s.ports = dict(sorted(s.ports.items()))
    return Topology(cfg.name, spines, leaves, hosts, links, shape.mtu)


def _peer_mac(topo: Topology, port: Port) -> str:
    peer = topo.switch(port.peer)
    return peer.ports[port.peer_port].mac


def pin_route(topo: Topology, switch: str, prefix: str, via: str) -> None:
    """Send ``prefix`` from ``switch`` through the links to ``via`` only (a static override).

    Raises KeyError/ValueError naming the switch, neighbour or prefix that does not fit."""
    sw = topo.switch(switch)
    ports = tuple(p.number for p in sw.ports.values() if p.peer == via)
    if not ports:
        peers = sorted({p.peer for p in sw.ports.values()})
        raise ValueError(f"{switch} has no link to {via!r}; its neighbours: {', '.join(peers)}")
    IPv4Network(prefix)
    topo.overrides.setdefault(switch, {})[prefix] = ports


def _nexthop(topo: Topology, sw: Switch, port: int) -> NextHop:
    p = sw.ports[port]
    if p.peer.startswith("spine") or p.peer.startswith("leaf"):
        return NextHop(port, p.mac, _peer_mac(topo, p))
    return NextHop(port, p.mac, topo.host(p.peer).mac)


#: A failed link, named by both of its ends: {(switch, port), (switch, port)}.
DownLinks = frozenset[tuple[str, int]]


def links_between(topo: Topology, a: str, b: str) -> list[Link]:
    """The links between two nodes, parallel link 1 first: in the order they are built, which
    is the order of their port numbers at both ends."""
    return [ln for ln in topo.links if {ln.a, ln.b} == {a, b}]


def link_ends(topo: Topology, a: str, b: str, index: int | None = None) -> set[tuple[str, int]]:
    """The (switch, port) ends of every link between ``a`` and ``b``, or of the ``index``-th
    parallel link (1-based) only. ValueError names what does not exist."""
    links = links_between(topo, a, b)
    if not links:
        raise ValueError(f"there is no link {a}-{b}")
    if index is not None:
        if not 1 <= index <= len(links):
            raise ValueError(f"{a}-{b} has {len(links)} parallel link(s): the link index is "
                             f"1..{len(links)}, not {index}")
        links = [links[index - 1]]
    return {end for ln in links for end in ((ln.a, ln.a_port), (ln.b, ln.b_port))}


def compute_routes(topo: Topology, sw: Switch, down: DownLinks = frozenset()) -> list[Route]:
    """Routes of one switch, with the topology's overrides applied.

    A leaf reaches its own hosts directly (/32) and every other leaf's subnet through all its
    spine uplinks; a spine reaches each leaf's subnet through all its links to that leaf.
    Valley-free, so these routes alone can never form a loop; overrides can (on purpose).

    ``down`` holds the ends of failed links: the routes are those the fabric converges to
    without them, as BGP in a Clos would (a spine that lost a leaf withdraws its subnet, so the
    other leaves stop using that spine for it). Overrides are static and stay as they are.
    """
    routes = _default_routes(topo, sw, down)
    over = topo.overrides.get(sw.name, {})
    if over:
        routes = [r for r in routes if r.prefix not in over]
        routes += [Route(pfx, tuple(_nexthop(topo, sw, p) for p in ports))
                   for pfx, ports in over.items()]
    return routes


def _default_routes(topo: Topology, sw: Switch, down: DownLinks = frozenset()) -> list[Route]:
    def live(s: Switch, p: Port) -> bool:
        return (s.name, p.number) not in down

    routes: list[Route] = []
    if sw.role == "leaf":
        for h in topo.hosts:
            if h.leaf == sw.name:
                routes.append(
                    Route(f"{h.ip}/32", (NextHop(h.leaf_port, sw.ports[h.leaf_port].mac, h.mac),))
                )
        # the leaves each spine still reaches over a live link
        reach = {s.name: {q.peer for q in s.ports.values() if live(s, q)} for s in topo.spines}
        live_up = [p for p in sw.ports.values() if p.peer.startswith("spine") and live(sw, p)]
        for other in topo.leaves:
            if other.name == sw.name:
                continue
            # through every live uplink whose spine still has a live link to that leaf
            uplinks = tuple(NextHop(p.number, p.mac, _peer_mac(topo, p))
                            for p in live_up if other.name in reach[p.peer])
            if uplinks:
                routes.append(Route(str(host_subnet(other.index)), uplinks))
    else:
        for leaf in topo.leaves:
            links = tuple(
                NextHop(p.number, p.mac, _peer_mac(topo, p))
                for p in sw.ports.values()
                if p.peer == leaf.name and live(sw, p)
            )
            if links:
                routes.append(Route(str(host_subnet(leaf.index)), links))
    return routes


def intf_name(node: str, port: int) -> str:
    """The Linux interface Mininet creates for a node's port (host ports are eth0)."""
    return f"{node}-eth{port}"
