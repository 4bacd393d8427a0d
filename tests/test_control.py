"""The P4Runtime entries the control plane computes for each switch (testbed.control.entries), read
back through a recording builder: pure data, no switch and no root needed.

A :class:`Recorder` stands in for :class:`testbed.control.entries.EntryBuilder`: it keeps each
call's arguments instead of encoding them, so the tests read the routes, ECMP groups and queue
profiles a switch would be given. One test decodes the real builder's protobufs to show that
both say the same.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pytest

from testbed.config.constants import EMPTY_CELL, PFC_MCAST_GROUP, THRESHOLD_NEVER
from testbed.config.models import FabricConfig, FabricShape
from testbed.control.entries import (
    INGRESS,
    EntryBuilder,
    build_switch_program,
    classes_above,
    encode,
    hash_masks,
    load_p4info,
    lossless_entries,
    mac_to_int,
    routing_entries,
)
from testbed.topology.graph import (
    Switch,
    Topology,
    build_topology,
    compute_routes,
    host_subnet,
    link_ends,
)
from testbed.topology.qos import queue_profiles

PROFILE = f"{INGRESS}.ecmp_selector"
ROUTE_TABLE = f"{INGRESS}.ipv4_route"


@dataclass(frozen=True)
class Call:
    """One builder call: what kind of entity, and its arguments."""

    kind: str
    args: tuple
    params: tuple = ()

    def get(self, name: str):
        return dict(self.params)[name]


class Recorder:
    """EntryBuilder's interface; each method returns a :class:`Call` rather than a protobuf."""

    def action(self, name: str, **params: int) -> Call:
        return Call("action", (name,), tuple(params.items()))

    def member(self, profile: str, member_id: int, action: Call) -> Call:
        return Call("member", (profile, member_id, action))

    def group(self, profile: str, group_id: int, member_ids, max_size: int) -> Call:
        return Call("group", (profile, group_id, tuple(member_ids), max_size))

    def lpm_entry(self, table: str, field: str, prefix: str, *, member_id: int = 0,
                  group_id: int = 0) -> Call:
        return Call("lpm", (table, field, prefix, member_id, group_id))

    def exact_entry(self, table: str, field: str, value: int, action: Call) -> Call:
        return Call("exact", (table, ((field, value),), action))

    def entry(self, table: str, keys: dict[str, int], action: Call) -> Call:
        return Call("exact", (table, tuple(keys.items()), action))

    def default_entry(self, table: str, action: Call) -> Call:
        return Call("default", (table, action))

    @staticmethod
    def multicast_group(group_id: int, ports) -> Call:
        return Call("mcast", (group_id, tuple(ports)))

    @staticmethod
    def clone_session(session_id: int, port: int) -> Call:
        return Call("clone", (session_id, port))


Hop = tuple[int, str, str]  # (port, smac, dmac)


@dataclass
class Table:
    """A switch's routing as the entries give it: prefix -> next hops, and which prefixes
    go through an ECMP group (with the group's max_size)."""

    hops: dict[str, list[Hop]]
    groups: dict[str, int]

    def lookup(self, ip: str) -> tuple[str, list[Hop]]:
        """Longest-prefix match, as the ipv4_route table does."""
        addr = ipaddress.IPv4Address(ip)
        match = [p for p in self.hops if addr in ipaddress.IPv4Network(p)]
        assert match, f"no route to {ip}"
        best = max(match, key=lambda p: ipaddress.IPv4Network(p).prefixlen)
        return best, self.hops[best]


def mac(n: int) -> str:
    h = f"{n:012x}"
    return ":".join(h[i:i + 2] for i in range(0, 12, 2))


