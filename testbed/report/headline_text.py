"""The headline figures in words and tables: which figures a comparison shows (one list, read
by `testbed run`, report.md, `testbed sweep` and `testbed compare`), how each is written, and
the tables themselves (Markdown, and rich for the terminal)."""

from __future__ import annotations

from typing import Any

#: The run-wide figures of summary.json's ``headline``, in the order tables show them:
#: (key, label). docs/RESULTS.md says what each is.
FIGURES: list[tuple[str, str]] = [
    ("goodput_mbps", "goodput (Mbit/s)"),
    ("jain", "Jain fairness"),
    ("fct_median_s", "FCT median (s)"),
    ("fct_p99_s", "FCT p99 (s)"),
    ("victim_slowdown", "victim slowdown"),
    ("lossless_drops", "lossless drops"),
    ("drops", "drops (all classes)"),
    ("hidden_loss", "hidden loss"),
    ("pfc_frames", "PFC frames"),
    ("pause_s", "pause time (link-s)"),
    ("ecn_marked", "ECN marks"),
    ("cnps", "CNPs"),
    ("retransmitted", "retransmissions"),
    ("naks", "NAKs"),
    ("max_utilization", "max link utilization"),
    ("max_imbalance", "ECMP imbalance (max/mean)"),
    ("efficiency", "collective efficiency"),
    ("op_time_s", "collective time/op (s)"),
    ("step_p99_s", "collective step p99 (s)"),
    ("background_mbps", "background delivered (Mbit/s)"),
    ("background_lost", "background frames lost"),
]

#: The per-flow table's columns: (key in a flow's figures, label).
FLOW_COLUMNS: list[tuple[str, str]] = [
    ("goodput_mbps", "Mbit/s"), ("fct_median_s", "FCT p50 s"), ("fct_p99_s", "FCT p99 s"),
    ("retransmitted", "retx"), ("naks", "NAKs"), ("ce_marked", "CE"), ("cnps_sent", "CNPs"),
]


def fmt(v: Any) -> str:
    """A figure as a table shows it: integers whole, fractions to 4 significant digits, '-'
    for a figure the run has not got (no victim, no messages completed...)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def figure_rows(headline: dict) -> list[tuple[str, str]]:
    return [(label, fmt(headline.get(key))) for key, label in FIGURES]


def flow_rows(headline: dict) -> list[list[str]]:
    """A row per flow: its name, its path, then :data:`FLOW_COLUMNS`."""
    rows = []
    for name, f in headline.get("flows", {}).items():
        rows.append([name, f"{f['src']}->{f['dst']}",
                     *(fmt(f.get(k)) for k, _ in FLOW_COLUMNS)])
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def headline_markdown(headline: dict) -> list[str]:
    """The headline as report.md shows it: the run's figures, then one row per flow."""
    lines = ["## Headline figures", ""]
    lines += markdown_table(["figure", "value"], [list(r) for r in figure_rows(headline)])
    if headline.get("flows"):
        lines += ["", *markdown_table(["flow", "path", *(lbl for _, lbl in FLOW_COLUMNS)],
                                      flow_rows(headline))]
    return lines + [""]


def headline_tables(headline: dict):
    """The same two tables for the terminal (rich)."""
    from rich.table import Table

    figures = Table(title="headline", title_justify="left")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    for label, value in figure_rows(headline):
        figures.add_row(label, value)
    flows = Table(title="flows", title_justify="left")
    for i, label in enumerate(["flow", "path", *(lbl for _, lbl in FLOW_COLUMNS)]):
        flows.add_column(label, justify="right" if i > 1 else "left")
    for row in flow_rows(headline):
        flows.add_row(*row)
    return figures, flows
