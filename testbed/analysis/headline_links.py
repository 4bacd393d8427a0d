"""The headline figures of a run's links, from the switch agents' telemetry (pure: records in,
figures out): PFC frames and pause time per link, and each link's utilization with the
imbalance over the parallel links of each stage.

A link's direction is the data's: ``spine1->leaf1`` is spine1's egress port toward leaf1. PFC
on it is what leaf1 sent back to stop that data: the frames spine1's port received
(``pfc_rx``) and the time spine1's queue stood paused (``paused_s``). A switch samples all the
classes of a port at once, so a port's classes are summed sample by sample.

Stages (where ECMP or parallel links spread traffic): ``<leaf> up`` is a leaf's egress toward
every spine (the leaf's ECMP choice), ``<leaf> down`` every spine's egress toward that leaf
(the paths into it). The imbalance of a stage is max/mean of its links' utilization: 1 is a
perfect spread, N (the stage's link count) all traffic on one link.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from testbed.analysis.phenomena import imbalance as max_over_mean
from testbed.results.telemetry import TelemetryRow

PortId = tuple[str, int]  # (switch, port)


@dataclass(frozen=True)
class LinkFigures:
    link: str  # "a->b", the data's direction
    tier: str  # "host" (a leaf toward its host) or "fabric"
    rate_mbps: float
    mbps: float | None  # mean rate sent over the window
    utilization: float | None  # mbps / rate_mbps
    pfc_frames: int  # PFC frames b sent to stop a's data, every class
    paused_s: float  # the longest any of a's classes on this link stood paused


def port_peers(topology: dict) -> dict[PortId, tuple[str, float]]:
    """Every switch port's peer and rate, from ``topology.json``."""
    out = {}
    for sw in topology["spines"] + topology["leaves"]:
        for p in sw["ports"]:
            out[(sw["name"], p["number"])] = (p["peer"], float(p["rate_mbps"]))
    return out


def link_names(topology: dict) -> dict[PortId, str]:
    """Every switch port's link, named by the data's direction ``a->b``; parallel links are
    ``a->b#k``, k = 1.. in port order (the numbering of a scenario's link faults)."""
    out = {}
    for sw in topology["spines"] + topology["leaves"]:
        by_peer: dict[str, list[int]] = defaultdict(list)
        for p in sw["ports"]:
            by_peer[p["peer"]].append(p["number"])
        for peer, ports in by_peer.items():
            for k, port in enumerate(sorted(ports), 1):
                out[(sw["name"], port)] = f"{sw['name']}->{peer}" + (
                    f"#{k}" if len(ports) > 1 else "")
    return out


def _port_series(rows: list[TelemetryRow]) -> dict[PortId, list[tuple[float, int, int, float]]]:
    """Per port, per sample: (t, bytes sent, PFC frames received, seconds paused), the bytes
    and frames summed over the port's classes and the pause the longest of any class."""
    acc: dict[PortId, dict[float, list]] = defaultdict(dict)
    for r in rows:
        cell = acc[(r.switch, r.port)].setdefault(r.t_s, [0, 0, 0.0])
        cell[0] += r.sent_bytes
        cell[1] += r.pfc_rx
        cell[2] = max(cell[2], r.paused_s)
    return {p: [(t, *v) for t, v in sorted(by_t.items())] for p, by_t in acc.items()}


def _at(series: list[tuple], t: float) -> tuple | None:
    """The last sample at or before t (the first one if every sample is later)."""
    before = [s for s in series if s[0] <= t]
    return before[-1] if before else (series[0] if series else None)


def _mean_mbps(series: list[tuple], t0: float, t1: float) -> float | None:
    """A port's mean rate sent between the samples at ``t0`` and ``t1`` (None: no span)."""
    a, b = _at(series, t0), _at(series, t1)
    if a is None or b is None or b[0] <= a[0]:
        return None
    return (b[1] - a[1]) * 8 / (b[0] - a[0]) / 1e6


