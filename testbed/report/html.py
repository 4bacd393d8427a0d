"""report.html: a run's results as one self-contained page (inline SVG figures, inline CSS, no
script and no request to anything), opened from disk in any browser, offline.

Top to bottom: the fidelity verdict; the headline table; the topology with each cable
coloured by utilization and haloed by pause; each flow's goodput (each QP's in a block that
opens on demand); the busy queues; when PFC paused what; ECN marking against queue length
over the configured RED curve; message completion times; the timeline of faults; the captures.

:func:`write_html_report` writes a run's page. :func:`render_page` takes blocks of figures
and tables made from any data (testbed.report.figures draws them), for reports over many runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from testbed.report import data as rd
from testbed.report import figures as rf
from testbed.results.files import REPORT_HTML_FILE
from testbed.results.summary import read_fabric_summary


@dataclass
class Block:
    """One section of the page: a figure (an ``<svg>`` string), a table, or a list.
    ``details``: more figures, each in a block the reader opens on demand."""

    title: str
    kind: str = "figure"  # figure | table | list
    svg: str = ""
    caption: str = ""
    header: list[str] = field(default_factory=list)
    rows: list = field(default_factory=list)
    details: list[Block] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.title.lower())


def render_page(title: str, blocks: list[Block], verdict: dict | None = None,
                subtitle: str = "", source: str = "") -> str:
    """The page: the fidelity verdict (a summary's ``fidelity`` section) on top, then each
    block in order."""
    import jinja2

    from testbed.analysis.fidelity import lines

    env = jinja2.Environment(loader=jinja2.PackageLoader("testbed.report", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2").render(
        title=title, subtitle=subtitle, verdict=verdict, verdict_lines=lines(verdict),
        blocks=blocks, source=source)


def write_html_report(run_dir: Path) -> Path:
    """Write ``report.html`` into a results folder, from what the folder holds."""
    run_dir = Path(run_dir)
    data = rd.ReportData.read(run_dir)
    s = data.summary
    subtitle = (f"{s.get('duration_s', '?')} s of traffic; results folder {run_dir.name}"
                if s else f"results folder {run_dir.name} (no summary.json: not a scenario run)")
    # a `testbed up` folder has the verdict beside its telemetry alone
    verdict = s.get("fidelity") or (read_fabric_summary(run_dir) or {}).get("fidelity")
    page = render_page(data.title, run_blocks(data), verdict, subtitle, str(run_dir))
    out = run_dir / REPORT_HTML_FILE
    out.write_text(page)
    return out


def _marks(summary: dict) -> list[tuple[float, str]]:
    return [(e["t_s"], e["event"]) for e in summary.get("timeline", []) if e["event"] != "start"]


def run_blocks(data: rd.ReportData) -> list[Block]:
    """Every section of a run's page that its data can fill."""
    s = data.summary
    queues = rd.queue_series(data.telemetry)
    blocks = headline_blocks(data)
    if data.topology:
        loads = rd.link_loads(data.run_dir, data.topology, queues, data.counters,
                              data.traffic_period_s)
        table = Block("every link", kind="table", header=["link", "utilization", "paused"],
                      rows=[[f"{ln.a} - {ln.b}", f"{ln.utilization:.0%}", f"{ln.paused:.0%}"]
                            for ln in loads])
        blocks.append(Block("Topology", svg=rf.topology_chart(data.topology, loads), caption=(
            "Each cable coloured by its utilization over the traffic period (the busier "
            "direction); a red halo, as wide as the share of the period, where PFC paused it "
            "(either end's class, the busiest)."), details=[table]))
    blocks += [goodput_block(data), *dcqcn_blocks(data), *queue_blocks(queues, s, data.run_dir)]
    ecn = rd.ecn_points(data.counters, queues)
    if ecn or data.ecn_profiles():
        blocks.append(Block("ECN marking against queue length",
                            svg=rf.ecn_chart(ecn, data.ecn_profiles()), caption=(
            "Each point is one counter interval of one queue: the share of its packets the P4 "
            "program marked CE against the queue's mean kernel backlog over that interval; the "
            "dashed line is the configured RED curve (qos.ecn). The program marks on its own "
            "estimate of the occupancy, at each packet's arrival, so points spread around it."
            if ecn else "No queue carried marked traffic: only the configured curve.")))
    fct = rd.fct_by_flow(data.run_dir, s)
    if fct:
        blocks.append(Block("Message completion times", svg=rf.cdf_chart(
            fct, "message completion time (s)"), caption="CDF of each flow's messages: posted "
            "to last packet acknowledged (endpoints/<host>/messages.csv)."))
    events = _marks(s)
    if events:
        end = max((r.t_s for r in data.telemetry), default=0.0)
        blocks.append(Block("Timeline", svg=rf.timeline_chart(events, end), caption=(
            "Faults, link changes and the senders' stop, on the run's clock; dotted lines on "
            "the time plots above.")))
    if s.get("captures"):
        blocks.append(Block("Packet captures", kind="list", rows=s["captures"], caption=(
            "pcaps in the results folder: open them in Wireshark, or e.g. `tshark -r FILE -Y "
            "infiniband.bth` (RoCEv2 on UDP 4791) or `-Y macc` (PFC).")))
    return blocks


def headline_blocks(data: rd.ReportData) -> list[Block]:
    """The summary's ``headline`` figures (testbed.analysis.headline, the figures runs are compared
    by) as its own tables show them; a run without them gets :func:`headline_table`."""
    h = data.summary.get("headline")
    if not h:
        return [headline_table(data)]
    from testbed.report.headline_text import FLOW_COLUMNS, figure_rows, flow_rows

    out = [Block("Headline", kind="table", header=["figure", "value"],
                 rows=[list(r) for r in figure_rows(h)],
                 caption="summary.json's headline: docs/RESULTS.md says what each figure is.")]
    if h.get("flows"):
        out.append(Block("Flows", kind="table", rows=flow_rows(h),
                         header=["flow", "path", *(label for _, label in FLOW_COLUMNS)]))
    return out


def headline_table(data: rd.ReportData) -> Block:
    """Per flow: goodput and what it took (retransmissions, NAKs, CNPs); then the fabric's
    totals: drops, PFC frames, ECN marks."""
    s = data.summary
    period = data.traffic_period_s
    rows: list[list] = []
    for name, f in s.get("flows", {}).items():
        qps = f["qps"]
        rows.append([name, f"{f['src']} -> {f['dst']}", len(qps),
                     round(f["bytes_received"] * 8 / period / 1e6, 3),
                     sum(q["retransmitted"] for q in qps), sum(q["naks"] for q in qps),
                     sum(q["cnps_received"] for q in qps), "", "", ""])
    last = {q: rows_[-1] for q, rows_ in rd.queue_series(data.telemetry).items()}
    drops = sum(r.drops for r in last.values())
    pfc = sum(s.get("pfc_frames_sent", {}).values())
    rows.append(["all", "the fabric", sum(r[2] for r in rows),
                 round(sum(r[3] for r in rows), 3), sum(r[4] for r in rows),
                 sum(r[5] for r in rows), sum(r[6] for r in rows), drops, pfc,
                 data.ecn_marks_total()])
    return Block("Headline", kind="table", header=[
        "flow", "path", "QPs", "goodput (Mbit/s)", "retransmitted", "NAKs", "CNPs",
        "queue drops", "PFC frames sent", "ECN marks"], rows=rows, caption=(
        f"Goodput: bytes delivered over the {period:.2f} s traffic period. Drops (every "
        "class's kernel queues), PFC frames and ECN marks are counted by the switches, for the "
        "fabric as a whole."))


def goodput_block(data: rd.ReportData) -> Block:
    flows, per_qp = rd.goodput(data.run_dir, data.summary)
    marks = _marks(data.summary)
    details = [Block(f"{name}: each of its {len(qps)} QPs", svg=rf.line_chart(
        qps, "goodput (Mbit/s)", marks), caption=(
        "" if len(qps) <= rf.MAX_LEGEND else f"{len(qps)} QPs: too many lines to label."))
        for name, qps in per_qp.items()]
    return Block("Goodput per flow", svg=rf.line_chart(flows, "goodput (Mbit/s)", marks),
                 caption="Payload acknowledged per second, each flow's QPs summed "
                         "(endpoints/<host>/qp_timeseries.csv).", details=details)


def dcqcn_blocks(data: rd.ReportData) -> list[Block]:
    """DCQCN's rate and alpha per flow over time, for a run whose senders ran it."""
    rates, alphas = rd.dcqcn_series(data.run_dir, data.summary)
    if not rates:
        return []
    marks = _marks(data.summary)
    return [Block("DCQCN rate and alpha", svg=rf.line_chart(rates, "rate (Mbit/s)", marks),
                  caption="The rate each flow's reaction points allow (RC, its QPs summed): "
                          "cut on every CNP, raised by the timer and byte counter (DCQCN, "
                          "SIGCOMM 2015). Below: alpha, the QPs' estimate of congestion.",
                  details=[Block("alpha", svg=rf.line_chart(alphas, "alpha", marks))])]


def queue_blocks(queues: dict, summary: dict, run_dir: Path) -> list[Block]:
    """The busiest queues' backlog (the rest on demand) and the pause timeline."""
    marks = _marks(summary)
    busy = sorted(rd.busy_queues(queues), key=lambda s: -max(s.y))
    out = []
    if busy:
        top, rest = busy[:rf.MAX_LEGEND], busy[rf.MAX_LEGEND:]
        out.append(Block("Queue occupancy", svg=rf.line_chart(top, "kernel backlog (KB)", marks),
                         caption=f"The {len(top)} queues with the highest peak backlog "
                                 f"(of {len(busy)} that held packets).",
                         details=[Block(f"the other {len(rest)} queues", svg=rf.line_chart(
                             rest, "kernel backlog (KB)", marks))] if rest else []))
    spans = rd.pause_spans(queues) + rd.host_pause_spans(run_dir)
    if spans:
        wd = [(f"{e['switch']}:{e['port']} tc{e['tc']}", float(e["t_s"]))
              for e in summary.get("watchdog_events", []) if e["event"] == "storm_detected"]
        out.append(Block("Paused by PFC", svg=rf.pause_chart(spans, wd, marks), caption=(
            "When each switch queue's class, or each host NIC's, was paused by its peer's PFC "
            "(a host's from its endpoint's samples); x: the PFC watchdog cut the queue off.")))
    return out
