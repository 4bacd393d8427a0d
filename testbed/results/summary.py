"""A scenario run's ``summary.json`` (:data:`~testbed.results.files.SUMMARY_FILE`) as a typed
dictionary, and its one reader; the fabric's ``telemetry/summary.json``
(:data:`~testbed.results.files.FABRIC_SUMMARY_FILE`) read the same way.

The summary is written as plain JSON by several parts in turn (testbed.run.scenario_run: the
flows, drops, timeline, budget and deadlock; the fabric's summary: the fidelity verdict and the
agents; testbed.analysis.headline: the headline), so it is typed as a ``TypedDict``: the same
dict at run time, with each key's type for the reader and the type checker. Nested sections
that have their own owners (``fidelity``, ``deadlock``, ``headline``, ``budget``) stay dicts;
docs/RESULTS.md documents each. tests/test_results.py holds the keys the run writes to these.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

from testbed.results.files import FABRIC_SUMMARY_FILE, SUMMARY_FILE, TELEMETRY_DIR


class QpSummary(TypedDict):
    """One QP of a flow, from both endpoints' ``stats`` as the run ended."""

    qpn: int
    bytes_acked: int
    bytes_received: int
    packets_sent: int
    retransmitted: int
    naks: int
    timeouts: int
    cnps_received: int
    failed: bool  # out of retries: its messages were flushed, not delivered
    complete: bool


class FlowSummary(TypedDict):
    """One flow of the scenario: its ends, its QPs, and the bytes its receiver got."""

    src: str
    dst: str
    qps: list[QpSummary]
    bytes_received: int


class RunSummary(TypedDict, total=False):
    """``summary.json``: every key a scenario run may write. Not total: a run that failed part
    way writes what it had (a run stopped before its senders has no ``deadlock``)."""

    scenario: str
    duration_s: float
    flows: dict[str, FlowSummary]
    pfc_frames_sent: dict[str, int]  # per switch
    pfc_frames_by_class: dict[str, int]  # every switch's, per class ("3": n); JSON keys
    tester: dict[str, Any]  # the hosts' counters beside their ports' (testbed.analysis.tester)
    #: {"t_s", "event"} on the run's clock; a link fault adds "link", "up" and "from_s"
    timeline: list[dict[str, Any]]
    flow_errors: list[str]
    kernel_drops_lossless: int
    hidden_loss: dict[str, int]  # per switch
    #: per background flow (testbed.fabric.background): src, dst, tc, offered_mbps,
    #: frame_bytes, sent_packets, sent_bytes, send_errors, received_packets, received_bytes,
    #: lost_packets, goodput_mbps, reordered, late_max_s, series ([t_s, Mbit/s])
    background: dict[str, dict[str, Any]]
    captures: list[str]  # pcaps, relative to the results folder
    fidelity: dict[str, Any]  # testbed.analysis.fidelity.assess
    agents: dict[str, Any]  # what the switch agents ran at
    budget: dict[str, Any]  # testbed.budget.cores.Verdict.to_dict, with "auto"
    watchdog_events: list[dict[str, Any]]  # testbed.results.telemetry.EventRow as dicts
    deadlock: dict[str, Any]  # testbed.analysis.deadlock.deadlock_summary
    headline: dict[str, Any]  # testbed.analysis.headline.compute_headline


def read_summary(run_dir: Path | str) -> RunSummary:
    """A scenario run's ``summary.json``; an error if the folder has none (a `testbed up`
    folder), which each caller checks for as it needs."""
    return json.loads((Path(run_dir) / SUMMARY_FILE).read_text())


def read_fabric_summary(run_dir: Path | str) -> dict[str, Any] | None:
    """``telemetry/summary.json``, written as every fabric stops; None if it was not."""
    path = Path(run_dir) / TELEMETRY_DIR / FABRIC_SUMMARY_FILE
    return json.loads(path.read_text()) if path.exists() else None
