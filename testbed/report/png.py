"""A results folder's plots and report: what a scenario did, in pictures a student can read.

``report.png`` has three panels over the run's clock: each sending QP's goodput, the kernel
backlog of every lossless queue that held anything (the queues PFC guards), and when each
port's class was paused (a red x where the PFC watchdog cut a queue off). Dotted lines mark the
timeline: faults, and when the senders stopped. ``report.md`` says what ran and what came out.
Its data comes from testbed.report.data, as report.html's does (testbed.report.html).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from testbed.report.data import background, busy_queues, pause_spans, queue_series
from testbed.results.endpoints import endpoint_hosts, read_qp_series
from testbed.results.files import REPORT_MD_FILE, REPORT_PNG_FILE, SUMMARY_FILE
from testbed.results.summary import read_summary
from testbed.results.telemetry import run_telemetry


def make_report(run_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = read_summary(run_dir) if (run_dir / SUMMARY_FILE).exists() else {}
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax_rate, ax_q, ax_p = axes
    _plot_goodput(ax_rate, run_dir, summary)
    paused_rows = _plot_queues(ax_q, run_dir)
    _plot_pauses(ax_p, paused_rows)
    _mark_timeline(axes, ax_q, summary)
    # watchdog detections, on the row of the queue they cut off
    rows = {k: i for i, (k, _pts) in enumerate(paused_rows)}
    for e in summary.get("watchdog_events", []):
        key = f"{e['switch']}:{e['port']} tc{e['tc']}"
        if e["event"] == "storm_detected" and key in rows:
            ax_p.plot(float(e["t_s"]), rows[key], "rx", markersize=8)
    fid = summary.get("fidelity")
    if fid and not fid["ok"]:  # a run that was not faithful says so above everything else
        fig.suptitle("NOT A FAITHFUL EMULATION: " + "; ".join(fid["reasons"])[:220],
                     color="red", fontsize=9, wrap=True)
    fig.tight_layout()
    png = run_dir / REPORT_PNG_FILE
    fig.savefig(png, dpi=90)
    plt.close(fig)
    _markdown(run_dir, summary)
    return png


def _plot_goodput(ax_rate, run_dir: Path, summary: dict) -> None:
    """1. goodput per sending QP (endpoint time series), and each background flow's, dashed."""
    for host in endpoint_hosts(run_dir):
        series: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for r in read_qp_series(run_dir, host):
            if r.role == "requester":
                series[r.qpn].append((r.t_s, r.goodput_bps / 1e6))
        for qpn, pts in series.items():
            if any(v for _, v in pts):
                ax_rate.plot([t for t, _ in pts], [v for _, v in pts], label=f"{host} QP {qpn}")
    for bg in background(summary):
        ax_rate.plot(bg.t, bg.y, "--", label=bg.label)
    ax_rate.set_ylabel("goodput (Mbit/s)")
    ax_rate.set_title("senders")
    if ax_rate.lines:
        ax_rate.legend(fontsize=7, ncol=3)


def _plot_queues(ax_q, run_dir: Path) -> list[tuple[str, list[tuple]]]:
    """2. the kernel backlog of each queue that held anything (agent telemetry); returns the
    pause spans of the queues that were ever paused, for the pause panel."""
    queues = queue_series(run_telemetry(run_dir))
    for s in busy_queues(queues):
        ax_q.plot(s.t, s.y, label=s.label)
    ax_q.set_ylabel("kernel backlog (KB)")
    ax_q.set_title("switch queues that held packets")
    if ax_q.lines:
        ax_q.legend(fontsize=7, ncol=3)
    return pause_spans(queues)


def _plot_pauses(ax_p, paused_rows: list[tuple[str, list[tuple]]]) -> None:
    """3. when each queue was paused by PFC, one row per queue."""
    for i, (_key, spans) in enumerate(paused_rows):
        ax_p.broken_barh(spans, (i - 0.4, 0.8))
    ax_p.set_yticks(range(len(paused_rows)), [k for k, _ in paused_rows], fontsize=7)
    ax_p.set_title("paused by PFC")
    ax_p.set_xlabel("time on the run's clock (s)")


