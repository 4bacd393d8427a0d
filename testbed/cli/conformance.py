"""`testbed conformance`: SONiC's RoCEv2, PFC and PFC-watchdog test plans on the fabric
(testbed.conformance), one line per expected result, a results folder with junit.xml."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from testbed.cli.output import say
from testbed.config.base import ConfigError


def _fail(msg: str, code: int = 2) -> None:
    say(("error:", "red"), " ", msg)
    raise typer.Exit(code)


def conformance(
    plan: Annotated[str, typer.Option(help="rocev2, pfc, pfcwd or all.")] = "all",
    case: Annotated[list[str] | None, typer.Option(
        help="Run only this case (an id such as 2, or plan.id such as rocev2.2); "
             "repeatable.")] = None,
    fabric: Annotated[Path | None, typer.Option(
        help="A YAML of the fabric's sections (fabric, ecmp, switch, fidelity) laid over "
             "every case's own.")] = None,
    topology: Annotated[str | None, typer.Option(
        help="The plans' topology: 1 (one switch, four hosts) or 2 (two leaves joined by one "
             "spine, two hosts each). Default: each case's own, 2 spines, 2 leaves, 2 hosts "
             "a leaf.")] = None,
    out: Annotated[Path | None, typer.Option(
        help="The results folder (default: results/conformance-<time>); new or empty.")] = None,
    list_: Annotated[bool, typer.Option(
        "--list", help="List the selected cases and their scaling, run nothing.")] = False,
) -> None:
    """Run the test plans' cases; exit 0 only when every applicable expected result passed."""
    from testbed.conformance.plans import TOPOLOGIES, SelectionError, select
    from testbed.conformance.runner import na_reason, read_fabric, run_cases

    try:
        cases = select(plan, case)
    except SelectionError as exc:
        _fail(str(exc))
    try:
        overrides = read_fabric(fabric) if fabric is not None else {}
    except ConfigError as exc:
        _fail(f"--fabric {exc}")
    if topology is not None:
        if topology not in TOPOLOGIES:
            _fail(f"--topology {topology}: no such topology; choose {' or '.join(TOPOLOGIES)}")
        if "fabric" in overrides:
            _fail(f"--topology {topology} and --fabric's fabric section both set the fabric's "
                  "shape: give one of them")
        overrides = {"fabric": dict(TOPOLOGIES[topology]), **overrides}
    if list_:
        for k in cases:
            why = na_reason(k, overrides)
            say(f"{k.key} {k.title}: " + (f"N/A ({why})" if why else k.scaling))
        return
    folder = out or Path("results") / f"conformance-{datetime.now():%Y%m%d-%H%M%S}"
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        _fail(f"--out {folder}: already exists and is not an empty folder; give a new one")
    if os.geteuid() != 0:
        _fail("the testbed needs root for namespaces and veths: run it with sudo")
    from testbed.machine.owner import for_sudo_user
    from testbed.run.lifecycle import interrupt_on_sigterm

    interrupt_on_sigterm()
    from testbed.conformance.report import exit_status

    folder.mkdir(parents=True, exist_ok=True)
    with for_sudo_user(folder):
        rows = run_cases(cases, folder, overrides, say=lambda m: say(m))
    say(f"results: {folder}")
    raise typer.Exit(exit_status(rows))