def resolve(entities: list[Call]) -> Table:
    """Follow each route to its member or group and the members' set_nexthop actions, checking
    that P4Runtime could insert them in this order (a member before a group that holds it,
    every group before the routes)."""
    members: dict[int, Hop] = {}
    groups: dict[int, tuple[int, ...]] = {}
    hops: dict[str, list[Hop]] = {}
    grouped: dict[str, int] = {}
    max_sizes: dict[int, int] = {}
    kinds = [e.kind for e in entities]
    assert "lpm" not in kinds or set(kinds[kinds.index("lpm"):]) == {"lpm"}, kinds
    for e in entities:
        if e.kind == "member":
            profile, mid, action = e.args
            assert profile == PROFILE and mid not in members
            assert action.args == (f"{INGRESS}.set_nexthop",)
            members[mid] = (action.get("port"), mac(action.get("smac")), mac(action.get("dmac")))
        elif e.kind == "group":
            profile, gid, mids, max_size = e.args
            assert profile == PROFILE and gid not in groups
            assert set(mids) <= set(members), "a group of members not yet inserted"
            groups[gid], max_sizes[gid] = mids, max_size
        else:
            table, field, prefix, mid, gid = e.args
            assert (table, field) == (ROUTE_TABLE, "hdr.ipv4.dst_addr")
            assert prefix not in hops, f"{prefix} twice"
            assert bool(mid) != bool(gid), "a route names a member or a group, not both"
            if gid:
                hops[prefix] = [members[m] for m in groups[gid]]
                grouped[prefix] = max_sizes[gid]
            else:
                hops[prefix] = [members[mid]]
    return Table(hops, grouped)


def topo_of(**shape) -> Topology:
    return build_topology(FabricConfig(fabric=FabricShape(**shape)))


def table_of(topo: Topology, sw: Switch, down=frozenset()) -> Table:
    return resolve(routing_entries(Recorder(), compute_routes(topo, sw, down)))


def uplinks(topo: Topology, leaf: Switch, down=frozenset()) -> list[Hop]:
    """The hops a leaf has toward the spines, as the cabling gives them."""
    return [(p.number, p.mac, topo.switch(p.peer).ports[p.peer_port].mac)
            for p in leaf.ports.values()
            if p.peer.startswith("spine") and (leaf.name, p.number) not in down]


SHAPES = [pytest.param({"spines": 2, "leaves": 2, "hosts_per_leaf": 1}, id="2x2x1"),
          pytest.param({"spines": 2, "leaves": 3, "hosts_per_leaf": 2, "parallel_links": 2},
                       id="2x3x2-parallel2")]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_leaf_reaches_every_host(shape: dict) -> None:
    """Own hosts by a /32 on the host's port, with the port's MAC and the host's; every
    other leaf's subnet by one ECMP group with one member per uplink (per parallel link)."""
    topo = topo_of(**shape)
    n_up = shape["spines"] * shape.get("parallel_links", 1)
    for leaf in topo.leaves:
        table = table_of(topo, leaf)
        for other in topo.leaves:
            if other is not leaf:
                assert str(host_subnet(other.index)) in table.hops, (leaf.name, other.name)
        for h in topo.hosts:
            prefix, hops = table.lookup(h.ip)
            if h.leaf == leaf.name:
                assert prefix == f"{h.ip}/32" and prefix not in table.groups
                assert hops == [(h.leaf_port, leaf.ports[h.leaf_port].mac, h.mac)]
                assert leaf.ports[h.leaf_port].mac == h.gateway_mac
            else:
                assert prefix == f"10.0.{topo.switch(h.leaf).index}.0/24"
                assert len(hops) == len(set(hops)) == n_up
                assert sorted(hops) == sorted(uplinks(topo, leaf))
                assert table.groups[prefix] == n_up  # max_size: room for every member


@pytest.mark.parametrize("shape", SHAPES)
def test_every_spine_reaches_each_leaf_over_all_its_links(shape: dict) -> None:
    topo = topo_of(**shape)
    for spine in topo.spines:
        table = table_of(topo, spine)
        assert set(table.hops) == {str(host_subnet(lf.index)) for lf in topo.leaves}
        for leaf in topo.leaves:
            hops = table.hops[str(host_subnet(leaf.index))]
            assert sorted(hops) == sorted(
                (p.number, p.mac, leaf.ports[p.peer_port].mac)
                for p in spine.ports.values() if p.peer == leaf.name)
            assert len(hops) == shape.get("parallel_links", 1)


def test_next_hops_and_groups_are_inserted_once_and_shared() -> None:
    """Routes with the same next hops share one group, and a next hop is one member."""
    topo = topo_of(spines=2, leaves=4, hosts_per_leaf=2)
    ents = routing_entries(Recorder(), compute_routes(topo, topo.leaves[0]))
    kinds = [e.kind for e in ents]
    assert kinds.count("member") == 2 + 2  # two hosts, two uplinks
    assert kinds.count("group") == 1  # three remote subnets, one group
    assert kinds.count("lpm") == 2 + 3
    (group,) = [e for e in ents if e.kind == "group"]
    assert {e.args[4] for e in ents if e.kind == "lpm" and e.args[4]} == {group.args[1]}


