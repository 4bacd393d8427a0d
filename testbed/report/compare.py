"""``testbed compare RUN_A RUN_B ...``: runs' headline figures side by side, and their flows'
goodput and PFC frames overlaid in one picture.

An argument is a run's results folder (it has ``summary.json`` and ``scenario.json``) or a
sweep's folder (it has ``sweep.json``), which stands for every run of the sweep, each labelled
by its point. A run from before the headline existed has it computed from its folder.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from testbed.machine.owner import make_results_dir
from testbed.report.headline_text import FIGURES, fmt, markdown_table
from testbed.results.files import (
    COMPARE_CSV_FILE,
    COMPARE_MD_FILE,
    COMPARE_PNG_FILE,
    SCENARIO_FILE,
    SUMMARY_FILE,
    SWEEP_FILE,
)
from testbed.results.summary import read_summary


class CompareError(ValueError):
    """A folder that cannot be compared, in one line."""


@dataclass
class RunView:
    label: str
    run_dir: Path
    summary: dict
    headline: dict


def _is_run(d: Path) -> bool:
    return (d / SUMMARY_FILE).is_file() and (d / SCENARIO_FILE).is_file()


def expand(folders: list[Path]) -> list[tuple[str, Path]]:
    """(label, run folder) for every argument: a run is itself, a sweep its runs."""
    out = []
    for d in folders:
        if not d.exists():
            raise CompareError(f"{d}: no such folder")
        if _is_run(d):
            out.append((d.name, d))
        elif (d / SWEEP_FILE).is_file():
            sweep = json.loads((d / SWEEP_FILE).read_text())
            for r in sweep.get("runs", []):
                out.append((f"p{r['point']}-r{r['repeat']} {r['label']}", d / r["run_dir"]))
            if not sweep.get("runs"):
                raise CompareError(f"{d}: a sweep folder with no finished run")
        else:
            raise CompareError(f"{d}: not a run's results folder (no summary.json and "
                               f"scenario.json) nor a sweep's (no sweep.json)")
    if len(out) < 2:
        raise CompareError("give at least two runs (or a sweep folder with two runs or more)")
    return out


def load(folders: list[Path]) -> list[RunView]:
    from testbed.analysis.headline import compute_headline

    views = []
    for label, d in expand(folders):
        if not _is_run(d):
            raise CompareError(f"{d}: the sweep lists this run but its folder is not a run's")
        summary = read_summary(d)
        headline = summary.get("headline") or compute_headline(d, summary)
        views.append(RunView(label, d, summary, headline))
    return views


def table(views: list[RunView]) -> tuple[list[str], list[list[str]]]:
    """A row per figure, a column per run (the runs' labels head the columns)."""
    header = ["figure", *(v.label for v in views)]
    rows = [[label, *(fmt(v.headline.get(key)) for v in views)] for key, label in FIGURES]
    for flow in _flows(views):
        rows.append([f"{flow} goodput (Mbit/s)", *(fmt(v.headline.get("flows", {}).get(
            flow, {}).get("goodput_mbps")) for v in views)])
    return header, rows


def _flows(views: list[RunView]) -> list[str]:
    """Every flow of any run, in the first run's order, then the others'."""
    return list(dict.fromkeys(f for v in views for f in v.headline.get("flows", {})))


def write(views: list[RunView], out: Path) -> list[Path]:
    """compare.md, compare.csv and compare.png in ``out``."""
    from testbed.analysis.headline_series import flow_goodput, run_pfc_frames
    from testbed.report.experiment_plots import plot_compare

    make_results_dir(out)
    header, rows = table(views)
    md = out / COMPARE_MD_FILE
    md.write_text("\n".join([
        "# Comparison", "",
        *(f"- **{v.label}**: `{v.run_dir}`" for v in views), "",
        *markdown_table(header, rows), "", "![comparison](compare.png)", ""]))
    with open(out / COMPARE_CSV_FILE, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["figure", *(str(v.run_dir) for v in views)])
        for key, _label in FIGURES:
            w.writerow([key, *("" if v.headline.get(key) is None else v.headline[key]
                               for v in views)])
        for flow in _flows(views):
            w.writerow([f"{flow}.goodput_mbps", *(v.headline.get("flows", {}).get(
                flow, {}).get("goodput_mbps", "") for v in views)])
    png = plot_compare([(v.label, flow_goodput(v.run_dir, v.summary),
                         run_pfc_frames(v.run_dir, v.summary)) for v in views],
                       out / COMPARE_PNG_FILE)
    return [md, out / COMPARE_CSV_FILE, png]
