"""What a results folder's reports show, as plain data: read once here, drawn by
testbed.report.png (report.png) and testbed.report.figures (report.html).

Every series is on the run's clock. The readers are testbed.results.telemetry' (telemetry, events,
P4 counters) and the endpoints' CSVs (traffic.endpoint_telemetry's QP_COLUMNS and
MESSAGE_COLUMNS); nothing here draws.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from testbed.results.endpoints import endpoint_hosts, read_messages, read_qp_series
from testbed.results.files import CONFIG_FILE, SUMMARY_FILE, TOPOLOGY_FILE
from testbed.results.telemetry import P4CounterRow, TelemetryRow, run_p4_counters, run_telemetry
from traffic.wire import NUM_TCS

#: The P4 counters the reports read (testbed.run.counter_sampler.CounterSampler samples them).
ECN_MARKED = "RoceIngress.lossless.ecn_marked"
TX_PORT_TC = "RoceEgress.tx_port_tc"
RX_PORT = "RoceIngress.rx_port"
#: An interval of the counters with fewer packets than this gives no mark fraction (noise).
ECN_MIN_PACKETS = 5


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


@dataclass
class Series:
    """One line of a time plot."""

    label: str
    t: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class LinkLoad:
    """A cable, how busy it was and how long it was paused (the busier direction's share of
    the traffic period, each)."""

    a: str
    b: str
    tier: str
    utilization: float
    paused: float


@dataclass(frozen=True)
class EcnPoint:
    """One counter interval of one queue: its mean kernel backlog and the share marked."""

    queue: str
    backlog_bytes: float
    fraction: float
    packets: int


def qp_flows(summary: dict) -> dict[tuple[str, int], str]:
    """(sending host, requester QPN) -> flow name, from summary.json's flows."""
    return {(f["src"], q["qpn"]): name for name, f in summary.get("flows", {}).items()
            for q in f["qps"]}


def goodput(run_dir: Path, summary: dict) -> tuple[list[Series], dict[str, list[Series]]]:
    """Each flow's goodput (its QPs summed per sample), then each background flow's, and each
    QP's, in Mbit/s."""
    owner = qp_flows(summary)
    per_qp: dict[str, dict[str, Series]] = defaultdict(dict)
    per_flow: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for host in endpoint_hosts(run_dir):
        for r in read_qp_series(run_dir, host):
            if r.role != "requester":
                continue
            flow = owner.get((host, r.qpn), f"{host}")
            t, mbps = r.t_s, r.goodput_bps / 1e6
            s = per_qp[flow].setdefault(str(r.qpn), Series(f"{flow} QP {r.qpn}"))
            s.t.append(t)
            s.y.append(mbps)
            per_flow[flow][t] += mbps
    flows = [Series(name, sorted(pts), [pts[t] for t in sorted(pts)])
             for name, pts in per_flow.items()]
    return flows + background(summary), {name: list(qs.values()) for name, qs in per_qp.items()}


def background(summary: dict) -> list[Series]:
    """Each best-effort background flow's goodput over time (what its receiver counted),
    labelled as background."""
    return [Series(f"{name} (background, class {b['tc']})", [t for t, _ in b["series"]],
                   [v for _, v in b["series"]])
            for name, b in (summary.get("background") or {}).items() if b.get("series")]


def dcqcn_series(run_dir: Path, summary: dict) -> tuple[list[Series], list[Series]]:
    """Each flow's DCQCN state over time from its requesters' samples: the sending rate its QPs'
    reaction points allow (RC, summed, Mbit/s) and their alpha (the mean over the flow's QPs).
    Empty when no QP ran DCQCN (the columns are blank then)."""
    owner = qp_flows(summary)
    rate: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    alpha: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for host in endpoint_hosts(run_dir):
        for r in read_qp_series(run_dir, host):
            if r.role != "requester" or r.rate_bps is None or r.alpha is None:
                continue
            flow = owner.get((host, r.qpn), host)
            rate[flow][r.t_s] += r.rate_bps / 1e6
            alpha[flow][r.t_s].append(r.alpha)
    rates = [Series(f, sorted(pts), [pts[t] for t in sorted(pts)]) for f, pts in rate.items()]
    alphas = [Series(f, sorted(pts), [sum(pts[t]) / len(pts[t]) for t in sorted(pts)])
              for f, pts in alpha.items()]
    return rates, alphas