@pytest.mark.parametrize(("shape", "a", "b", "index"), [
    pytest.param({"spines": 2, "leaves": 2, "hosts_per_leaf": 1}, "leaf1", "spine1", None,
                 id="2x2x1"),
    pytest.param({"spines": 2, "leaves": 3, "hosts_per_leaf": 2, "parallel_links": 2},
                 "leaf1", "spine1", 1, id="parallel2-one-of-two"),
    pytest.param({"spines": 2, "leaves": 3, "hosts_per_leaf": 2, "parallel_links": 2},
                 "leaf2", "spine2", None, id="parallel2-both"),
])
def test_a_failed_link_leaves_every_group(shape: dict, a: str, b: str, index) -> None:
    topo = topo_of(**shape)
    down = frozenset(link_ends(topo, a, b, index))
    assert len(down) == 2 * (1 if index or "parallel_links" not in shape else 2)
    for sw in topo.switches:
        before, after = table_of(topo, sw), table_of(topo, sw, down)
        used = {port for hops in after.hops.values() for port, _, _ in hops}
        failed = {port for name, port in down if name == sw.name}
        assert not used & failed, f"{sw.name} still uses port(s) {used & failed}"
        for prefix, hops in after.hops.items():
            # what is left of a route is what it had, less the failed link
            assert set(hops) <= set(before.hops[prefix]), (sw.name, prefix)
            assert (prefix in after.groups) == (len(hops) > 1)
    # the leaf with the failed link: every remote subnet over the uplinks that remain
    leaf = topo.switch(a)
    table = table_of(topo, leaf, down)
    for other in topo.leaves:
        if other is not leaf:
            assert sorted(table.hops[str(host_subnet(other.index))]) == \
                sorted(uplinks(topo, leaf, down))
    # the spine with the failed link: still to the leaf if a parallel link lives, else no route
    spine = topo.switch(b)
    left = [p for p in spine.ports.values() if p.peer == a and (b, p.number) not in down]
    got = table_of(topo, spine, down).hops.get(str(host_subnet(leaf.index)), [])
    assert [hop[0] for hop in got] == [p.number for p in left]
    # the other leaves stop sending to a's subnet through a spine that lost a
    subnet = str(host_subnet(leaf.index))
    for other in topo.leaves:
        if other is not leaf:
            ports = {hop[0] for hop in table_of(topo, other, down).hops[subnet]}
            to_b = {p.number for p in other.ports.values() if p.peer == b}
            assert bool(ports & to_b) == bool(left), other.name


def test_the_encoded_entries_say_what_the_recorder_read() -> None:
    """The real builder, from the compiled P4Info: the same routes, members and groups."""
    b = EntryBuilder(load_p4info())
    topo = topo_of(spines=2, leaves=3, hosts_per_leaf=2, parallel_links=2)
    leaf = topo.leaves[0]
    routes = compute_routes(topo, leaf)
    params = {name: b.ctx.get_param(f"{INGRESS}.set_nexthop", name).id
              for name in ("port", "smac", "dmac")}
    members: dict[int, Hop] = {}
    groups: dict[int, list[int]] = {}
    hops: dict[str, list[Hop]] = {}
    for ent in routing_entries(b, routes):
        kind = ent.WhichOneof("entity")
        if kind == "action_profile_member":
            m = ent.action_profile_member
            v = {p.param_id: int.from_bytes(p.value, "big") for p in m.action.params}
            members[m.member_id] = (v[params["port"]], mac(v[params["smac"]]),
                                    mac(v[params["dmac"]]))
        elif kind == "action_profile_group":
            g = ent.action_profile_group
            assert g.max_size == len(g.members) and all(m.weight == 1 for m in g.members)
            groups[g.group_id] = [m.member_id for m in g.members]
        else:
            te = ent.table_entry
            (fm,) = te.match
            net = ipaddress.IPv4Network((int.from_bytes(fm.lpm.value, "big"),
                                         fm.lpm.prefix_len))
            which = te.action.WhichOneof("type")
            assert which in ("action_profile_member_id", "action_profile_group_id")
            hops[str(net)] = ([members[te.action.action_profile_member_id]]
                              if which == "action_profile_member_id"
                              else [members[m] for m in groups[te.action.action_profile_group_id]])
    assert hops == table_of(topo, leaf).hops


