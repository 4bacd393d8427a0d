"""The tester's counters beside the switches': what SONiC's test plans read on a hardware traffic
generator ("no loss, no NAK or sequence error on the tester", "PFC seen on queue 3 matching the
tester's PFC counter", "ECN-CE seen", "CNPs"), here counted by the hosts' RoCE endpoints, per
host and per class, with the same figures counted by the switch port each host hangs on.

Each packet is counted in the class it travelled in: data in its flow's ``tc``, ACKs and NAKs in
the flow's ``ack_tc`` (default the data's), CNPs in the endpoints' CNP class, PFC frames in each
class they name. Pure: the endpoints' ``stats`` snapshots (:mod:`traffic.endpoint_telemetry`)
and the switches' counters in, ``summary.json``'s ``tester`` out (docs/RESULTS.md), and the
comparisons the conformance checks make of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: What the tester counts per host and class, and what each is.
TESTER_COUNTERS = (
    ("data_sent", "data packets sent, retransmissions included (the flow's class)"),
    ("retransmitted", "data packets sent again (Go-Back-N or a timeout)"),
    ("data_received", "data packets that arrived, in order or not (the flow's class)"),
    ("sequence_errors", "data packets that arrived out of sequence (each gap NAKed once)"),
    ("ce_received", "data packets that arrived marked CE"),
    ("acks_sent", "ACKs sent (the flow's ack class)"),
    ("acks_received", "ACKs received"),
    ("naks_sent", "NAKs sent"),
    ("naks_received", "NAKs received"),
    ("cnps_sent", "CNPs sent (the CNP class)"),
    ("cnps_received", "CNPs received"),
    ("pfc_sent", "PFC frames sent naming this class (a storm or slow-receiver fault)"),
    ("pfc_received", "PFC frames received naming this class (pause or resume)"),
)
#: What the switch counts of the same traffic, per host (the leaf port the host hangs on) and
#: class; ``ce_marked_by_class`` has every switch's CE marks per class.
PORT_COUNTERS = (
    ("pfc_sent", "PFC frames for this class the leaf port sent the host"),
    ("pfc_received", "PFC frames for this class the leaf port received from the host"),
    ("frames_sent", "frames of this class the leaf port sent the host (data, ACK/NAK, CNP: "
                    "the P4 program's tx_port_tc)"),
    ("frames_received", "frames of this class the leaf port received from the host (the P4 "
                        "program's rx_port_tc)"),
)
#: The tester's counters of the frames a host sent, and received, in a class: what the leaf
#: port's ``frames_received`` and ``frames_sent`` count of the same traffic.
SENT_BY_HOST = ("data_sent", "acks_sent", "naks_sent", "cnps_sent")
RECEIVED_BY_HOST = ("data_received", "acks_received", "naks_received", "cnps_received")


@dataclass(frozen=True)
class FlowQps:
    """One flow's ends, classes and QP pairs, as the runner assigned them."""

    src: str
    dst: str
    tc: int
    ack_tc: int
    pairs: tuple[tuple[int, int], ...]  # (requester QPN at src, responder QPN at dst)


Cells = Mapping[tuple[int, int], int]  # (port, class) -> count, a switch counter's cells