def queue_series(telemetry: list[TelemetryRow]) -> dict[str, list[TelemetryRow]]:
    """Each queue's samples, named switch:port tcN."""
    out: dict[str, list[TelemetryRow]] = defaultdict(list)
    for r in telemetry:
        out[f"{r.switch}:{r.port} tc{r.tc}"].append(r)
    return out


def busy_queues(queues: dict[str, list[TelemetryRow]]) -> list[Series]:
    """The kernel backlog (KB) of each queue that held anything."""
    return [Series(k, [r.t_s for r in rows], [r.backlog_bytes / 1000 for r in rows])
            for k, rows in queues.items() if any(r.backlog_bytes for r in rows)]


def pause_spans(queues: dict[str, list[TelemetryRow]]) -> list[tuple[str, list[tuple]]]:
    """For each queue ever paused: its (start, length) spans of being paused by PFC."""
    out = []
    for key, rows in queues.items():
        if not any(r.paused for r in rows):
            continue
        spans, start = [], None
        for r in rows:
            if r.paused and start is None:
                start = r.t_s
            elif not r.paused and start is not None:
                spans.append((start, r.t_s - start))
                start = None
        if start is not None:
            spans.append((start, rows[-1].t_s - start))
        out.append((key, spans))
    return out


def host_pause_spans(run_dir: Path) -> list[tuple[str, list[tuple]]]:
    """For each host whose NIC PFC paused: its (start, length) spans, from the endpoint's
    per-QP ``paused_s`` (seconds its class was paused so far): a sample interval over which
    it grew counts as paused, from the sample before."""
    out = []
    for host in endpoint_hosts(run_dir):
        by_class: dict[int, list[tuple[float, float]]] = defaultdict(list)
        first_qp: dict[int, int] = {}
        for r in read_qp_series(run_dir, host):
            if first_qp.setdefault(r.tc, r.qpn) == r.qpn:  # one QP per class
                by_class[r.tc].append((r.t_s, r.paused_s))
        for tc, pts in sorted(by_class.items()):
            spans: list[tuple[float, float]] = []
            for (t0, p0), (t1, p1) in zip(pts, pts[1:], strict=False):
                if p1 <= p0:
                    continue
                if spans and abs(spans[-1][0] + spans[-1][1] - t0) < 1e-6:
                    spans[-1] = (spans[-1][0], t1 - spans[-1][0])
                else:
                    spans.append((t0, t1 - t0))
            if spans:
                out.append((f"{host} NIC tc{tc}", spans))
    return out


def _counter_cells(rows: list[P4CounterRow], name: str) -> dict[tuple[str, int], list]:
    cells: dict[tuple[str, int], list] = defaultdict(list)
    for r in rows:
        if r.counter == name:
            cells[(r.switch, r.index)].append(r)
    return cells


def ecn_points(counters: list[P4CounterRow],
               queues: dict[str, list[TelemetryRow]]) -> list[EcnPoint]:
    """For each counter interval of each queue that carried packets: the share of them the P4
    program marked CE (its RED on the queue length), against the queue's mean kernel backlog
    over that interval (the agents' samples)."""
    marked = _counter_cells(counters, ECN_MARKED)
    sent = _counter_cells(counters, TX_PORT_TC)
    out = []
    for (sw, idx), marks in marked.items():
        tx = {r.t_s: r.packets for r in sent.get((sw, idx), [])}
        port, tc = divmod(idx, NUM_TCS)
        name = f"{sw}:{port} tc{tc}"
        rows = queues.get(name, [])
        for m0, m1 in zip(marks, marks[1:], strict=False):
            if m0.t_s not in tx or m1.t_s not in tx:
                continue
            n = tx[m1.t_s] - tx[m0.t_s]
            inside = [r.backlog_bytes for r in rows if m0.t_s < r.t_s <= m1.t_s]
            if n < ECN_MIN_PACKETS or not inside:
                continue
            out.append(EcnPoint(name, sum(inside) / len(inside),
                                min(1.0, (m1.packets - m0.packets) / n), n))
    return out


