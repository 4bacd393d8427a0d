"""Whether what a state record names is the run's own, before `testbed clean` or `down` acts
on it. A record is a list of candidates, never an order: a process is killed only if it is
still one the testbed started, an interface deleted only if the topology's naming and kind
say it is the run's, a file deleted only if it lies in the run's own folder. Pure: the facts
about each candidate are read by testbed.machine.state (docs/THREAT_MODEL.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from traffic.names import is_name

#: Seconds of slack between a process's start time (kernel clock ticks, read through psutil)
#: and the run's wall-clock start.
START_SLACK_S = 1.0


@dataclass(frozen=True)
class ProcFacts:
    """What /proc says about a live process."""

    uid: int  # its real user
    started: float  # wall-clock start time
    cmdline: str
    netns: int | None


@dataclass(frozen=True)
class RunFacts:
    """What a run's own processes must share: who runs the testbed, when the run began, the
    namespaces its nodes' shells were recorded in and the machine's own namespace."""

    uid: int
    started: float
    node_netns: frozenset[int]
    root_netns: int | None


def process_problem(pid: int, match: str, netns: int | None, facts: ProcFacts | None,
                    run: RunFacts) -> str | None:
    """Why process ``pid`` of a record is not one the run started (None if it is): gone,
    another user's, started before the run, another command line, or another namespace than
    its node's (a node's shell) or than the run's nodes and the machine's (anything else)."""
    if facts is None:
        return f"process {pid}: gone"
    if facts.uid != run.uid:
        return f"process {pid}: runs as uid {facts.uid}, not as the testbed (uid {run.uid})"
    if facts.started < run.started - START_SLACK_S:
        return f"process {pid}: started before the run did"
    if not match or match not in facts.cmdline:
        return f"process {pid}: its command line does not contain {match!r}"
    allowed = {netns} if match.startswith("mininet:") else run.node_netns | {run.root_netns}
    if facts.netns is None or facts.netns not in allowed:
        return f"process {pid}: not in a network namespace of the run"
    return None


def interface_problem(intf: str, nodes: set[str], kinds: dict[str, str]) -> str | None:
    """Why interface ``intf`` is not the run's (None if it is): its name is not a node's of
    the run (Mininet names a node's interfaces ``<node>-...``), or it is not a veth
    (``kinds``: the machine's interfaces and their kinds)."""
    node, sep, rest = intf.partition("-")
    if not (sep and rest and node in nodes and is_name(node)):
        return f"interface {intf!r}: not named after a node of the run"
    if intf not in kinds:
        return None  # already gone: nothing to do, nothing to report
    if kinds[intf] != "veth":
        return f"interface {intf!r}: a {kinds[intf] or 'physical'} interface, not a veth"
    return None


def file_problem(path: str, run_dir: Path) -> str | None:
    """Why ``path`` is not a file the run may delete (None if it is): anything but a plain
    name directly inside the run's own runtime folder."""
    p = Path(path)
    if p.parent != run_dir or p.name in ("", ".", "..") or "/" in p.name:
        return f"file {path!r}: not inside the run's folder {run_dir}"
    return None
