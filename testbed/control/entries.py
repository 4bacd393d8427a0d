"""What each switch's P4 tables hold, as P4Runtime entities: the program's names (tables,
actions, parameters) filled in from the fabric's config and topology. Pure: nothing here talks to
a switch (testbed.control.p4runtime writes these entities), so the tests read the entries directly.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import google.protobuf.text_format as text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import Context, P4Type

from testbed.config.constants import (
    EMPTY_CELL,
    PFC_MCAST_GROUP,
    THRESHOLD_NEVER,
    port_tc_cell,
)
from testbed.config.models import HASH_FIELDS, FabricConfig
from testbed.config.phantoms import MAX_PHANTOM_LEVELS
from testbed.topology.graph import Route, Switch
from testbed.topology.qos import gate_leak_roce_bytes, pause_renewal_us, quantum_us, queue_profiles

P4_DIR = Path(__file__).resolve().parents[2] / "p4"
P4INFO_PATH = P4_DIR / "compiled" / "roce_switch.p4info.txtpb"
BMV2_JSON_PATH = P4_DIR / "compiled" / "roce_switch.json"

INGRESS = "RoceIngress"
EGRESS = "RoceEgress"


def load_p4info(path: Path = P4INFO_PATH) -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    text_format.Merge(path.read_text(), info, allow_unknown_field=True)
    return info


def encode(value: int, bitwidth: int) -> bytes:
    """P4Runtime's canonical byte string: big-endian, no leading zero bytes (at least one)."""
    if value < 0 or value >= 1 << bitwidth:
        raise ValueError(f"{value} does not fit in {bitwidth} bits")
    raw = value.to_bytes((bitwidth + 7) // 8, "big")
    return raw.lstrip(b"\x00") or b"\x00"


def mac_to_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def ip_to_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


class EntryBuilder:
    """Builds P4Runtime entities by name from a P4Info, like p4lang/tutorials' helper."""

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.ctx = Context()
        self.ctx.set_p4info(p4info)

    def _id(self, kind: P4Type, name: str) -> int:
        obj_id = self.ctx.get_obj_id(kind, name)
        if obj_id is None:
            raise KeyError(f"P4Info has no {kind.name} named {name!r}")
        return obj_id

    def action(self, name: str, **params: int) -> p4runtime_pb2.Action:
        a = p4runtime_pb2.Action(action_id=self._id(P4Type.action, name))
        for pname, value in params.items():
            p = self.ctx.get_param(name, pname)
            if p is None:
                raise KeyError(f"action {name} has no parameter {pname!r}")
            a.params.add(param_id=p.id, value=encode(value, p.bitwidth))
        return a

    def member(self, profile: str, member_id: int, action: p4runtime_pb2.Action):
        ent = p4runtime_pb2.Entity()
        m = ent.action_profile_member
        m.action_profile_id = self._id(P4Type.action_profile, profile)
        m.member_id = member_id
        m.action.CopyFrom(action)
        return ent

    def group(self, profile: str, group_id: int, member_ids: Sequence[int], max_size: int):
        ent = p4runtime_pb2.Entity()
        g = ent.action_profile_group
        g.action_profile_id = self._id(P4Type.action_profile, profile)
        g.group_id = group_id
        g.max_size = max_size
        for mid in member_ids:
            g.members.add(member_id=mid, weight=1)
        return ent

    def lpm_entry(self, table: str, field: str, prefix: str, *, member_id: int = 0,
                  group_id: int = 0) -> p4runtime_pb2.Entity:
        net = ipaddress.IPv4Network(prefix)
        ent = p4runtime_pb2.Entity()
        te = ent.table_entry
        te.table_id = self._id(P4Type.table, table)
        mf = self.ctx.get_mf(table, field)
        fm = te.match.add(field_id=mf.id)
        fm.lpm.value = encode(int(net.network_address), mf.bitwidth)
        fm.lpm.prefix_len = net.prefixlen
        if group_id:
            te.action.action_profile_group_id = group_id
        else:
            te.action.action_profile_member_id = member_id
        return ent

    def exact_entry(self, table: str, field: str, value: int, action: p4runtime_pb2.Action):
        ent = p4runtime_pb2.Entity()
        te = ent.table_entry
        te.table_id = self._id(P4Type.table, table)
        mf = self.ctx.get_mf(table, field)
        te.match.add(field_id=mf.id).exact.value = encode(value, mf.bitwidth)
        te.action.action.CopyFrom(action)
        return ent

    def default_entry(self, table: str, action: p4runtime_pb2.Action) -> p4runtime_pb2.Entity:
        ent = p4runtime_pb2.Entity()
        te = ent.table_entry
        te.table_id = self._id(P4Type.table, table)
        te.is_default_action = True
        te.action.action.CopyFrom(action)
        return ent

    def counter_id(self, name: str) -> int:
        return self._id(P4Type.counter, name)

    def entry(self, table: str, keys: dict[str, int], action: p4runtime_pb2.Action):
        """An exact-match entry with several key fields."""
        ent = p4runtime_pb2.Entity()
        te = ent.table_entry
        te.table_id = self._id(P4Type.table, table)
        for key, value in keys.items():
            mf = self.ctx.get_mf(table, key)
            if mf is None:
                raise KeyError(f"table {table} has no key {key!r}")
            te.match.add(field_id=mf.id).exact.value = encode(value, mf.bitwidth)
        te.action.action.CopyFrom(action)
        return ent

    @staticmethod
    def multicast_group(group_id: int, ports: Sequence[int]) -> p4runtime_pb2.Entity:
        ent = p4runtime_pb2.Entity()
        g = ent.packet_replication_engine_entry.multicast_group_entry
        g.multicast_group_id = group_id
        for p in ports:
            g.replicas.add(egress_port=p, instance=1)
        return ent

    @staticmethod
    def clone_session(session_id: int, port: int) -> p4runtime_pb2.Entity:
        ent = p4runtime_pb2.Entity()
        c = ent.packet_replication_engine_entry.clone_session_entry
        c.session_id = session_id
        c.replicas.add(egress_port=port, instance=1)
        return ent


def hash_masks(fields: Iterable[str]) -> dict[str, int]:
    """The set_hash_config masks that keep exactly ``fields`` in the ECMP hash."""
    chosen = set(fields)
    unknown = chosen - set(HASH_FIELDS)
    if unknown:
        raise ValueError(f"unknown hash fields {sorted(unknown)}; allowed: {HASH_FIELDS}")
    full = {"src_ip": 0xFFFFFFFF, "dst_ip": 0xFFFFFFFF, "ip_proto": 0xFF,
            "src_port": 0xFFFF, "dst_port": 0xFFFF}
    names = {"src_ip": "src_addr_mask", "dst_ip": "dst_addr_mask", "ip_proto": "protocol_mask",
             "src_port": "src_port_mask", "dst_port": "dst_port_mask"}
    return {names[f]: (full[f] if f in chosen else 0) for f in HASH_FIELDS}


@dataclass
class SwitchProgram:
    """Everything one switch is told, as entity lists: pure data, testable.

    ``routing`` (ECMP members, groups, then routes, in the order they must be inserted) is kept
    apart, so that when a link fails or comes back the switch's routing can be replaced by the
    routes the fabric converges to, while the rest stays.
    """

    modify: list[p4runtime_pb2.Entity]
    insert: list[p4runtime_pb2.Entity]
    routing: list[p4runtime_pb2.Entity] = field(default_factory=list)


def build_switch_program(
    b: EntryBuilder, sw: Switch, routes: list[Route], cfg: FabricConfig,
    hash_fields: Sequence[str] | None = None,
) -> SwitchProgram:
    insert: list[p4runtime_pb2.Entity] = []
    for dscp, tc in sorted(cfg.qos.dscp_to_tc_map.items()):
        insert.append(b.exact_entry(f"{INGRESS}.dscp_to_tc", "hdr.ipv4.dscp", dscp,
                                    b.action(f"{INGRESS}.set_tc", tc=tc)))
    if cfg.qos.default_tc:
        for dscp in range(64):
            if dscp not in cfg.qos.dscp_to_tc_map:
                insert.append(b.exact_entry(f"{INGRESS}.dscp_to_tc", "hdr.ipv4.dscp", dscp,
                                            b.action(f"{INGRESS}.set_tc", tc=cfg.qos.default_tc)))
    insert.extend(lossless_entries(b, sw, cfg))
    insert.extend(own_plug_entries(b, sw))
    masks = hash_masks(hash_fields if hash_fields is not None else cfg.ecmp.hash_fields)
    modify = [b.default_entry(f"{INGRESS}.hash_config",
                              b.action(f"{INGRESS}.set_hash_config", seed=sw.ecmp_seed, **masks))]
    return SwitchProgram(modify=modify, insert=insert, routing=routing_entries(b, routes))


def own_plug_entries(b: EntryBuilder, sw: Switch) -> list[p4runtime_pb2.Entity]:
    """Each port's own MAC, the source of the plugs its agent sends out of it
    (testbed.machine.ports.plug_sizes): BMv2's packet socket sees them leave, and the program
    must not count them as received (p4/ingress.p4, own_plug)."""
    return [b.entry(f"{INGRESS}.own_plug", {"std_meta.ingress_port": port.number,
                                            "hdr.ethernet.src_addr": mac_to_int(port.mac)},
                    b.action("NoAction")) for port in sw.ports.values()]


def routing_entries(b: EntryBuilder, routes: list[Route],
                    id_base: int = 0) -> list[p4runtime_pb2.Entity]:
    """ECMP members and groups, then the LPM routes that use them; the members' and groups'
    IDs count from ``id_base`` + 1 (a reroute writes the new ones beside the old:
    testbed.control.reroute)."""
    profile = f"{INGRESS}.ecmp_selector"
    table = f"{INGRESS}.ipv4_route"
    insert: list[p4runtime_pb2.Entity] = []
    members: dict[tuple[int, str, str], int] = {}
    groups: dict[tuple[int, ...], int] = {}
    route_entries = []
    for r in routes:
        mids = []
        for nh in r.nexthops:
            key = (nh.port, nh.smac, nh.dmac)
            if key not in members:
                members[key] = id_base + len(members) + 1
                insert.append(b.member(profile, members[key], b.action(
                    f"{INGRESS}.set_nexthop", port=nh.port, smac=mac_to_int(nh.smac),
                    dmac=mac_to_int(nh.dmac))))
            mids.append(members[key])
        if len(mids) == 1:
            route_entries.append(b.lpm_entry(table, "hdr.ipv4.dst_addr", r.prefix,
                                             member_id=mids[0]))
        else:
            gkey = tuple(mids)
            if gkey not in groups:
                groups[gkey] = id_base + len(groups) + 1
                insert.append(b.group(profile, groups[gkey], mids, max_size=max(len(mids), 1)))
            route_entries.append(b.lpm_entry(table, "hdr.ipv4.dst_addr", r.prefix,
                                             group_id=groups[gkey]))
    return insert + route_entries


def classes_above(classes: Iterable[int]) -> dict[int, tuple[int | None, ...]]:
    """For each class with a phantom on a port, the nearest MAX_PHANTOM_LEVELS - 1 such classes
    above it in the port's strict priority (a higher class is served first:
    testbed.machine.ports), nearest first, None where there are fewer: the P4 program brings
    them up to date and drains the class with what they left of the port's rate
    (drain_under). QosConfig refuses a config with more."""
    ordered = sorted(classes)
    depth = MAX_PHANTOM_LEVELS - 1
    return {tc: tuple([*ordered[i + 1:i + 1 + depth], *[None] * depth][:depth])
            for i, tc in enumerate(ordered)}


def cell_or_empty(port: int, tc: int | None) -> int:
    """The (port, class) cell, or EMPTY_CELL (always empty) where there is no class."""
    return EMPTY_CELL if tc is None else port_tc_cell(port, tc)


def lossless_entries(b: EntryBuilder, sw: Switch, cfg: FabricConfig) -> list:
    """PFC quanta, XOFF renewals, port MACs, queue profiles (with port rates) for data packets
    and for ticks, the PFC multicast group, one clone session per port (session id = port, so
    ingress can clone toward the port a packet came in)."""
    ents: list[p4runtime_pb2.Entity] = []
    lossless = f"{INGRESS}.lossless"
    gate_leak = gate_leak_roce_bytes(cfg.fabric.mtu)
    pfc = cfg.qos.pfc
    # a tick renews the pauses on every port paused on its queue's account at once: as often
    # as the shortest of them needs, the one on the switch's fastest link
    tick_renewal = pause_renewal_us(cfg.qos, max(p.rate_mbps for p in sw.ports.values()))
    for port in sw.ports.values():
        rate_q20 = int(port.rate_mbps * 1e6 / 8 * 2**20 / 1e6)
        ents.append(b.entry(f"{lossless}.ingress_port_quantum",
                            {"std_meta.ingress_port": port.number},
                            b.action(f"{lossless}.set_quantum",
                                     quantum_us_q10=int(quantum_us(port.rate_mbps) * 1024),
                                     rate_q20=rate_q20, gate_leak=gate_leak)))
        ents.append(b.entry(f"{lossless}.xoff_profile", {"std_meta.ingress_port": port.number},
                            b.action(f"{lossless}.set_xoff", base=port_tc_cell(port.number, 0),
                                     pause_quanta=pfc.pause_quanta,
                                     refresh_us=pause_renewal_us(cfg.qos, port.rate_mbps))))
        ents.append(b.entry(f"{EGRESS}.pfc_egress.port_mac",
                            {"std_meta.egress_port": port.number},
                            b.action(f"{EGRESS}.pfc_egress.set_port_mac",
                                     mac=mac_to_int(port.mac))))
        profiles = {tc: prof for tc, prof in queue_profiles(
            cfg.qos, port.rate_mbps, mtu=cfg.fabric.mtu).items() if prof.phantom}
        above = classes_above(profiles)
        for tc, prof in profiles.items():
            # one cell per (port, class) in every register; a data packet finds its queue by
            # its own (egress port, class), a tick by the (port, class) it names
            idx = port_tc_cell(port.number, tc)
            thresholds = {"kmin": prof.kmin if prof.ecn else THRESHOLD_NEVER,
                          "kmax": prof.kmax if prof.ecn else THRESHOLD_NEVER,
                          "pmax_slope": prof.pmax_slope,
                          "xoff": prof.xoff if prof.pfc else THRESHOLD_NEVER}
            tick = {"xon": prof.xon, "pause_quanta": pfc.pause_quanta,
                    "refresh_us": tick_renewal}
            shared, suffix = {}, ""
            if len(profiles) > 1:  # the port's strict priority shares it: see drain_under
                shared = {name: cell_or_empty(port.number, a) for name, a in
                          zip(("above", "above2", "above3"), above[tc], strict=True)}
                suffix = "_shared"
            ents.append(b.entry(
                f"{lossless}.queue_profile", {"std_meta.egress_spec": port.number,
                                              "meta.tc": tc},
                b.action(f"{lossless}.admit{suffix}", idx=idx, **shared, rate_q20=rate_q20,
                         **thresholds)))
            ents.append(b.entry(
                f"{lossless}.tick_profile", {"hdr.tick.port": port.number, "hdr.tick.tc": tc},
                b.action(f"{lossless}.tick_queue{suffix}", idx=idx, **shared,
                         rate_q20=rate_q20, **tick)))
        ents.append(b.clone_session(port.number, port.number))
    ents.append(b.multicast_group(PFC_MCAST_GROUP, list(sw.ports)))
    return ents