def build_tester(flows: Iterable[FlowQps], snapshots: Mapping[str, dict], cnp_tc: int,
                host_ports: Mapping[str, tuple[str, int]], pfc_tx: Mapping[str, Cells],
                pfc_rx: Mapping[str, Cells], ecn_marked: Mapping[str, Cells],
                tx_tc: Mapping[str, Cells] | None = None,
                rx_tc: Mapping[str, Cells] | None = None) -> dict[str, Any]:
    """``summary.json``'s ``tester``: ``hosts`` (host -> class -> :data:`TESTER_COUNTERS`),
    ``ports`` (host -> class -> :data:`PORT_COUNTERS`) and ``ce_marked_by_class``; a class
    appears where one of its counters is not 0. ``snapshots``: each host's endpoint ``stats``
    answer; ``host_ports``: host -> (leaf, port); the counters: switch -> cells (``tx_tc``
    and ``rx_tc``: every frame per port and class, the P4 program's tx_port_tc and
    rx_port_tc)."""
    hosts: dict[str, dict[int, dict[str, int]]] = {}

    def add(host: str, tc: int, key: str, n: int) -> None:
        if n:
            cell = hosts.setdefault(host, {}).setdefault(tc, dict.fromkeys(
                (k for k, _ in TESTER_COUNTERS), 0))
            cell[key] += n

    for f in flows:
        src_qps = (snapshots.get(f.src) or {}).get("qps", {})
        dst_qps = (snapshots.get(f.dst) or {}).get("qps", {})
        for req_qpn, resp_qpn in f.pairs:
            s, d = src_qps.get(str(req_qpn), {}), dst_qps.get(str(resp_qpn), {})
            add(f.src, f.tc, "data_sent", s.get("packets_sent", 0))
            add(f.src, f.tc, "retransmitted", s.get("retransmitted", 0))
            add(f.src, f.ack_tc, "acks_received", s.get("acks", 0))
            add(f.src, f.ack_tc, "naks_received", s.get("naks", 0))
            add(f.src, cnp_tc, "cnps_received", s.get("cnps_received", 0))
            add(f.dst, f.tc, "data_received", d.get("packets", 0) + d.get("duplicates", 0)
                + d.get("out_of_order", 0))
            add(f.dst, f.tc, "sequence_errors", d.get("out_of_order", 0))
            add(f.dst, f.tc, "ce_received", d.get("ce_marked", 0))
            add(f.dst, f.ack_tc, "acks_sent", d.get("acks_sent", 0))
            add(f.dst, f.ack_tc, "naks_sent", d.get("naks_sent", 0))
            add(f.dst, cnp_tc, "cnps_sent", d.get("cnps_sent", 0))
    for host, snap in snapshots.items():
        stats = snap.get("stats") or {}
        for tc, n in enumerate(stats.get("pfc_tx_by_class") or []):
            add(host, tc, "pfc_sent", n)
        for tc, n in enumerate(stats.get("pfc_rx_by_class") or []):
            add(host, tc, "pfc_received", n)
    ports: dict[str, dict[str, dict[str, int]]] = {}
    for host, (leaf, port) in host_ports.items():
        for key, cells in (("pfc_sent", pfc_tx), ("pfc_received", pfc_rx),
                           ("frames_sent", tx_tc or {}), ("frames_received", rx_tc or {})):
            for (p, tc), n in sorted(cells.get(leaf, {}).items()):
                if p == port and n:
                    ports.setdefault(host, {}).setdefault(str(tc), dict.fromkeys(
                        (k for k, _ in PORT_COUNTERS), 0))[key] = n
    return {"hosts": {h: {str(tc): c for tc, c in sorted(by.items())}
                      for h, by in sorted(hosts.items())},
            "ports": dict(sorted(ports.items())),
            "ce_marked_by_class": per_class(ecn_marked.values())}


def per_class(switches: Iterable[Cells]) -> dict[str, int]:
    """A per-(port, class) counter summed over every port of every switch, per class (JSON
    keys, ``"3"``): summary.json's ``pfc_frames_by_class`` and the tester's CE marks."""
    out: dict[str, int] = {}
    for cells in switches:
        for (_port, tc), n in cells.items():
            out[str(tc)] = out.get(str(tc), 0) + n
    return dict(sorted(out.items()))


def total_counted(tester: Mapping[str, Any], tc: int, key: str) -> int:
    """One tester counter summed over the hosts, for class ``tc``."""
    return sum(by.get(str(tc), {}).get(key, 0) for by in (tester.get("hosts") or {}).values())


def pfc_mismatches(tester: Mapping[str, Any], tc: int) -> tuple[int, int, list[str]]:
    """PFC frames of class ``tc`` as the switches' host ports counted them (sent to or received
    from the hosts) and as the hosts counted them, summed; and each host where the two differ,
    in words."""
    switch = tester_n = 0
    wrong = []
    hosts, ports = tester.get("hosts") or {}, tester.get("ports") or {}
    for h in sorted(set(hosts) | set(ports)):
        mine, port = hosts.get(h, {}).get(str(tc), {}), ports.get(h, {}).get(str(tc), {})
        for theirs, ours, what in (("pfc_sent", "pfc_received", "to"),
                                   ("pfc_received", "pfc_sent", "from")):
            a, b = port.get(theirs, 0), mine.get(ours, 0)
            switch, tester_n = switch + a, tester_n + b
            if a != b:
                wrong.append(f"{h}: switch {a}, tester {b} PFC frames {what} the host")
    return switch, tester_n, wrong


def frame_mismatches(tester: Mapping[str, Any], tc: int) -> tuple[int, int, list[str]]:
    """Frames of class ``tc`` (data, ACK/NAK, CNP) as the switches' host ports counted them
    (received from the hosts and sent to them) and as the hosts counted them, summed; and each
    host where the two differ, in words. Only a class that loses nothing between the two
    counts (a lossless one) can match: a lossy queue drops after the P4 program counted."""
    switch = tester_n = 0
    wrong = []
    hosts, ports = tester.get("hosts") or {}, tester.get("ports") or {}
    for h in sorted(set(hosts) | set(ports)):
        mine, port = hosts.get(h, {}).get(str(tc), {}), ports.get(h, {}).get(str(tc), {})
        for theirs, ours, what in (("frames_received", SENT_BY_HOST, "from"),
                                   ("frames_sent", RECEIVED_BY_HOST, "to")):
            a, b = port.get(theirs, 0), sum(mine.get(k, 0) for k in ours)
            switch, tester_n = switch + a, tester_n + b
            if a != b:
                wrong.append(f"{h}: switch {a}, tester {b} frames {what} the host")
    return switch, tester_n, wrong