# -- the rest of a switch's program ------------------------------------------------------------

def exact(ents: list[Call], table: str) -> dict[tuple, Call]:
    return {e.args[1]: e.args[2] for e in ents if e.kind == "exact" and e.args[0] == table}


def test_dscp_entries_follow_the_map_and_default_class() -> None:
    topo = topo_of(spines=1, leaves=2, hosts_per_leaf=1)
    table = f"{INGRESS}.dscp_to_tc"
    prog = build_switch_program(Recorder(), topo.leaves[0], [], FabricConfig())
    got = {k[0][1]: a.get("tc") for k, a in exact(prog.insert, table).items()}
    assert got == {26: 3, 48: 6}  # class 0 is the table's default: no entries for it
    cfg = FabricConfig.model_validate({"qos": {"default_tc": 1}})
    prog = build_switch_program(Recorder(), topo.leaves[0], [], cfg)
    got = {k[0][1]: a.get("tc") for k, a in exact(prog.insert, table).items()}
    assert got == {d: {26: 3, 48: 6}.get(d, 1) for d in range(64)}


def test_hash_config_carries_the_seed_and_the_configured_fields() -> None:
    topo = topo_of(spines=1, leaves=2, hosts_per_leaf=1)
    sw = topo.leaves[1]
    cfg = FabricConfig.model_validate({"ecmp": {"hash_fields": ["src_ip", "dst_port"]}})
    (entry,) = build_switch_program(Recorder(), sw, [], cfg).modify
    assert entry.kind == "default" and entry.args[0] == f"{INGRESS}.hash_config"
    action = entry.args[1]
    assert action.args == (f"{INGRESS}.set_hash_config",)
    assert dict(action.params) == {"seed": sw.ecmp_seed, "src_addr_mask": 0xFFFFFFFF,
                                   "dst_addr_mask": 0, "protocol_mask": 0,
                                   "src_port_mask": 0, "dst_port_mask": 0xFFFF}
    assert sw.ecmp_seed != topo.leaves[0].ecmp_seed  # per_switch by default
    with pytest.raises(ValueError, match="unknown hash fields.*'vlan'"):
        hash_masks(["src_ip", "vlan"])


def test_lossless_entries_give_each_port_its_rate_profile_mac_and_clone_session() -> None:
    cfg = FabricConfig.model_validate({"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1,
                                                  "host_link_mbps": 10, "fabric_link_mbps": 40}})
    leaf = build_topology(cfg).leaves[0]
    ents = lossless_entries(Recorder(), leaf, cfg)
    lossless = f"{INGRESS}.lossless"
    quanta = exact(ents, f"{lossless}.ingress_port_quantum")
    macs = exact(ents, "RoceEgress.pfc_egress.port_mac")
    profiles = exact(ents, f"{lossless}.queue_profile")
    ticks = exact(ents, f"{lossless}.tick_profile")
    xoffs = exact(ents, f"{lossless}.xoff_profile")
    for port in leaf.ports.values():
        rate = port.rate_mbps
        assert rate == (10 if port.peer.startswith("h") else 40)
        # a quantum is 512 bit times: 51.2 us at 10 Mbit/s, 12.8 at 40, times 2^10
        assert quanta[(("std_meta.ingress_port", port.number),)].get("quantum_us_q10") == \
            {10: 52428, 40: 13107}[rate]
        # and the port's drain rate, which brings its phantoms up to date as a pause begins
        assert quanta[(("std_meta.ingress_port", port.number),)].get("rate_q20") == \
            {10: 1_310_720, 40: 5_242_880}[rate]
        # and what its closing gate lets through: two 4,170-byte RoCE frames at MTU 9000
        assert quanta[(("std_meta.ingress_port", port.number),)].get("gate_leak") == 8340
        assert macs[(("std_meta.egress_port", port.number),)].get("mac") == mac_to_int(port.mac)
        # only class 3 (ECN and PFC) has a profile; class 6 (CNPs) is neither. A data packet
        # finds it by its own egress port and class, a tick by the port and class it names,
        # and both lead to the queue's cell in the registers
        mine = {k[1][1]: a for k, a in profiles.items()
                if k[0] == ("std_meta.egress_spec", port.number)}
        assert set(mine) == {3}
        p = queue_profiles(cfg.qos, rate)[3]
        cell = port.number * 8 + 3
        assert dict(mine[3].params) == {
            "idx": cell, "rate_q20": {10: 1_310_720, 40: 5_242_880}[rate],  # bytes / 2^20 us
            "kmin": 8400, "kmax": 42000, "pmax_slope": p.pmax_slope, "xoff": p.xoff}
        theirs = {k[1][1]: a for k, a in ticks.items() if k[0] == ("hdr.tick.port", port.number)}
        assert set(theirs) == {3}
        # a tick renews the pauses of every port paused on the queue's account at once: at
        # the rate of the leaf's fastest link (40), whose pause is the shortest
        assert dict(theirs[3].params) == {
            "idx": cell, "rate_q20": {10: 1_310_720, 40: 5_242_880}[rate], "xon": p.xon,
            "pause_quanta": 65535, "refresh_us": 419_424}
        # an XOFF from a data packet goes to its ingress port, and is renewed at that link's
        # rate: a 40 Mbit/s link's pause (65535 quanta of 12.8 us) lapses four times sooner
        assert dict(xoffs[(("std_meta.ingress_port", port.number),)].params) == {
            "base": port.number * 8, "pause_quanta": 65535,
            "refresh_us": {10: 1_677_696, 40: 419_424}[rate]}
    assert sorted(e.args for e in ents if e.kind == "clone") == \
        [(n, n) for n in sorted(leaf.ports)]
    assert [e.args for e in ents if e.kind == "mcast"] == [(PFC_MCAST_GROUP,
                                                           tuple(sorted(leaf.ports)))]