def link_figures(rows: list[TelemetryRow], topology: dict,
                 window: tuple[float, float]) -> list[LinkFigures]:
    """Every switch egress link that carried or paused anything: its mean rate over
    ``window`` (the run's clock, e.g. start to senders stop) and the PFC it received over the
    whole run."""
    peers = port_peers(topology)
    names = link_names(topology)
    hosts = {h["name"] for h in topology["hosts"]}
    out = []
    for (sw, port), series in sorted(_port_series(rows).items()):
        peer, rate = peers.get((sw, port), (f"port{port}", 0.0))
        last = series[-1]
        mbps = _mean_mbps(series, *window)
        if not (last[1] or last[2]):
            continue
        util = mbps / rate if mbps is not None and rate else None
        out.append(LinkFigures(names.get((sw, port), f"{sw}->{peer}"),
                               "host" if peer in hosts else "fabric", rate, _round(mbps),
                               _round(util), last[2], round(last[3], 4)))
    return out


def _round(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(v, digits)


def stages(topology: dict) -> dict[str, list[str]]:
    """Each stage's links (named as :func:`link_names` does): a leaf's uplinks, and every
    spine's links into a leaf. A stage of one link has nothing to balance and is left out."""
    spines = {s["name"] for s in topology["spines"]}
    names = link_names(topology)
    out: dict[str, list[str]] = {}
    for leaf in topology["leaves"]:
        out[f"{leaf['name']} up"] = [names[(leaf["name"], p["number"])] for p in leaf["ports"]
                                     if p["peer"] in spines]
        out[f"{leaf['name']} down"] = [
            names[(s["name"], p["number"])] for s in topology["spines"] for p in s["ports"]
            if p["peer"] == leaf["name"]]
    return {k: v for k, v in out.items() if len(v) > 1}


#: A stage whose links carried less than this share of their rate on average (ACKs and CNPs
#: alone) says nothing about how ECMP spread the data, and is left out of the imbalance.
MIN_STAGE_UTILIZATION = 0.05


def imbalance(links: list[LinkFigures], stage_links: dict[str, list[str]]) -> dict[str, dict]:
    """Per stage that carried data (:data:`MIN_STAGE_UTILIZATION`): each link's utilization
    and max/mean over them (a link missing from ``links`` carried nothing)."""
    util = {lf.link: lf.utilization or 0.0 for lf in links}
    out = {}
    for stage, links in stage_links.items():
        values = [util.get(k, 0.0) for k in links]
        mean = sum(values) / len(values)
        if mean < MIN_STAGE_UTILIZATION:
            continue
        out[stage] = {"utilization": {k: round(v, 4) for k, v in zip(links, values,
                                                                      strict=True)},
                      "imbalance": round(max_over_mean(values), 4)}
    return out


#: A phase that begins at a link fault is measured from this long after it: the timeline's time
#: is after the reroute was applied, and what the old path still held drains meanwhile (a few
#: frames at these rates).
PHASE_SETTLE_S = 0.3


def link_phases(rows: list[TelemetryRow], topology: dict, timeline: list[dict],
                window: tuple[float, float]) -> list[dict]:
    """The run cut at its link faults (the timeline's entries with ``link``, as the scenario
    runner writes them): per phase, the fault that began it (``link``, ``up``; none for the
    first) and each switch-to-switch link's mean rate over it (Mbit/s). A phase ends as the
    next reroute begins and starts :data:`PHASE_SETTLE_S` after its own was done. [] without
    a link fault: what failover and recovery did, link by link. ``window``: the run's, from
    start to the senders' stop."""
    cuts = [e for e in timeline if "link" in e]
    if not cuts:
        return []
    hosts = {h["name"] for h in topology["hosts"]}
    peers = port_peers(topology)
    names = link_names(topology)
    series = {p: s for p, s in _port_series(rows).items()
              if peers.get(p, ("", 0.0))[0] not in hosts}
    begins = [(window[0], {})] + [(float(e["t_s"]) + PHASE_SETTLE_S,
                               {"link": e["link"], "up": e["up"]}) for e in cuts]
    ends = [float(e.get("from_s", e["t_s"])) for e in cuts] + [window[1]]  # as each began
    out = []
    for (t0, fault), t1 in zip(begins, ends, strict=True):
        rates = {names.get(p, f"{p[0]}:{p[1]}"): _mean_mbps(s, t0, t1)
                 for p, s in sorted(series.items())}
        mbps = {k: _round(v) for k, v in rates.items() if v is not None}
        out.append({**fault, "from_s": round(t0, 3), "to_s": round(t1, 3), "mbps": mbps})
    return out
