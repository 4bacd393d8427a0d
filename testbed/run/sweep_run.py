"""``testbed sweep``: a scenario (or several, one more axis) run at every point of a parameter
grid, each point ``repeat`` times, into one folder:

    <out>/sweep.json        what was swept, and every run (its point, repeat and folder)
    <out>/runs/pNN-rM/<name>-<time>/   each run's results folder, as `testbed run` writes it
    <out>/table.csv, table.md          the headline figures per point: median, min and max
    <out>/runs.csv                     the headline figures of every run
    <out>/sweep.png                    the main figures against the swept setting

Every point's scenario is validated before the first run, so a bad key or value stops the
sweep before any fabric comes up. An interrupted sweep keeps the runs it finished and writes
the table for them (the run it interrupted is left out: its results are partial).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed.analysis.fidelity import verdict_problem
from testbed.config.models import ConfigError
from testbed.machine.owner import make_results_dir
from testbed.report.headline_text import FIGURES
from testbed.results.files import (
    SWEEP_FILE,
    SWEEP_PNG_FILE,
    SWEEP_RUNS_FILE,
    SWEEP_TABLE_CSV_FILE,
    SWEEP_TABLE_MD_FILE,
)
from testbed.run.scenario import Scenario, parse_scenario
from testbed.run.sweep import (
    RunRecord,
    Setting,
    SweepError,
    aggregate,
    apply_point,
    blame,
    flow_style,
    parse_settings,
    point_label,
    points,
    table_csv_rows,
    table_markdown,
)
from testbed.topology.validate import read_yaml

RUNS_DIR = "runs"
#: The sweep's axis over several scenario files (no scenario setting has this name).
SCENARIO_KEY = "scenario"


@dataclass
class Plan:
    """A sweep ready to run: every point's scenario, validated."""

    source: str
    settings: list[Setting]
    points: list[dict[str, Any]]
    scenarios: list[Scenario]
    repeat: int

    @property
    def keys(self) -> list[str]:
        return [s.key for s in self.settings]


def plan_sweep(scenario_paths: Sequence[Path], set_texts: list[str], repeat: int) -> Plan:
    """Read the scenarios, apply every point to each and validate it: SweepError (one line,
    naming the key) on the first point that is wrong; ConfigError when a file itself is.

    Several scenario files are one more axis, ``scenario`` (each file's ``name``), varying
    slowest: ``allreduce.yaml allreduce-incast.yaml --set mode=...`` is every mode with and
    without the incast, in one table."""
    if repeat < 1:
        raise SweepError(f"--repeat {repeat}: run each point at least once")
    if not scenario_paths:
        raise SweepError("give at least one scenario file")
    if not set_texts and len(scenario_paths) < 2:
        raise SweepError("give at least one --set KEY=V1,V2,... (or several scenario files)")
    files: dict[str, tuple[Path, dict]] = {}
    for path in scenario_paths:
        data = read_yaml(path, "scenario") or {}
        if not isinstance(data, dict):
            raise ConfigError(["the top level must be a mapping"], str(path))
        name = parse_scenario(data, str(path)).cfg.name  # the file's own mistakes, named so
        if name in files:
            raise SweepError(f"{files[name][0]} and {path} are both named {name!r}: give each "
                             "scenario its own name")
        files[name] = (path, data)
    settings = parse_settings(set_texts)
    if SCENARIO_KEY in {s.key for s in settings}:
        raise SweepError(f"--set {SCENARIO_KEY}: the scenario axis is the files given; name "
                         "several scenario files instead")
    if len(files) > 1:
        settings = [Setting(SCENARIO_KEY, list(files)), *settings]
    pts, scenarios = points(settings), []
    for point in pts:
        path, data = files[point.get(SCENARIO_KEY, next(iter(files)))]
        applied = {k: v for k, v in point.items() if k != SCENARIO_KEY}
        try:
            scenarios.append(parse_scenario(apply_point(data, applied), f"{path} with "
                                            f"{point_label(applied)}" if applied else str(path)))
        except ConfigError as exc:
            where = f"{path}: " if len(files) > 1 else ""
            raise SweepError(where + blame(applied, exc.problems)) from None
    return Plan(", ".join(str(p) for p in scenario_paths), settings, pts, scenarios, repeat)


