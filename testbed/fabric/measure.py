"""Counters of a running fabric, from every place they live: the kernel queues of each switch
port (tc), the switch-side veths (what reached BMv2), and the P4 counters (over P4Runtime).

Comparing the last two gives the loss BMv2 hides: frames the veth received that the P4 program
never saw (BMv2 drops arrivals it cannot serve before its pipeline runs: behavioral-model's
simple_switch input buffer); a run that claims zero loss shows this figure too.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field

from testbed.config.constants import NUM_DROP_REASONS
from testbed.machine.netns import inside
from testbed.machine.tcstats import QdiscReader
from testbed.topology.graph import Topology, intf_name
from traffic.wire import NUM_TCS


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
    """Per port and class: backlog bytes/packets, drops, sent bytes/packets, from one netlink
    dump of the switch's namespace (:mod:`testbed.machine.tcstats`). It used to run `tc -s -j` once
    a port: on 2x4x2, with :func:`veth_rx`'s `ip`, about 0.4 s of every run's teardown."""
    with inside(f"/proc/{node.pid}/ns/net"):
        reader = QdiscReader()
        try:
            dump = reader.dump()
            index = {}
            for p in ports:
                with contextlib.suppress(OSError):  # no such port: nothing to report
                    index[socket.if_nametoindex(intf_name(switch, p))] = p
        finally:
            reader.close()
    out: dict[int, dict[int, dict]] = {p: {} for p in index.values()}
    for q in dump:
        p = index.get(q.ifindex)
        tc = q.tc
        if p is None or tc is None:
            continue
        out[p][tc] = {"backlog_bytes": q.backlog, "backlog_packets": q.qlen, "drops": q.drops,
                      "sent_bytes": q.bytes, "sent_packets": q.packets}
    return out


def veth_rx(node, ports: list[int], switch: str) -> dict[int, int]:
    """Packets each port's veth received, from the switch's namespace's /proc/PID/net/dev
    (the kernel's per-device counters, those `ip -s link` shows); -1 for a port not there."""
    received: dict[str, int] = {}
    with open(f"/proc/{node.pid}/net/dev") as f:
        for line in f.readlines()[2:]:  # two header lines
            name, _, counters = line.partition(":")
            received[name.strip()] = int(counters.split()[1])  # rx bytes, then rx packets
    return {p: received.get(intf_name(switch, p), -1) for p in ports}


#: Cells per port of each counter array the testbed reads; the rest are per (port, class).
CELLS_PER_PORT = {"RoceIngress.rx_port": 1, "RoceEgress.tx_port": 1,
                  "RoceIngress.drops": NUM_DROP_REASONS}


def counter_cells(name: str, ports: list[int]) -> list[int]:
    """The cells of a counter array that belong to the switch's real ports."""
    width = CELLS_PER_PORT.get(name, NUM_TCS)
    return [p * width + i for p in ports for i in range(width)]


def _split(counter: dict[int, tuple[int, int]], width: int) -> dict[tuple[int, int], int]:
    return {(i // width, i % width): v[0] for i, v in counter.items()}


def rx_counters(fabric, switch: str) -> dict[int, PortCounters]:
    """Each port's arrivals alone: what its veth received and what the P4 program saw, whose
    difference is the hidden loss (all a run's teardown reads)."""
    ports = list(fabric.topo.switch(switch).ports)
    rx = veth_rx(fabric.net.get(switch), ports, switch)
    name = "RoceIngress.rx_port"
    p4_rx = fabric.sessions[switch].read_counter(name, counter_cells(name, ports))
    return {p: PortCounters(veth_rx_packets=rx.get(p, 0),
                            p4_rx_packets=p4_rx.get(p, (0, 0))[0]) for p in ports}


def pipeline_drops(fabric, switch: str) -> dict[tuple[int, int], int]:
    """The P4 program's own drops, (port, reason) -> packets (testbed.config.constants.DROP_REASONS;
    DROP_PFC_CONSUMED is not a loss)."""
    ports = list(fabric.topo.switch(switch).ports)
    name = "RoceIngress.drops"
    return _split(fabric.sessions[switch].read_counter(name, counter_cells(name, ports)),
                  NUM_DROP_REASONS)


def switch_counters(fabric, switch: str) -> SwitchCounters:
    sess = fabric.sessions[switch]
    pcs = rx_counters(fabric, switch)
    ports = list(pcs)
    kern = kernel_stats(fabric.net.get(switch), ports, switch)

    def read(name: str) -> dict[int, tuple[int, int]]:
        return sess.read_counter(name, counter_cells(name, ports))

    p4_tx = read("RoceEgress.tx_port")
    for p, pc in pcs.items():
        pc.kernel = kern.get(p, {})
        pc.p4_tx_packets = p4_tx.get(p, (0, 0))[0]
    return SwitchCounters(
        ports=pcs,
        drops=pipeline_drops(fabric, switch),
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