def link_loads(run_dir: Path, topology: dict, queues: dict[str, list[TelemetryRow]],
               counters: list[P4CounterRow], period_s: float) -> list[LinkLoad]:
    """Each cable's utilization and paused share over the traffic period: a switch's egress
    from its queues' telemetry, a host's egress from its leaf's ingress counter, and a host's
    pause from its endpoint's QPs."""
    sent: dict[tuple[str, int], float] = defaultdict(float)
    paused: dict[tuple[str, int], float] = defaultdict(float)
    for rows in queues.values():
        last = rows[-1]
        sent[(last.switch, last.port)] += last.sent_bytes
        paused[(last.switch, last.port)] = max(paused[(last.switch, last.port)], last.paused_s)
    rx = {k: cells[-1].bytes for k, cells in _counter_cells(counters, RX_PORT).items()}
    host_paused = {host: max((r.paused_s for r in read_qp_series(run_dir, host)), default=0.0)
                   for host in endpoint_hosts(run_dir)}
    period = max(period_s, 1e-9)
    out = []
    for ln in topology.get("links", []):
        rate = ln["rate_mbps"] * 1e6 / 8 * period  # bytes the link could carry
        b_out = sent.get((ln["b"], ln["b_port"]), 0.0)
        if ln["tier"] == "host":
            a_out = rx.get((ln["b"], ln["b_port"]), 0)
            a_paused = host_paused.get(ln["a"], 0.0)
        else:
            a_out = sent.get((ln["a"], ln["a_port"]), 0.0)
            a_paused = paused.get((ln["a"], ln["a_port"]), 0.0)
        out.append(LinkLoad(ln["a"], ln["b"], ln["tier"], min(1.0, max(a_out, b_out) / rate),
                            min(1.0, max(a_paused, paused.get((ln["b"], ln["b_port"]), 0.0))
                                / period)))
    return out


def fct_by_flow(run_dir: Path, summary: dict) -> dict[str, list[float]]:
    """Each flow's message completion times (s), sorted; flows without any are left out."""
    owner = qp_flows(summary)
    out: dict[str, list[float]] = defaultdict(list)
    for host in endpoint_hosts(run_dir):
        for r in read_messages(run_dir, host):
            out[owner.get((host, r.qpn), host)].append(r.fct_s)
    return {k: sorted(v) for k, v in out.items() if v}


@dataclass
class ReportData:
    """Everything a run's report shows (the labs' checkers read a run with their own
    :class:`testbed.labs.evidence.RunData`)."""

    run_dir: Path
    summary: dict
    config: dict
    topology: dict
    telemetry: list[TelemetryRow]
    counters: list[P4CounterRow]

    @classmethod
    def read(cls, run_dir: Path) -> ReportData:
        return cls(run_dir, read_json(run_dir / SUMMARY_FILE),
                   read_json(run_dir / CONFIG_FILE), read_json(run_dir / TOPOLOGY_FILE),
                   run_telemetry(run_dir), run_p4_counters(run_dir))

    @property
    def title(self) -> str:
        return self.summary.get("scenario", self.run_dir.name)

    @property
    def traffic_period_s(self) -> float:
        """From the start to the senders' stop (the scenario's duration if not recorded)."""
        tl = {e["event"]: e["t_s"] for e in self.summary.get("timeline", [])}
        if "start" in tl and "senders stop" in tl:
            return tl["senders stop"] - tl["start"]
        return float(self.summary.get("duration_s") or 1.0)

    def ecn_profiles(self) -> dict[int, tuple[int, int, float]]:
        """Class -> (kmin_bytes, kmax_bytes, pmax), as configured (qos.ecn)."""
        ecn = self.config.get("qos", {}).get("ecn", {})
        return {int(tc): (p["kmin_bytes"], p["kmax_bytes"], p["pmax"]) for tc, p in ecn.items()}

    def ecn_marks_total(self) -> int:
        return sum(cells[-1].packets for cells in
                   _counter_cells(self.counters, ECN_MARKED).values())