def default_out(results_root: Path, name: str) -> Path:
    return results_root / f"sweep-{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def check_out(out: Path) -> None:
    from testbed.run.lifecycle import out_problem

    problem = out_problem(out)
    if problem:
        raise SweepError(problem)


RunFn = Callable[[Scenario, Path, Callable[[str], None]], Any]


def run_sweep(plan: Plan, out: Path, run: RunFn, progress: Callable[[str], None] = print
              ) -> list[RunRecord]:
    """Run every point ``plan.repeat`` times with ``run`` (testbed.run.scenario.run_scenario: it
    returns an object with ``results_dir`` and ``summary``), then write the table. On Ctrl-C
    the table is written for the runs finished, then KeyboardInterrupt goes on up."""
    make_results_dir(out)
    records: list[RunRecord] = []
    total = len(plan.points) * plan.repeat
    try:
        for i, (point, sc) in enumerate(zip(plan.points, plan.scenarios, strict=True)):
            for rep in range(1, plan.repeat + 1):
                n = i * plan.repeat + rep
                progress(f"run {n}/{total}: point {i + 1} ({point_label(point)}), "
                         f"repeat {rep}")
                res = run(sc, out / RUNS_DIR / f"p{i + 1:02d}-r{rep}", progress)
                headline = res.summary.get("headline") or {}
                problem = verdict_problem(res.summary.get("fidelity"))
                if problem:
                    progress(f"run {n}/{total} is not a faithful emulation: {problem}")
                records.append(RunRecord(i, rep, str(Path(res.results_dir).relative_to(out)),
                                         headline, problem is None))
                write_sweep(plan, out, records, interrupted=False)
    except KeyboardInterrupt:
        write_sweep(plan, out, records, interrupted=True)
        raise
    return records


def write_sweep(plan: Plan, out: Path, records: list[RunRecord], interrupted: bool) -> None:
    """sweep.json, table.csv, table.md, runs.csv and sweep.png for the runs so far."""
    (out / SWEEP_FILE).write_text(json.dumps({
        "scenario": plan.source, "repeat": plan.repeat, "interrupted": interrupted,
        "settings": [asdict(s) for s in plan.settings], "points": plan.points,
        "runs": [{"point": r.point + 1, "repeat": r.repeat, "label": point_label(
            plan.points[r.point]), "run_dir": r.run_dir, "faithful": r.faithful}
            for r in records]},
        indent=2, default=str))
    rows = aggregate(plan.points, records)
    with open(out / SWEEP_TABLE_CSV_FILE, "w", newline="") as fh:
        csv.writer(fh).writerows(table_csv_rows(rows, plan.keys))
    title = f"# Sweep of {plan.source}" + (" (interrupted)" if interrupted else "")
    (out / SWEEP_TABLE_MD_FILE).write_text("\n".join([
        title, "", f"{len(records)} runs; each figure is the median of a point's runs, "
        "[min, max] when they differ (docs/RESULTS.md says what each is); `faithful`: how many "
        "of them the fidelity guard passed (a figure of a run that was not is no figure).", "",
        *table_markdown(rows, plan.keys), "", "![sweep](sweep.png)", ""]))
    with open(out / SWEEP_RUNS_FILE, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["point", "repeat", "settings", "run_dir", "faithful",
                    *(k for k, _ in FIGURES)])
        for r in records:
            w.writerow([r.point + 1, r.repeat, point_label(plan.points[r.point]), r.run_dir,
                        "" if r.faithful is None else int(r.faithful),
                        *("" if r.headline.get(k) is None else r.headline[k]
                          for k, _ in FIGURES)])
    if rows:
        from testbed.report.experiment_plots import plot_sweep

        ticks = [flow_style(r["settings"][plan.keys[0]]) if len(plan.keys) == 1
                 else point_label(r["settings"]) for r in rows]
        plot_sweep(rows, plan.keys, ticks, out / SWEEP_PNG_FILE)
