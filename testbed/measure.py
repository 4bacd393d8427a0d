"""Counters of a running fabric, from every place they live: the kernel queues of each switch
port (tc), the switch-side veths (what reached BMv2), and the P4 counters (over P4Runtime).

Comparing the last two gives the loss BMv2 hides: frames the veth received that the P4 program
never saw (BMv2 drops arrivals it cannot serve before its pipeline runs: behavioral-model's
simple_switch input buffer); a run that claims zero loss shows this figure too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from testbed.constants import NUM_DROP_REASONS, NUM_TCS, gate_class
from testbed.topology import Topology, intf_name


@dataclass
class PortCounters:
    kernel: dict[int, dict] = field(default_factory=dict)  # tc -> backlog, drops, sent
    veth_rx_packets: int = 0
    p4_rx_packets: int = 0
    p4_tx_packets: int = 0

    @property
    def hidden_loss(self) -> int:
        return self.veth_rx_packets - self.p4_rx_packets


@dataclass
class SwitchCounters:
    ports: dict[int, PortCounters]
    drops: dict[tuple[int, int], int]  # (port, reason) -> packets
    pfc_tx: dict[tuple[int, int], int]  # (port, tc)
    pfc_rx: dict[tuple[int, int], int]
    ecn_marked: dict[tuple[int, int], int]
    rx_port_tc: dict[tuple[int, int], int]
    tx_port_tc: dict[tuple[int, int], int]


def kernel_stats(node, ports: list[int], switch: str) -> dict[int, dict[int, dict]]:
    """Per port and class: backlog bytes/packets, drops, sent bytes/packets (tc -s -j)."""
    out: dict[int, dict[int, dict]] = {}
    for p in ports:
        raw = node.cmd(f"tc -s -j qdisc show dev {intf_name(switch, p)}")
        try:
            qdiscs = json.loads(raw[raw.index("["):])
        except ValueError:
            continue
        per: dict[int, dict] = {}
        for q in qdiscs:
            tc = gate_class(int(q["handle"].split(":")[0], 16))
            if q.get("kind") != "tbf" or tc is None:
                continue
            per[tc] = {"backlog_bytes": q.get("backlog", 0), "backlog_packets": q.get("qlen", 0),
                       "drops": q.get("drops", 0), "sent_bytes": q.get("bytes", 0),
                       "sent_packets": q.get("packets", 0)}
        out[p] = per
    return out


def veth_rx(node, ports: list[int], switch: str) -> dict[int, int]:
    out = {}
    for p in ports:
        raw = node.cmd(f"ip -s -j link show dev {intf_name(switch, p)}")
        try:
            out[p] = json.loads(raw[raw.index("["):])[0]["stats64"]["rx"]["packets"]
        except (ValueError, KeyError, IndexError):
            out[p] = -1
    return out


#: Cells per port of each counter array the testbed reads; the rest are per (port, class).
CELLS_PER_PORT = {"RoceIngress.rx_port": 1, "RoceEgress.tx_port": 1,
                  "RoceIngress.drops": NUM_DROP_REASONS}


def counter_cells(name: str, ports: list[int]) -> list[int]:
    """The cells of a counter array that belong to the switch's real ports."""
    width = CELLS_PER_PORT.get(name, NUM_TCS)
    return [p * width + i for p in ports for i in range(width)]


def _split(counter: dict[int, tuple[int, int]], width: int) -> dict[tuple[int, int], int]:
    return {(i // width, i % width): v[0] for i, v in counter.items()}


def switch_counters(fabric, switch: str) -> SwitchCounters:
    sw = fabric.topo.switch(switch)
    node = fabric.net.get(switch)
    sess = fabric.sessions[switch]
    ports = list(sw.ports)
    kern = kernel_stats(node, ports, switch)
    rx = veth_rx(node, ports, switch)

    def read(name: str) -> dict[int, tuple[int, int]]:
        return sess.read_counter(name, counter_cells(name, ports))

    p4_rx = read("RoceIngress.rx_port")
    p4_tx = read("RoceEgress.tx_port")
    pcs = {p: PortCounters(kern.get(p, {}), rx.get(p, 0), p4_rx.get(p, (0, 0))[0],
                           p4_tx.get(p, (0, 0))[0]) for p in ports}
    return SwitchCounters(
        ports=pcs,
        drops=_split(read("RoceIngress.drops"), NUM_DROP_REASONS),
        pfc_tx=_split(read("RoceEgress.pfc_egress.pfc_tx"), NUM_TCS),
        pfc_rx=_split(read("RoceIngress.pfc_rx"), NUM_TCS),
        ecn_marked=_split(read("RoceIngress.lossless.ecn_marked"), NUM_TCS),
        rx_port_tc=_split(read("RoceIngress.rx_port_tc"), NUM_TCS),
        tx_port_tc=_split(read("RoceEgress.tx_port_tc"), NUM_TCS),
    )


def fabric_counters(fabric) -> dict[str, SwitchCounters]:
    return {s.name: switch_counters(fabric, s.name) for s in fabric.topo.switches}


def kernel_drops(counters: dict[str, SwitchCounters], tc: int) -> int:
    return sum(pc.kernel.get(tc, {}).get("drops", 0)
               for sc in counters.values() for pc in sc.ports.values())


def hidden_loss(counters: dict[str, SwitchCounters]) -> dict[str, int]:
    return {name: sum(pc.hidden_loss for pc in sc.ports.values())
            for name, sc in counters.items()}


def peer_ports(topo: Topology, switch: str, peer: str) -> list[int]:
    return [p.number for p in topo.switch(switch).ports.values() if p.peer == peer]
