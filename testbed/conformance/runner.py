"""Running a selection of cases into one conformance folder: each case's scenario through
:func:`testbed.run.scenario_run.run_scenario` into ``cases/<plan>.<case>/``, its checks over
the run's summary, and the JUnit, Markdown and JSON files (names in
:mod:`testbed.results.files`). :func:`evaluate` and :func:`with_fabric` are pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.config.base import ConfigError
from testbed.conformance.plans import Case
from testbed.conformance.report import FAIL, NA, PASS, ResultRow, junit_xml, line, markdown
from testbed.results.files import (
    CONFORMANCE_CASES_DIR,
    CONFORMANCE_JSON_FILE,
    CONFORMANCE_JUNIT_FILE,
    CONFORMANCE_MD_FILE,
)
from testbed.topology.validate import read_yaml

#: The sections a --fabric file may set: the fabric's shape and its switches, never what a case
#: tests (qos, agent, flows, faults, endpoints belong to the case).
FABRIC_SECTIONS = ("fabric", "ecmp", "switch", "fidelity")


def read_fabric(path: Path) -> dict[str, Any]:
    """The --fabric file's sections; ConfigError (one line each) for a missing file, a file
    that is not a mapping, or a section a case owns."""
    data = read_yaml(path, "fabric")
    if not isinstance(data, dict):
        raise ConfigError(["must be a mapping of config sections, e.g. fabric: {spines: 2, "
                           "leaves: 4, hosts_per_leaf: 2}"], str(path))
    bad = sorted(set(data) - set(FABRIC_SECTIONS) - {"name"})
    if bad:
        raise ConfigError([f"{k}: a case sets this itself; a --fabric file may set only "
                           f"{', '.join(FABRIC_SECTIONS)}" for k in bad], str(path))
    return {k: v for k, v in data.items() if k != "name"}


def with_fabric(case: Case, fabric: dict[str, Any]) -> dict[str, Any]:
    """The case's scenario with the --fabric sections laid over its own (section by section)."""
    sc = dict(case.scenario)
    for k, v in fabric.items():
        sc[k] = {**(sc.get(k) or {}), **v} if isinstance(v, dict) else v
    return sc


def na_reason(case: Case, fabric: dict[str, Any]) -> str | None:
    """Why ``case`` is not applicable on the fabric (its ``na``, or what the shape the
    --fabric sections give it lacks), or None: it runs."""
    if case.na is not None:
        return case.na
    unfit = case.unfit(with_fabric(case, fabric).get("fabric") or {})
    return None if unfit is None else f"on this fabric: {unfit}"


def evaluate(case: Case, summary: dict[str, Any], run_dir: str = "") -> list[ResultRow]:
    """Each expected result of ``case`` judged on a run's summary."""
    rows = []
    for name, fn in case.checks:
        o = fn(summary)
        rows.append(ResultRow(case.plan, case.id, case.title, name, PASS if o.ok else FAIL,
                              o.measured, o.bound, run_dir))
    return rows


def not_applicable(case: Case, reason: str) -> ResultRow:
    return ResultRow(case.plan, case.id, case.title, "", NA, reason, "")


def failed_run(case: Case, why: str, run_dir: str = "") -> list[ResultRow]:
    """Every expected result of a case whose run did not finish: failed, with why."""
    return [ResultRow(case.plan, case.id, case.title, name, FAIL, f"the run failed: {why}", "",
                      run_dir) for name, _fn in case.checks]


def write_results(out: Path, rows: list[ResultRow], cases: list[Case], fabric: str) -> None:
    """The folder's JUnit, Markdown and JSON files."""
    na = {f"{r.plan}.{r.case}" for r in rows if r.status == NA}
    scaling = {k.key: k.scaling for k in cases if k.na is None and k.key not in na}
    (out / CONFORMANCE_JUNIT_FILE).write_text(junit_xml(rows))
    (out / CONFORMANCE_MD_FILE).write_text(markdown(rows, scaling, fabric))
    (out / CONFORMANCE_JSON_FILE).write_text(json.dumps(
        {"fabric": fabric, "scaling": scaling, "results": [r.__dict__ for r in rows]}, indent=2))


def run_cases(cases: list[Case], out: Path, fabric: dict[str, Any],
              say: Callable[[str], None] = print,
              progress: Callable[[str], None] = lambda _m: None) -> list[ResultRow]:
    """Run every applicable case on the fabric, one at a time, printing each result's line as
    it is judged; write the folder's files after each case, so an interrupted run keeps what
    it had."""
    from testbed.run.scenario import parse_scenario
    from testbed.run.scenario_run import RunFailed, budget_verdict, run_scenario

    rows: list[ResultRow] = []
    fabric_text = json.dumps(fabric) if fabric else "each case's own (2 spines, 2 leaves, 2 hosts)"
    (out / CONFORMANCE_CASES_DIR).mkdir(parents=True, exist_ok=True)
    for case in cases:
        why = na_reason(case, fabric)
        if why is not None:
            new = [not_applicable(case, why)]
        else:
            try:
                sc = parse_scenario(with_fabric(case, fabric), case.key)
            except ConfigError as exc:
                new = [not_applicable(case, f"does not fit this fabric: {exc}")]
            else:
                run_dir = out / CONFORMANCE_CASES_DIR / case.key
                say(f"--- {case.key} {case.title} (scaling: {case.scaling})")
                try:
                    res = run_scenario(sc, out / CONFORMANCE_CASES_DIR, progress=progress,
                                       run_dir=run_dir, verdict=budget_verdict(sc))
                    new = evaluate(case, dict(res.summary), str(run_dir.relative_to(out)))
                except RunFailed as exc:
                    new = failed_run(case, str(exc), str(run_dir.relative_to(out)))
        for r in new:
            say(line(r))
        rows += new
        write_results(out, rows, cases, fabric_text)
    return rows
