"""Grading a lab: every check its lab.yaml names, run on the student's folder and the newest
run of each scenario in the results folder, one :class:`Line` per question."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.config.models import ConfigError
from testbed.labs import checks_fabric, checks_pfc, checks_traffic  # noqa: F401 (registers)
from testbed.labs.catalog import CheckSpec, Lab
from testbed.labs.evidence import MissingRun, newest_by_name, runs_under
from testbed.labs.verdict import CHECKS, Context, Verdict


@dataclass(frozen=True)
class Line:
    spec: CheckSpec
    verdict: Verdict


def unknown_checks(lab: Lab) -> list[str]:
    return [c.check for c in lab.spec.checks if c.check not in CHECKS]


def _one(ctx: Context, spec: CheckSpec) -> Verdict:
    fn = CHECKS.get(spec.check)
    if fn is None:
        return Verdict(False, f"lab.yaml names a check that does not exist: {spec.check}",
                       "this copy of the labs is newer than the testbed: update it")
    try:
        run = ctx.run(spec.run) if spec.run else None
        if run is not None and (problem := run.not_faithful()) is not None:
            return Verdict(False, f"not graded: run {spec.run} is not a faithful emulation "
                           f"({problem[:200]})",
                           f"run it again on a quieter machine (close other programs): "
                           f"{_where(ctx)}sudo testbed run {_file_of(ctx, spec.run)}",
                           "a grade rests only on a run the fidelity guard called faithful")
        v = fn(ctx, run, **spec.args)
    except MissingRun as exc:
        return Verdict(False, f"no run of scenario {exc.args[0]} in the results folder",
                       f"run it: {_where(ctx)}sudo testbed run {_file_of(ctx, exc.args[0])}")
    except (ConfigError, KeyError, ValueError) as exc:
        return Verdict(False, f"cannot grade: {exc}", "see the lab sheet's steps")
    return v


def _where(ctx: Context) -> str:
    """Where to run a scenario so that its results land in the folder the checker reads."""
    here = ctx.folder.resolve() == Path.cwd().resolve()
    return "" if here else f"cd {ctx.folder} && "


def _file_of(ctx: Context, scenario: str) -> str:
    """The student's file whose `name:` is ``scenario`` (for the hint), else a placeholder."""
    for p in sorted(ctx.folder.glob("*.yaml")):
        try:
            if f"name: {scenario}\n" in p.read_text():
                return p.name
        except OSError:
            continue
    return f"<the {scenario} scenario>.yaml"


def grade(lab: Lab, folder: Path, results: Path) -> list[Line]:
    """Every question of the lab, graded."""
    ctx = Context(folder, newest_by_name(runs_under(results)), lab.path)
    return [Line(spec, _one(ctx, spec)) for spec in lab.spec.checks]