def test_a_queue_that_does_not_mark_or_pause_has_that_threshold_out_of_reach() -> None:
    """The program tests no per-feature flag: a lossless class without ECN has Kmin and Kmax,
    and a marking class without PFC has XOFF, at a level no queue reaches."""
    cfg = FabricConfig.model_validate({"qos": {"pfc_enable": [3, 4],
                                               "ecn": {3: {}, 1: {}}}})
    leaf = build_topology(cfg).leaves[0]
    profiles = exact(lossless_entries(Recorder(), leaf, cfg), f"{INGRESS}.lossless.queue_profile")
    port = min(leaf.ports)
    mine = {k[1][1]: dict(a.params) for k, a in profiles.items()
            if k[0] == ("std_meta.egress_spec", port)}
    assert set(mine) == {1, 3, 4}
    assert (mine[4]["kmin"], mine[4]["kmax"]) == (THRESHOLD_NEVER, THRESHOLD_NEVER)
    assert mine[4]["xoff"] < THRESHOLD_NEVER
    assert mine[1]["xoff"] == THRESHOLD_NEVER
    assert mine[1]["kmin"] < mine[1]["kmax"] < THRESHOLD_NEVER
    assert mine[3]["kmax"] < mine[3]["xoff"] < THRESHOLD_NEVER


def test_classes_sharing_a_port_name_the_phantoms_above_them() -> None:
    """SONiC's layout keeps phantoms of lossless classes 3 and 4 and of class 5 above them
    (DSCP 46): the port serves them in strict priority, so each queue's entries name the
    nearest two phantoms above it (EMPTY_CELL where there is none), which its own drains from
    (p4/lossless.p4, admit_shared, tick_queue_shared). A port with one phantom, the default
    fabric's, keeps the plain actions."""
    assert classes_above([5, 3, 4]) == {3: (4, 5, None), 4: (5, None, None),
                                         5: (None, None, None)}
    assert classes_above([3, 4, 6, 7])[3] == (4, 6, 7)
    assert classes_above([3]) == {3: (None, None, None)}
    cfg = FabricConfig.model_validate({"qos": {"profile": "sonic"}})
    leaf = build_topology(cfg).leaves[0]
    ents = lossless_entries(Recorder(), leaf, cfg)
    port = min(leaf.ports)
    for table, key in (("queue_profile", "std_meta.egress_spec"), ("tick_profile",
                                                                    "hdr.tick.port")):
        mine = {k[1][1]: a for k, a in exact(ents, f"{INGRESS}.lossless.{table}").items()
                if k[0] == (key, port)}
        assert set(mine) == {3, 4, 5}
        assert {tc: a.args[0].rsplit(".", 1)[1] for tc, a in mine.items()} == \
            dict.fromkeys((3, 4, 5), {"queue_profile": "admit_shared",
                                      "tick_profile": "tick_queue_shared"}[table])
        assert {tc: (a.get("idx"), a.get("above"), a.get("above2"), a.get("above3"))
                for tc, a in mine.items()} == {
            3: (port * 8 + 3, port * 8 + 4, port * 8 + 5, EMPTY_CELL),
            4: (port * 8 + 4, port * 8 + 5, EMPTY_CELL, EMPTY_CELL),
            5: (port * 8 + 5, EMPTY_CELL, EMPTY_CELL, EMPTY_CELL)}
    plain = FabricConfig()
    ents = lossless_entries(Recorder(), build_topology(plain).leaves[0], plain)
    assert {a.args[0].rsplit(".", 1)[1] for a in exact(
        ents, f"{INGRESS}.lossless.queue_profile").values()} == {"admit"}


