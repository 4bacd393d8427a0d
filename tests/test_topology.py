"""Topology generator, address plan and routes: pure data, no root needed."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from testbed.config.models import FabricConfig, FabricShape, QosConfig
from testbed.topology.graph import build_topology, compute_routes, link_ends


def topo_of(lossy: bool = False, **shape):
    """A lossy fabric may be larger: with PFC on a switch has at most 63 ports."""
    qos = QosConfig(pfc_enable=[]) if lossy else QosConfig()
    return build_topology(FabricConfig(fabric=FabricShape(**shape), qos=qos))


def test_counts_and_names() -> None:
    t = topo_of(spines=2, leaves=4, hosts_per_leaf=2)
    assert [s.name for s in t.spines] == ["spine1", "spine2"]
    assert [s.name for s in t.leaves] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert [h.name for h in t.hosts] == [f"h{i}" for i in range(1, 9)]
    assert len(t.links) == 8 + 2 * 4
    assert sorted(s.device_id for s in t.switches) == list(range(1, 7))


def test_address_plan_is_deterministic_and_unique() -> None:
    t = topo_of(spines=2, leaves=3, hosts_per_leaf=3)
    h = t.host("h5")
    assert (h.leaf, h.position, h.ip, h.mac) == ("leaf2", 2, "10.0.2.2", "02:00:0a:00:02:02")
    assert h.gateway_ip == "10.0.2.254"
    assert h.gateway_mac == t.switch("leaf2").ports[2].mac
    macs = [h.mac for h in t.hosts] + [p.mac for s in t.switches for p in s.ports.values()]
    assert len(macs) == len(set(macs))
    assert t.to_dict() == topo_of(spines=2, leaves=3, hosts_per_leaf=3).to_dict()


def test_ports_are_wired_symmetrically() -> None:
    t = topo_of(spines=3, leaves=3, hosts_per_leaf=1, parallel_links=2)
    for sw in t.switches:
        for p in sw.ports.values():
            if p.peer.startswith("h"):
                assert t.host(p.peer).leaf_port == p.number
            else:
                back = t.switch(p.peer).ports[p.peer_port]
                assert (back.peer, back.peer_port) == (sw.name, p.number)
    # leaf: 1 host port, then 3 spines x 2 links; spine: 3 leaves x 2 links
    assert list(t.switch("leaf1").ports) == list(range(1, 8))
    assert list(t.switch("spine1").ports) == list(range(1, 7))


def test_leaf_routes_use_every_uplink() -> None:
    t = topo_of(spines=2, leaves=4, hosts_per_leaf=2, parallel_links=2)
    leaf = t.switch("leaf1")
    routes = {r.prefix: r for r in compute_routes(t, leaf)}
    assert set(routes) == {"10.0.1.1/32", "10.0.1.2/32", "10.0.2.0/24", "10.0.3.0/24",
                           "10.0.4.0/24"}
    assert [nh.port for nh in routes["10.0.1.2/32"].nexthops] == [2]
    assert routes["10.0.1.2/32"].nexthops[0].dmac == t.host("h2").mac
    up = routes["10.0.3.0/24"].nexthops
    assert sorted(nh.port for nh in up) == [3, 4, 5, 6]
    # each uplink's next hop MAC is the spine port at the other end of that cable
    for nh in up:
        p = leaf.ports[nh.port]
        assert nh.dmac == t.switch(p.peer).ports[p.peer_port].mac
        assert nh.smac == p.mac


def test_spine_routes_reach_each_leaf_over_parallel_links() -> None:
    t = topo_of(spines=2, leaves=3, hosts_per_leaf=1, parallel_links=3)
    routes = {r.prefix: r for r in compute_routes(t, t.switch("spine2"))}
    assert set(routes) == {"10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"}
    assert sorted(nh.port for nh in routes["10.0.2.0/24"].nexthops) == [4, 5, 6]


def test_routes_converge_around_failed_links() -> None:
    """What BGP in a Clos converges to: both ends drop the link, and the other leaves stop
    sending a leaf's traffic to the spine that lost it."""
    t = topo_of(spines=2, leaves=4, hosts_per_leaf=1)
    l1s1 = t.switch("leaf1").ports[2]  # leaf1 port 2 -> spine1
    assert l1s1.peer == "spine1"
    down = frozenset({("leaf1", 2), ("spine1", l1s1.peer_port)})

    def ports(sw: str, prefix: str) -> list[int]:
        routes = {r.prefix: r for r in compute_routes(t, t.switch(sw), down)}
        return sorted(nh.port for nh in routes[prefix].nexthops) if prefix in routes else []

    assert ports("leaf1", "10.0.4.0/24") == [3]  # only through spine2
    assert ports("spine1", "10.0.1.0/24") == []  # spine1 withdraws leaf1's subnet
    assert ports("spine1", "10.0.4.0/24") != []
    s2 = [p.number for p in t.switch("leaf4").ports.values() if p.peer == "spine2"]
    assert ports("leaf4", "10.0.1.0/24") == s2  # leaf4 reaches leaf1 through spine2 only
    assert len(ports("leaf4", "10.0.3.0/24")) == 2  # and everything else as before
    # overrides are static: a bounce route pinned over the failed spine stays
    t.overrides["leaf4"] = {"10.0.1.0/24": (t.switch("leaf4").ports[2].number,)}
    assert ports("leaf4", "10.0.1.0/24") == [2]


