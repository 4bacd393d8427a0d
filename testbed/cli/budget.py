"""The budget's commands: `testbed calibrate`, and the budget line and warning that `testbed
run` prints before a run starts (or its refusal, with --strict)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from testbed.cli.output import say as _say

if TYPE_CHECKING:
    from testbed.budget.cores import Verdict


def _fail(msg: str, code: int = 2) -> None:
    _say(("error:", "red"), " ", msg)
    raise typer.Exit(code)


def _progress(msg: str) -> None:
    _say((">", "cyan"), " ", msg)


def budget_or_exit(sc, strict: bool) -> Verdict:
    """Print the run's rate, time scale and load against the budget; warn when it is over
    (refuse with --strict, which refuses an unknown budget too)."""
    from testbed.budget.cores import budget_line
    from testbed.budget.scenario import over_budget_warning, shared_lossless_ports
    from testbed.run.scenario_run import budget_verdict

    verdict = budget_verdict(sc)
    _say(("budget:", "cyan"), " ", budget_line(verdict, sc.auto))
    warning = over_budget_warning(verdict)
    if strict and verdict.status != "fits":
        _fail((warning or f"the budget is unknown ({verdict.reason})")
              + "; --strict refuses to run")
    if warning:
        _say(("warning:", "yellow"), " ", warning)
    shared = shared_lossless_ports(sc.cfg, sc.topo, sc.extras)
    if shared:
        _say(("warning:", "yellow"), " ", shared)
    return verdict


def calibrate(
    build: Annotated[str, typer.Option(
        help="The BMv2 build to measure: auto (what runs use: the fast build if installed), "
             "default or fast. Each build's figures are kept; the others stay.")] = "auto",
) -> None:
    """Measure this machine's CPU budget once (under a minute): BMv2's CPU a packet pass,
    an endpoint's a frame, an agent's a wake-up, and the cores left for them. Runs read it to
    judge their load and to choose `auto` link rates; `testbed doctor` shows it."""
    if build not in ("auto", "default", "fast"):
        _fail(f"--build {build}: use auto, default or fast")
    if os.geteuid() != 0:
        _fail("calibrating brings up a small fabric and writes a root-owned profile: run it "
              "with sudo")
    from testbed.budget.calibration_store import (
        ProfileError,
        StaleProfile,
        read_profile,
        write_profile,
    )
    from testbed.config.bmv2_build import BuildError
    from testbed.control.p4runtime import ControlPlaneError
    from testbed.fabric.bmv2 import SwitchStartError
    from testbed.fabric.network import FabricError
    from testbed.run.calibrate import measure, profile_from

    try:
        previous = read_profile()
    except StaleProfile as exc:  # what calibrating is for: measured afresh, every build
        _say(("note:", "yellow"), " ", f"{exc}; replacing it (other builds' figures too)")
        previous = None
    except ProfileError as exc:
        _fail(str(exc))
    try:
        ran, cost, c = measure(build, progress=_progress)
    except (SwitchStartError, BuildError, ControlPlaneError, FabricError, ValueError) as exc:
        _fail(str(exc), 1)
    profile = profile_from(ran, cost, c, previous)
    try:
        path = write_profile(profile)
    except ProfileError as exc:
        _fail(str(exc))
    _say(("calibrated:", "green"), " ", (
        f"{profile.cores} cores ({profile.background_cores:.2f} busy with other work); BMv2 "
        f"{ran} build {cost.us_per_pass:.0f} us a packet pass, {cost.idle_cores:.1%} of a "
        f"core idle; endpoint {profile.endpoint_us_per_frame:.0f} us a frame "
        f"(+{profile.endpoint_us_per_frame_per_qp:.1f} us each further QP), "
        f"{profile.endpoint_idle_cores:.1%} idle; agent {profile.agent_us_per_wakeup:.0f} us "
        f"a wake-up at {profile.agent_wakeups_per_s:.0f}/s; written to {path}"))
    if profile.background_cores > 0.25:
        _say(("warning:", "yellow"), " ", f"{profile.background_cores:.2f} cores were busy "
             "with other work while measuring: the figures may be high; calibrate again on a "
             "quiet machine")
