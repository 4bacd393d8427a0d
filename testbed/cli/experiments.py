"""The bodies of `testbed sweep` and `testbed compare` (testbed.cli.commands wires them): every
mistake the user can make comes back as an :class:`ExperimentError`, one line and an exit status."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from testbed.machine.owner import for_sudo_user
from testbed.machine.safepath import UnsafePath
from testbed.report.headline_text import FIGURES, fmt


class ExperimentError(Exception):
    """What to tell the user, in one line, and the exit status (2: a mistake in the command,
    1: the fabric failed)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _figures_table(title: str, labels: list[str], columns: list[list[str]]):
    """A rich table with a row per headline figure and a column per run or point."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title), title_justify="left")
    t.add_column("figure")
    for label in labels:
        t.add_column(Text(label), justify="right")
    for i, (_key, name) in enumerate(FIGURES):
        t.add_row(name, *(Text(col[i]) for col in columns))
    return t


def sweep_main(scenarios: list[Path], sets: list[str], repeat: int, out: Path | None,
               results: Path, progress: Callable[[str], None], console) -> int:
    """Validate every point, run them, write the folder; the exit status (130 on Ctrl-C)."""
    from testbed.config.models import ConfigError
    from testbed.run.sweep import SweepError, aggregate, point_label
    from testbed.run.sweep_run import check_out, default_out, plan_sweep, run_sweep

    try:
        plan = plan_sweep(scenarios, sets, repeat)
        folder = out or default_out(results, plan.scenarios[0].cfg.name)
        check_out(folder)
    except SweepError as exc:
        raise ExperimentError(str(exc)) from None
    except ConfigError as exc:
        raise ExperimentError(exc.render()) from None
    if os.geteuid() != 0:
        raise ExperimentError("the testbed needs root for namespaces and veths: run it with sudo")
    from testbed.cli.progress import RunProgress
    from testbed.control.p4runtime import ControlPlaneError
    from testbed.fabric.bmv2 import SwitchStartError
    from testbed.fabric.network import FabricError
    from testbed.run.lifecycle import interrupt_on_sigterm
    from testbed.run.scenario_run import RunFailed, run_scenario

    interrupt_on_sigterm()
    progress(f"{len(plan.points)} points x {repeat} run(s) into {folder}")
    try:
        with for_sudo_user(results, folder.parent), RunProgress(console) as live:
            records = run_sweep(plan, folder, lambda sc, d, p: run_scenario(
                sc, d, p, status=live.callback), progress)
    except (SwitchStartError, ControlPlaneError, FabricError, RunFailed, UnsafePath) as exc:
        raise ExperimentError(f"{exc} (the runs before it are in {folder})", 1) from None
    except KeyboardInterrupt:
        console.print(f"interrupted: the runs finished so far and their table are in {folder}",
                      markup=False)
        return 130
    rows = aggregate(plan.points, records)
    columns = [[("-" if r[k] is None else fmt(r[k][0]) if r[k][1] == r[k][2] else
                 f"{fmt(r[k][0])} [{fmt(r[k][1])}, {fmt(r[k][2])}]") for k, _ in FIGURES]
               for r in rows]
    console.print(_figures_table("median [min, max] per point", [
        point_label(r["settings"]) for r in rows], columns))
    console.print(f"sweep done: {len(records)} runs; table.md, table.csv, sweep.png in {folder}",
                  markup=False, highlight=False)
    return 0


def compare_main(folders: list[Path], out: Path | None, console) -> int:
    """The figures side by side; with ``out``, compare.md, compare.csv and compare.png."""
    from testbed.report.compare import CompareError, load, table, write

    try:
        views = load(folders)
    except CompareError as exc:
        raise ExperimentError(str(exc)) from None
    header, rows = table(views)
    columns = [[row[i + 1] for row in rows] for i in range(len(views))]
    t = _figures_table("comparison", header[1:], columns)
    for row in rows[len(FIGURES):]:  # the flows' goodput below the figures
        t.add_row(*row)
    console.print(t)
    if out is None:
        console.print("--out DIR also writes compare.md, compare.csv and compare.png (the "
                      "flows' goodput and PFC frames over time, overlaid)", markup=False)
        return 0
    try:
        with for_sudo_user(out.parent):
            paths = write(views, out)
    except UnsafePath as exc:
        raise ExperimentError(str(exc), 1) from None
    for path in paths:
        console.print(f"wrote {path}", markup=False, highlight=False)
    return 0