def test_every_host_pair_has_a_path() -> None:
    """Walk the routes hop by hop (first next hop) from each host to each other host."""
    t = topo_of(spines=3, leaves=3, hosts_per_leaf=2, parallel_links=2)
    import ipaddress

    def lookup(sw, ip):
        best = None
        for r in compute_routes(t, sw):
            net = ipaddress.IPv4Network(r.prefix)
            if ipaddress.IPv4Address(ip) in net and (best is None or net.prefixlen >
                                                     ipaddress.IPv4Network(best.prefix).prefixlen):
                best = r
        return best

    for src in t.hosts:
        for dst in t.hosts:
            if src is dst:
                continue
            for choice in (0, -1):
                sw, hops = t.switch(src.leaf), 0
                while True:
                    r = lookup(sw, dst.ip)
                    assert r is not None, f"{sw.name} has no route to {dst.ip}"
                    port = sw.ports[r.nexthops[choice].port]
                    hops += 1
                    if port.peer == dst.name:
                        break
                    assert hops < 5
                    sw = t.switch(port.peer)
                assert hops == (1 if src.leaf == dst.leaf else 3)


def test_per_switch_seeds_differ_and_fixed_seed_is_shared() -> None:
    t = topo_of(spines=2, leaves=4)
    assert len({s.ecmp_seed for s in t.switches}) == 6
    cfg = FabricConfig.model_validate({"ecmp": {"seed": 5}})
    assert {s.ecmp_seed for s in build_topology(cfg).switches} == {5}


def test_json_roundtrip() -> None:
    t = topo_of(spines=2, leaves=2, hosts_per_leaf=1)
    d = json.loads(t.to_json())
    assert Counter(link["tier"] for link in d["links"]) == {"host": 2, "fabric": 4}
    assert "leaf1" in d["routes"]


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (4, 8, 2, 1), (3, 3, 1, 2), (2, 250, 1, 1)])
def test_other_shapes(shape) -> None:
    s, lf, h, p = shape
    t = topo_of(spines=s, leaves=lf, hosts_per_leaf=h, parallel_links=p, lossy=lf > 63)
    assert len(t.hosts) == lf * h
    assert len(t.links) == lf * h + s * lf * p


def test_one_parallel_link_fails_alone() -> None:
    """[spine1, leaf1, 2] takes down only the second link of the pair: leaf1 still reaches the
    other leaves through spine1, over the first link."""
    t = topo_of(spines=2, leaves=2, hosts_per_leaf=1, parallel_links=2)
    leaf1 = t.switch("leaf1")
    up1, up2 = [p.number for p in leaf1.ports.values() if p.peer == "spine1"]
    ends = link_ends(t, "spine1", "leaf1", 2)
    assert ends == {("leaf1", up2), ("spine1", leaf1.ports[up2].peer_port)}
    assert len(link_ends(t, "spine1", "leaf1")) == 4  # without an index: both links
    route = next(r for r in compute_routes(t, leaf1, frozenset(ends)) if r.prefix == "10.0.2.0/24")
    via = [nh.port for nh in route.nexthops]
    assert up1 in via and up2 not in via
    with pytest.raises(ValueError, match="1..2"):
        link_ends(t, "spine1", "leaf1", 3)


def test_rerouter_fails_just_that_link() -> None:
    from types import SimpleNamespace

    from testbed.control.p4runtime import Rerouter

    class AnyBuilder:
        def __getattr__(self, name: str):
            return lambda *a, **k: (name, a, k)

    t = topo_of(spines=2, leaves=2, hosts_per_leaf=1, parallel_links=2)
    told: list[tuple[str, str]] = []

    def session(n: str) -> SimpleNamespace:
        def stage(routing_at) -> bool:
            routing_at(0)  # entities from the rerouter's own builder
            told.append(("stage", n))
            return n != "spine2"  # spine2's routes did not change: nothing staged
        return SimpleNamespace(stage=stage, **{step: lambda s=step: told.append((s, n))
                                               for step in ("grow", "switch_over", "prune")})

    sessions = {s.name: session(s.name) for s in t.switches}
    rr = Rerouter(t, builder=AnyBuilder())  # its own builder: none is borrowed from a session
    rr.drain_s = 0.0
    changed = [s.name for s in t.switches if s.name != "spine2"]
    assert rr.set_link(sessions, "spine1", "leaf1", False, 2) == changed
    assert rr.down_links == link_ends(t, "spine1", "leaf1", 2)
    # make before break, fabric-wide: every switch grows, then every one switches over, then
    # every one prunes the old
    assert told == [("stage", s.name) for s in t.switches] + [
        (step, n) for step in ("grow", "switch_over", "prune") for n in changed]
    rr.set_link(sessions, "spine1", "leaf1", True)
    assert rr.down_links == set()
