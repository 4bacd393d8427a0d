"""Figures that show a phenomenon of lossless Ethernet in a results folder: per-link
utilization and its imbalance (ECMP polarization), a flow's goodput over a window (the victim
of congestion spreading), Jain's fairness index and the time DCQCN takes to converge to it, and
the losses and retransmissions of a run (lossy against lossless RoCE).

The computations are pure functions of numbers; the readers beside them take what they need from
a results folder (``p4_counters.csv``, ``summary.json``, the endpoints' ``qp_timeseries.csv`` and
``messages.csv``, as docs/RESULTS.md describes them).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from testbed.config.constants import DROP_PFC_CONSUMED, NUM_DROP_REASONS
from testbed.results.endpoints import read_messages, read_qp_series
from testbed.results.files import P4_COUNTERS_FILE, TOPOLOGY_FILE
from testbed.results.telemetry import CounterCell, last_p4_counters

#: A cell of a P4 counter array: (switch, counter name, index).
Cell = CounterCell
#: A time series: (t_s, value) in time order.
Series = list[tuple[float, float]]


# -- pure figures -----------------------------------------------------------------------------

def imbalance(values: Sequence[float]) -> float:
    """max/mean of the load on a set of links: 1 when even, len(values) when one link carries
    everything. 0 for no load at all."""
    if not values or sum(values) <= 0:
        return 0.0
    return max(values) / (sum(values) / len(values))


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (Jain, Chiu, Hawe, DEC-TR-301, 1984): (sum x)^2 / (n sum x^2), 1
    when every flow gets the same, 1/n when one gets everything."""
    if not values:
        raise ValueError("Jain's index of no flows")
    sq = sum(x * x for x in values)
    if sq == 0:
        return 1.0  # nobody got anything: equal, if useless
    return sum(values) ** 2 / (len(values) * sq)


def value_at(series: Series, t: float) -> float:
    """The series' last value at or before ``t`` (0 before its first sample): a cumulative
    counter's reading at t."""
    out = 0.0
    for ts, v in series:
        if ts > t:
            break
        out = v
    return out


def window_rate(series: Series, t0: float, t1: float) -> float:
    """Growth per second of a cumulative series (bytes acknowledged, say) over [t0, t1]."""
    if t1 <= t0:
        raise ValueError(f"empty window {t0}..{t1}")
    return (value_at(series, t1) - value_at(series, t0)) / (t1 - t0)


def convergence_time(cumulative: dict[str, Series], start_s: float, end_s: float,
                     window_s: float = 1.0, threshold: float = 0.9,
                     step_s: float = 0.1) -> float | None:
    """Seconds from ``start_s`` (the last flow's start) until Jain's index of the flows' rates,
    each over the ``window_s`` before, reaches ``threshold`` and stays there up to ``end_s``;
    None if it never does. ``cumulative`` holds each flow's bytes so far over time."""
    times = []
    t = start_s + window_s
    while t <= end_s + 1e-9:
        times.append(round(t, 6))
        t += step_s
    fair = [jain_index([window_rate(s, t - window_s, t) for s in cumulative.values()]) >= threshold
            for t in times]
    since = None
    for t, ok in zip(times, fair, strict=True):
        if ok and since is None:
            since = t
        elif not ok:
            since = None
    return None if since is None else round(since - start_s, 3)


# -- results-folder readers -------------------------------------------------------------------

def read_p4_counters(path: Path | str) -> dict[Cell, tuple[int, int]]:
    """The last sample of every P4 counter cell in ``p4_counters.csv``: (packets, bytes), read
    through the results folder's one reader of that file (testbed.results.telemetry)."""
    return last_p4_counters(path)


def p4_drops(cells: dict[Cell, tuple[int, int]]) -> int:
    """Packets the P4 programs dropped for any reason but consuming a PFC frame (not a loss)."""
    return sum(pk for (_sw, c, i), (pk, _by) in cells.items()
               if c == "RoceIngress.drops" and i % NUM_DROP_REASONS != DROP_PFC_CONSUMED)


def port_tx_bytes(cells: dict[Cell, tuple[int, int]], switch: str,
                  ports: Iterable[int]) -> dict[int, int]:
    """Bytes each port of a switch sent over the run (the P4 ``tx_port`` counter)."""
    return {p: cells.get((switch, "RoceEgress.tx_port", p), (0, 0))[1] for p in ports}


def ports_toward(run_dir: Path, switch: str, peer_prefix: str) -> list[int]:
    """A switch's ports whose peer's name starts with ``peer_prefix`` (``spine``: a leaf's
    uplinks; ``leaf2``: a spine's parallel links down to leaf2), from topology.json."""
    topo = json.loads((run_dir / TOPOLOGY_FILE).read_text())
    sw = next(s for s in topo["leaves"] + topo["spines"] if s["name"] == switch)
    return [int(p["number"]) for p in sw["ports"] if p["peer"].startswith(peer_prefix)]


def link_shares(run_dir: Path, switch: str, peer_prefix: str) -> dict[int, float]:
    """Each port of ``switch`` toward ``peer_prefix`` -> its share of the bytes all of them sent
    over the run (P4 tx_port counters, p4_counters.csv); 0 everywhere if none sent anything."""
    tx = port_tx_bytes(read_p4_counters(run_dir / P4_COUNTERS_FILE), switch,
                       ports_toward(run_dir, switch, peer_prefix))
    total = sum(tx.values())
    return {p: (b / total if total else 0.0) for p, b in sorted(tx.items())}


def retransmitted(summary: dict, flows: Iterable[str] | None = None) -> int:
    """Data packets sent again (Go-Back-N or timeout), over the named flows (default all)."""
    names = list(summary["flows"]) if flows is None else list(flows)
    return sum(q["retransmitted"] for n in names for q in summary["flows"][n]["qps"])


def cnps_received(summary: dict, flows: Iterable[str] | None = None) -> int:
    names = list(summary["flows"]) if flows is None else list(flows)
    return sum(q["cnps_received"] for n in names for q in summary["flows"][n]["qps"])


def pfc_frames_sent(summary: dict) -> int:
    """PFC frames every switch sent over the run."""
    return sum(summary["pfc_frames_sent"].values())


def delivered_bytes(summary: dict, flows: Iterable[str] | None = None) -> int:
    names = list(summary["flows"]) if flows is None else list(flows)
    return sum(summary["flows"][n]["bytes_received"] for n in names)


def flow_acked_series(run_dir: Path, summary: dict) -> dict[str, Series]:
    """Each flow's payload bytes acknowledged so far, over time, summed over its QPs (from its
    sender's qp_timeseries.csv; a host samples all its QPs at the same instants)."""
    out: dict[str, Series] = {}
    for name, f in summary["flows"].items():
        qpns = {int(q["qpn"]) for q in f["qps"]}
        by_t: dict[float, float] = defaultdict(float)
        for r in read_qp_series(run_dir, f["src"]):
            if r.role == "requester" and r.qpn in qpns:
                by_t[r.t_s] += r.bytes
        out[name] = sorted(by_t.items())
    return out


def flow_goodput_bps(run_dir: Path, summary: dict, t0: float, t1: float) -> dict[str, float]:
    """Each flow's goodput (bit/s of payload acknowledged) over [t0, t1] on the run's clock."""
    return {n: 8 * window_rate(s, t0, t1) for n, s in flow_acked_series(run_dir, summary).items()}


def median_fct_s(run_dir: Path, host: str) -> float | None:
    """Median completion time of the messages a host sent (its messages.csv)."""
    fcts = [m.fct_s for m in read_messages(run_dir, host)]
    return statistics.median(fcts) if fcts else None
