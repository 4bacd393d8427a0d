"""A check's verdict, what a check sees, and the registry of named checks that lab.yaml files
refer to (``check: pfc_paused``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.labs.evidence import MissingRun, RunData


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    hint: str = ""
    warning: str | None = None  # e.g. the run was not a faithful emulation


def passed(reason: str) -> Verdict:
    return Verdict(True, reason)


def failed(reason: str, hint: str) -> Verdict:
    return Verdict(False, reason, hint)


@dataclass
class Context:
    """What the checks of one lab see: the student's folder and the newest run of each
    scenario name found in the results folder."""

    folder: Path
    runs: dict[str, RunData] = field(default_factory=dict)
    lab_dir: Path | None = None  # the lab's own folder, for the files the student did not copy

    def run(self, name: str) -> RunData:
        if name not in self.runs:
            raise MissingRun(name)
        return self.runs[name]


Check = Callable[..., Verdict]
#: name -> function(ctx, run, **args) returning a Verdict; run is None for a check with no run.
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS[name] = fn
        return fn
    return register


def _sent(qps: list[dict]) -> int:
    """Data packets the flow's requesters sent, resends included (a run from before the
    summary had packets_sent: its resends alone)."""
    return sum(int(q.get("packets_sent", q.get("retransmitted", 0))) for q in qps)


def moved(run: RunData, min_fraction: float = 0.05, each: bool = True) -> Verdict | None:
    """A failure when the run's flows carried (almost) nothing: no phenomenon can be graded on
    a run without traffic. ``min_fraction``: of what the senders' links could carry.

    ``each=False`` asks it of the flows together, and of each flow only that it sent packets:
    for a lossy run, where Go-Back-N and its timeouts can starve one flow almost completely,
    and for a deadlock, which can freeze a flow before its first packet arrives; that
    starvation is part of what the run shows, not a sign that the flow never ran."""
    flows = run.flow_bytes()
    if not flows:
        return failed("the run had no flows", "add the flows the lab sheet asks for")
    dur = float(run.summary.get("duration_s", 1.0))
    floor = min_fraction * run.host_rate_bps() / 8 * dur
    if each:
        idle = [n for n, b in flows.items() if b < floor]
    else:
        idle = [n for n, b in flows.items() if b == 0 and not _sent(run.qps(n))]
        if not idle and sum(flows.values()) < floor:
            idle = list(flows)
    if idle:
        return failed(f"flow(s) {', '.join(idle)} moved almost no bytes "
                      f"({', '.join(str(flows[n]) for n in idle)})",
                      "check the flows' hosts and start times, and that the run finished "
                      "without errors (flow_errors in summary.json)")
    return None
