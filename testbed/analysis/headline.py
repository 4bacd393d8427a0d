"""The headline figures of a run, computed once, here, from its results folder: what a student
compares between two runs (``summary.json``'s ``headline``, docs/RESULTS.md lists each).

Per flow: goodput, flow (message) completion times, retransmissions, NAKs, ECN marks seen and
CNPs. Over the run: total goodput, Jain's fairness index over the flows, the victims'
slowdown, drops (lossless and all), the loss hidden in front of BMv2, PFC frames and pause
time per link, ECN marks at the switches, and each link's utilization with the imbalance of
each ECMP stage (:mod:`testbed.analysis.headline_links`).

A **victim** is a flow whose name starts with ``victim`` (``victim``, ``victim-2``): a flow that
shares no bottleneck with the congestion on purpose, to show what congestion spreading does to
bystanders. Its slowdown is the rate it would get alone (the slowest link on its path, or its
rate cap) over the goodput it got. Victims are left out of the fairness index, which judges
the flows that compete.

The reading is done by :func:`compute_headline`; everything else is pure, for the tests.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from testbed.analysis.collectives import collective_figures, rank_steps
from testbed.analysis.headline_links import imbalance, link_figures, link_phases, stages
from testbed.analysis.phenomena import jain_index
from testbed.analysis.quantiles import percentile
from testbed.results.endpoints import MessageRow, QpRow, read_messages, read_qp_series
from testbed.results.files import P4_COUNTERS_FILE, SCENARIO_FILE, TOPOLOGY_FILE
from testbed.results.telemetry import QueueId, TelemetryRow, last_p4_counters, run_telemetry
from traffic.collectives import CollectiveSpec, flows_of
from traffic.flows import FlowSpec, QpAssignment, assign_qps
from traffic.wire import NUM_TCS

#: A flow whose name starts with this is a victim (see the module's docstring).
VICTIM_PREFIX = "victim"


def is_victim(name: str) -> bool:
    return name.startswith(VICTIM_PREFIX)


def jain(values: list[float]) -> float | None:
    """Jain's fairness index (Jain, Chiu and Hawe, DEC-TR-301, 1984): (sum x)^2 / (n sum x^2),
    1 when every flow got the same, 1/n when one got everything; None without traffic or with
    fewer than two flows (one flow is trivially fair)."""
    if len(values) < 2 or not any(values):
        return None
    return jain_index(values)


def active_end(resp_rows: list[QpRow], final_bytes: int) -> float | None:
    """When the flow's responders had received their last byte: the first sample at which the
    sum of their bytes reached its final value (None without samples)."""
    by_t: dict[float, int] = defaultdict(int)
    for r in resp_rows:
        by_t[r.t_s] += r.bytes
    if not by_t:
        return None
    for t, total in sorted(by_t.items()):
        if total >= final_bytes:
            return t
    return max(by_t)


def _last_per_qp(rows: list[QpRow]) -> dict[int, QpRow]:
    out: dict[int, QpRow] = {}
    for r in rows:
        out[r.qpn] = r
    return out


def fabric_goodput(flows: Iterable[dict]) -> float:
    """Every flow's bytes over the span from the first flow's start to the last flow's last
    byte (Mbit/s): what the fabric delivered per second while it carried them. Adding up each
    flow's goodput over its own active time would overstate it whenever flows end at different
    times: a flow that Go-Back-N's timeouts starve ends early, at a high rate of its few bytes
    (a lossy incast's sum came to 11.1 Mbit/s on a 10 Mbit/s link)."""
    spans = [(f["start_s"], f["start_s"] + f["active_s"]) for f in flows
             if f.get("active_s") is not None]
    total = sum(f["bytes"] for f in flows)
    if not spans or total == 0:
        return 0.0
    span = max(e for _, e in spans) - min(s for s, _ in spans)
    return round(total * 8 / span / 1e6, 4) if span > 0 else 0.0


def flow_figures(spec: FlowSpec, start_s: float, qps: list[dict], resp_rows: list[QpRow],
                 req_rows: list[QpRow], messages: list[MessageRow]) -> dict:
    """One flow's figures. ``start_s``: its start on the run's clock; ``qps``: its QPs in
    summary.json (the endpoints' counters at the end); the rows and messages: its own QPs'."""
    got = sum(q.get("bytes_received", 0) for q in qps)
    end = active_end(resp_rows, sum(r.bytes for r in _last_per_qp(resp_rows).values()))
    if spec.duration_s is not None:
        # A flow that sends for a duration is active at least that long: if its bytes stopped
        # arriving sooner, it was starved (Go-Back-N's timeouts, a pause), not done.
        nominal = start_s + spec.duration_s
        end = nominal if end is None else max(end, nominal)
    active = end - start_s if end is not None else None
    fcts = [m.fct_s for m in messages]
    last_req, last_resp = _last_per_qp(req_rows).values(), _last_per_qp(resp_rows).values()
    return {
        "src": spec.src, "dst": spec.dst, "victim": is_victim(spec.name), "qps": spec.qps,
        "bytes": got,
        "start_s": round(start_s, 4),
        "active_s": round(active, 4) if active is not None else None,
        "goodput_mbps": round(got * 8 / active / 1e6, 4) if active and active > 0 else 0.0,
        "messages": len(fcts),
        "fct_median_s": percentile(fcts, 0.5), "fct_p99_s": percentile(fcts, 0.99),
        "retransmitted": sum(q.get("retransmitted", 0) for q in qps),
        "naks": sum(q.get("naks", 0) for q in qps),
        "timeouts": sum(r.timeouts for r in last_req),
        "cnps_received": sum(q.get("cnps_received", 0) for q in qps),
        "cnps_sent": sum(r.cnps_sent for r in last_resp),
        "ce_marked": sum(r.ce_marked for r in last_resp),
    }


def alone_mbps(spec: FlowSpec, topology: dict, fabric_link_mbps: float) -> float:
    """The rate a flow would get with the fabric to itself: its slowest link (its hosts' links,
    and a fabric link when it crosses leaves), or its QPs' rate caps if lower."""
    hosts = {h["name"]: h for h in topology["hosts"]}
    src, dst = hosts[spec.src], hosts[spec.dst]
    rate = min(float(src["rate_mbps"]), float(dst["rate_mbps"]))
    if src["leaf"] != dst["leaf"]:
        rate = min(rate, fabric_link_mbps)
    if spec.rate_cap_mbps is not None:
        rate = min(rate, spec.rate_cap_mbps * spec.qps)
    return rate


def victims(flows: dict[str, dict], alone: dict[str, float]) -> dict[str, dict]:
    """Each victim's goodput, the rate it would get alone, and the slowdown (alone / goodput;
    None when it got nothing through: starved)."""
    out = {}
    for name, f in flows.items():
        if f["victim"]:
            g = f["goodput_mbps"]
            out[name] = {"goodput_mbps": g, "alone_mbps": alone[name],
                         "slowdown": round(alone[name] / g, 4) if g > 0 else None}
    return out


#: P4 counters (``p4_counters.csv``) the headline reads.
ECN_COUNTER = "RoceIngress.lossless.ecn_marked"
PFC_TX_COUNTER = "RoceEgress.pfc_egress.pfc_tx"


def last_counters(path: Path) -> dict[tuple[str, str, int], int]:
    """``p4_counters.csv``: each (switch, counter, cell)'s packets at its last sample (the
    counters only grow; a cell appears once it has counted something)."""
    if not path.exists():
        return {}
    return {cell: packets for cell, (packets, _bytes) in last_p4_counters(path).items()}


def host_uplinks(topology: dict, counters: dict[tuple[str, str, int], int],
                 series: dict[str, list[QpRow]]) -> list[dict]:
    """The links from hosts to their leaves that PFC paused: the frames the leaf's P4 program
    sent toward the host (its ``pfc_tx`` counter) and the longest the host's endpoint stood
    paused in a class (its QPs' ``paused_s``). Hosts have no agent telemetry of their own."""
    out = []
    for h in topology["hosts"]:
        port = h["leaf_port"]
        frames = sum(v for (sw, c, idx), v in counters.items()
                     if sw == h["leaf"] and c == PFC_TX_COUNTER and idx // NUM_TCS == port)
        paused = max((r.paused_s for r in series.get(h["name"], [])), default=0.0)
        if frames or paused:
            out.append({"link": f"{h['name']}->{h['leaf']}", "tier": "host",
                        "rate_mbps": float(h["rate_mbps"]), "mbps": None, "utilization": None,
                        "pfc_frames": frames, "paused_s": round(paused, 4)})
    return out


def _window(summary: dict) -> tuple[float, float]:
    """The senders' time on the run's clock: from the start to when they stopped."""
    tl = {e["event"]: e["t_s"] for e in summary.get("timeline", [])}
    start = float(tl.get("start", 0.0))
    return start, float(tl.get("senders stop", start + float(summary.get("duration_s", 0))))


def compute_headline(run_dir: Path, summary: dict) -> dict:
    """The headline of a results folder, given its summary (``summary.json``'s contents, or the
    summary being written): reads scenario.json, topology.json, the agents' telemetry, the
    endpoints' files and p4_counters.csv."""
    run_dir = Path(run_dir)
    scenario = json.loads((run_dir / SCENARIO_FILE).read_text())
    topology = json.loads((run_dir / TOPOLOGY_FILE).read_text())
    specs = [FlowSpec.model_validate(f) for f in scenario.get("flows", [])]
    window = _window(summary)
    hosts = {h for s in specs for h in (s.src, s.dst)}
    series = {h: read_qp_series(run_dir, h) for h in hosts}
    messages = {h: read_messages(run_dir, h) for h in hosts}
    flows, alone, fcts = {}, {}, []
    assigned = assign_qps(specs)
    for spec in specs:
        qpns = assigned[spec.name]
        req, resp = {a.requester_qpn for a in qpns}, {a.responder_qpn for a in qpns}
        flows[spec.name] = flow_figures(
            spec, window[0] + spec.start_s,
            summary.get("flows", {}).get(spec.name, {}).get("qps", []),
            [r for r in series[spec.dst] if r.qpn in resp],
            [r for r in series[spec.src] if r.qpn in req],
            [m for m in messages[spec.src] if m.qpn in req])
        fcts += [m.fct_s for m in messages[spec.src] if m.qpn in req]
        alone[spec.name] = alone_mbps(spec, topology, scenario["config"]["fabric"][
            "fabric_link_mbps"])
    rows = run_telemetry(run_dir)
    links = link_figures(rows, topology, window)
    counters = last_counters(run_dir / P4_COUNTERS_FILE)
    # the lossless classes: PFC's, or mode ib-credit's credited ones
    qos = scenario["config"]["qos"]
    pfc_enable = [*qos["pfc_enable"], *qos.get("credit_enable", [])]
    head = _assemble(flows, victims(flows, alone), links, imbalance(links, stages(topology)),
                     host_uplinks(topology, counters, series), summary, window, fcts, {
                         "drops": sum(_last_drops(rows).values()),
                         "lossless_drops_telemetry": sum(v for q, v in _last_drops(rows).items()
                                                         if q[2] in pfc_enable),
                         "ecn_marked": sum(v for (_s, c, _i), v in counters.items()
                                           if c == ECN_COUNTER)})
    head["link_phases"] = link_phases(rows, topology, summary.get("timeline", []), window)
    coll = (_collectives(scenario, topology, specs, assigned, messages, series, flows)
            if scenario.get("collectives") else {})
    effs = [c["efficiency"] for c in coll.values()]
    ops = [c["time_per_op_s"] for c in coll.values()]
    p99 = [c["step_p99_s"] for c in coll.values()]
    # run-wide, the worst collective: an unfinished one (None) leaves the figure unknown
    head.update(efficiency=None if not effs or None in effs else min(effs),
                op_time_s=None if not ops or None in ops else max(ops),
                step_p99_s=None if not p99 or None in p99 else max(p99), collectives=coll)
    head.update(_background(summary.get("background")))
    return head


def _background(bg: dict | None) -> dict:
    """The best-effort background's figures, every background flow together: what arrived
    (Mbit/s, over each flow's sending time) and what was lost; None without background, or
    when a flow's figure is unknown (its process wrote none)."""
    good = [b.get("goodput_mbps") for b in (bg or {}).values()]
    lost = [b.get("lost_packets") for b in (bg or {}).values()]
    return {"background_mbps": None if not good or None in good else round(sum(good), 3),
            "background_lost": None if not lost or None in lost else sum(lost)}


def _collectives(scenario: dict, topology: dict, specs: list[FlowSpec],
                 assigned: dict[str, list[QpAssignment]],
                 messages: dict[str, list[MessageRow]], series: dict[str, list[QpRow]],
                 flows: dict[str, dict]) -> dict[str, dict]:
    """Each collective's figures (testbed.analysis.collectives), from its flows' messages."""
    by_name = {s.name: s for s in specs}
    rate = {h["name"]: float(h["rate_mbps"]) for h in topology["hosts"]}
    paused = {h: max((r.paused_s for r in rows), default=0.0) for h, rows in series.items()}
    out = {}
    for raw in scenario["collectives"]:
        c = CollectiveSpec.model_validate(raw)
        ranks = c.ranks or []
        sends = {name: rank_steps(by_name[name], messages[by_name[name].src],
                                  [a.requester_qpn for a in assigned[name]])
                 for name in (f.name for f in flows_of(c, ranks)) if name in by_name}
        out[c.name] = collective_figures(c, min(rate[r] for r in ranks), sends, flows, paused)
    return out


def _last_drops(rows: list[TelemetryRow]) -> dict[QueueId, int]:
    """Each queue's drops at its last sample (the agents count them from the start)."""
    out = {}
    for r in rows:
        out[r.queue] = r.drops
    return out


def _assemble(flows: dict, vict: dict, links: list, stage_imbalance: dict, uplinks: list[dict],
              summary: dict, window: tuple[float, float], fcts: list[float],
              switch: dict) -> dict:
    """The headline's JSON: the run-wide figures first (what tables compare), then the
    details they came from."""
    competing = [f["goodput_mbps"] for f in flows.values() if not f["victim"]]
    link_rows = [asdict(lf) for lf in links] + uplinks
    slowdowns = [v["slowdown"] for v in vict.values() if v["slowdown"] is not None]
    hidden = summary.get("hidden_loss")
    lossless = summary.get("kernel_drops_lossless", switch["lossless_drops_telemetry"])
    utils = [lf.utilization for lf in links if lf.utilization is not None]
    return {
        "window_s": [round(window[0], 3), round(window[1], 3)],
        "goodput_mbps": fabric_goodput(flows.values()),
        "jain": _r(jain(competing)),
        "fct_median_s": _r(percentile(fcts, 0.5), 6),
        "fct_p99_s": _r(percentile(fcts, 0.99), 6),
        "victim_slowdown": max(slowdowns) if slowdowns else None,
        "lossless_drops": lossless,
        "drops": switch["drops"],
        "hidden_loss": sum(hidden.values()) if isinstance(hidden, dict) else hidden,
        "pfc_frames": sum(r["pfc_frames"] for r in link_rows),
        "pause_s": round(sum(r["paused_s"] for r in link_rows), 4),
        "ecn_marked": switch["ecn_marked"],
        "cnps": sum(f["cnps_sent"] for f in flows.values()),
        "retransmitted": sum(f["retransmitted"] for f in flows.values()),
        "naks": sum(f["naks"] for f in flows.values()),
        "max_utilization": _r(max(utils)) if utils else None,
        "max_imbalance": max((s["imbalance"] for s in stage_imbalance.values()), default=None),
        "flows": flows,
        "victims": vict,
        "links": link_rows,
        "stages": stage_imbalance,
    }


def _r(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(v, digits)