@pytest.mark.parametrize(("value", "bits", "raw"), [
    (0, 9, b"\x00"), (1, 9, b"\x01"), (256, 9, b"\x01\x00"), (511, 9, b"\x01\xff"),
    (0x0A000100, 32, b"\x0a\x00\x01\x00"), (0x1234, 48, b"\x12\x34")])
def test_values_are_encoded_canonically(value: int, bits: int, raw: bytes) -> None:
    assert encode(value, bits) == raw


def test_a_value_too_wide_is_refused() -> None:
    with pytest.raises(ValueError, match="512 does not fit in 9 bits"):
        encode(512, 9)
    with pytest.raises(ValueError):
        encode(-1, 8)


def test_a_reroute_makes_before_it_breaks() -> None:
    """Taking spine1-leaf1 down and back, as spine1 sees it: the new members and groups go in
    beside the old (the other ID range), routes to prefixes spine1 reaches only now go in with
    them, every route it keeps is modified in place (never deleted and re-inserted), and only
    the routes to prefixes it no longer reaches and the old members and groups are deleted,
    groups before the members they hold."""
    from testbed.control.reroute import ROUTING_ID_SPAN, plan_reroute

    b = EntryBuilder(load_p4info())
    topo = topo_of(spines=2, leaves=2, hosts_per_leaf=1, parallel_links=2)  # groups to leaves
    spine1 = topo.switch("spine1")
    leaf1_net = str(host_subnet(1))
    before = routing_entries(b, compute_routes(topo, spine1), 0)
    down = routing_entries(b, compute_routes(topo, spine1, frozenset(
        link_ends(topo, "spine1", "leaf1"))), ROUTING_ID_SPAN)

    def prefixes(ents) -> set[str]:
        return {str(ipaddress.IPv4Network((int.from_bytes(e.table_entry.match[0].lpm.value,
                                                          "big"),
                                           e.table_entry.match[0].lpm.prefix_len)))
                for e in ents if e.HasField("table_entry")}

    def ids(ents) -> set[int]:
        return {e.action_profile_member.member_id or e.action_profile_group.group_id
                for e in ents if not e.HasField("table_entry")}

    plan = plan_reroute(before, down)
    assert prefixes(before) - prefixes(down) == {leaf1_net}  # spine1's only way to leaf1
    assert prefixes(plan.grow) == set() and ids(plan.grow) == ids(down)
    assert min(ids(down)) > ROUTING_ID_SPAN > max(ids(before))  # beside, not over, the old
    assert prefixes(plan.switch) == prefixes(down)  # kept routes: modified in place
    assert all(e.table_entry.action.action_profile_member_id > ROUTING_ID_SPAN
               or e.table_entry.action.action_profile_group_id > ROUTING_ID_SPAN
               for e in plan.switch)
    assert prefixes(plan.prune_routes) == {leaf1_net}
    assert ids(plan.prune_profiles) == ids(before)
    gone: list[int] = []  # each group goes before every member it holds
    for e in plan.prune_profiles:
        if e.HasField("action_profile_group"):
            held = {m.member_id for m in e.action_profile_group.members}
            assert held and not held & set(gone)
        else:
            gone.append(e.action_profile_member.member_id)
    assert any(e.HasField("action_profile_group") for e in plan.prune_profiles)
    back = plan_reroute(down, routing_entries(b, compute_routes(topo, spine1), 0))
    assert prefixes(back.grow) == {leaf1_net} and not back.prune_routes