def _mark_timeline(axes, ax_q, summary: dict) -> None:
    """The timeline (faults, senders stop) on every panel: all series share the run's clock."""
    marks: list[tuple[float, list[str]]] = []  # events close together share one label
    for e in summary.get("timeline", []):
        if marks and e["t_s"] - marks[-1][0] < 0.2:
            marks[-1][1].append(e["event"].split(" (")[0])
        else:
            marks.append((e["t_s"], [e["event"].split(" (")[0]]))
    for t, what in marks:
        for ax in axes:
            ax.axvline(t, color="grey", linestyle=":", linewidth=1)
        ax_q.annotate("; ".join(what), (t, 0.97), xycoords=("data", "axes fraction"),
                      fontsize=7, rotation=90, va="top", ha="right", color="grey")


def _markdown(run_dir: Path, summary: dict) -> None:
    from testbed.analysis.fidelity import lines as fidelity_lines

    lines = [f"# {summary.get('scenario', run_dir.name)}", ""]
    fid = fidelity_lines(summary.get("fidelity"))
    if fid and not summary["fidelity"]["ok"]:
        # Markdown has no colour: a red-circle sign heads the warning where renderers show it
        lines += [f"> **\N{LARGE RED CIRCLE} {fid[0]}**", *(f"> {ln}" for ln in fid[1:]), ""]
    elif fid:
        lines += [fid[0], ""]
    refused = (summary.get("agents") or {}).get("refused")
    if refused:
        lines += [f"> note: {refused}", ""]
    lines += ["![report](report.png)", ""]
    for name, f in summary.get("flows", {}).items():
        lines.append(f"- flow **{name}** {f['src']} -> {f['dst']}: {f['bytes_received']} bytes "
                     f"received, {sum(q['retransmitted'] for q in f['qps'])} packets resent")
    lines += [f"- {line}" for line in background_lines(summary.get("background"))]
    if "kernel_drops_lossless" in summary:
        lines.append(f"- drops in lossless classes: {summary['kernel_drops_lossless']}; hidden "
                     f"loss in front of BMv2: {sum(summary.get('hidden_loss', {}).values())}")
    for e in summary.get("watchdog_events", []):
        lines.append(f"- watchdog {e['event']} on {e['switch']} port {e['port']} class "
                     f"{e['tc']} at {e['t_s']} s {e.get('detail', '')}")
    lines += deadlock_lines(summary.get("deadlock"))
    for e in summary.get("timeline", []):
        lines.append(f"- t={e['t_s']} s: {e['event']}")
    if summary.get("headline"):
        from testbed.report.headline_text import headline_markdown

        lines += ["", *headline_markdown(summary["headline"])]
    (run_dir / REPORT_MD_FILE).write_text("\n".join(lines) + "\n")


def background_lines(bg: dict | None) -> list[str]:
    """Each best-effort background flow in words (report.md and `testbed run`); a figure a
    process did not write reads "unknown"."""
    def known(v: object) -> object:
        return "unknown" if v is None else v

    return [f"background {name}: {b['src']} -> {b['dst']} in class {b['tc']}, "
            f"{b['offered_mbps']:g} Mbit/s offered, {known(b.get('goodput_mbps'))} Mbit/s "
            f"delivered, {known(b.get('lost_packets'))} of {known(b.get('sent_packets'))} "
            "frames lost" for name, b in (bg or {}).items()]


def deadlock_lines(dl: dict | None) -> list[str]:
    """What the summary's deadlock section says, in words (report.md and `testbed run`)."""
    if not dl:
        return []
    start, end = dl["window_s"]
    stuck = dl["stuck_after_stop"]
    if not stuck:
        out = [f"- no queue stayed stuck from {start} s to {end} s (after the senders stopped)"]
    else:
        held = ("PFC still arriving" if any(q["pfc_frames"] for q in stuck)
                else "waiting for credit")
        out = [f"- DEADLOCK: {len(stuck)} queues stayed full from {start} s to {end} s with "
               f"nothing sent and {held}: "
               + ", ".join(f"{q['switch']}:{q['port']} tc{q['tc']} ({q['backlog_bytes_min']} B)"
                           for q in stuck)]
    lat = [d["latency_s"] for d in dl.get("watchdog_detections", [])]
    if lat:
        out.append(f"- watchdog: {len(lat)} detections, {min(lat):.3f}-{max(lat):.3f} s from "
                   f"the pause that stopped the queue")
    return out
