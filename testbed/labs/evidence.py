"""What a student's runs show, read from their results folders (docs/RESULTS.md) with the
project's readers: the summary ``testbed run`` writes, the scenario as it was run, the
topology, the P4 counters' last sample, the agents' telemetry and the endpoints' QP series.

A lab grades the newest run of each of its scenarios (by the scenario's ``name:``), so a
student who runs a scenario again is graded on the last try.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from testbed.config.models import DEFAULT_LINK_MBPS
from testbed.results.files import (
    ENDPOINTS_DIR,
    P4_COUNTERS_FILE,
    QP_FILE,
    SCENARIO_FILE,
    SUMMARY_FILE,
    TOPOLOGY_FILE,
)
from testbed.results.summary import read_summary
from testbed.results.telemetry import TelemetryRow, last_p4_counters, run_telemetry
from traffic.wire import NUM_TCS

#: The P4 program's per-(port, class) counters (p4/egress.p4, p4/lossless.p4), as
#: p4_counters.csv names them: a cell is indexed port * NUM_TCS + class.
TX_TC = "RoceEgress.tx_port_tc"
ECN_MARKED = "RoceIngress.lossless.ecn_marked"


class MissingRun(Exception):
    """The lab needs a run that the results folder does not hold."""


@dataclass
class RunData:
    """One results folder, read lazily."""

    path: Path
    summary: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> RunData:
        return cls(path, dict(read_summary(path)))

    @property
    def name(self) -> str:
        return str(self.summary.get("scenario", ""))

    @cached_property
    def scenario(self) -> dict:
        """The scenario as it was run: ``config`` (the fabric config) and the extras."""
        p = self.path / SCENARIO_FILE
        return json.loads(p.read_text()) if p.exists() else {}

    @property
    def config(self) -> dict:
        return self.scenario.get("config", {})

    @cached_property
    def topology(self) -> dict:
        return json.loads((self.path / TOPOLOGY_FILE).read_text())

    @cached_property
    def counters(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        """Each P4 counter cell's last sample: (switch, counter, index) -> (packets, bytes)."""
        p = self.path / P4_COUNTERS_FILE
        return last_p4_counters(p) if p.exists() else {}

    def port_tc(self, switch: str, counter: str, port: int, tc: int) -> tuple[int, int]:
        """A per-(port, class) counter's last (packets, bytes)."""
        return self.counters.get((switch, counter, port * NUM_TCS + tc), (0, 0))

    @cached_property
    def telemetry(self) -> list[TelemetryRow]:
        return run_telemetry(self.path)

    def qp_series(self, host: str) -> list[dict]:
        """A host's QP time series (traffic.endpoint_telemetry.QP_COLUMNS), as dicts."""
        p = self.path / ENDPOINTS_DIR / host / QP_FILE
        if not p.exists():
            return []
        with open(p) as fh:
            return list(csv.DictReader(fh))

    # -- figures every lab reads ---------------------------------------------------------
    def flow_bytes(self) -> dict[str, int]:
        return {n: int(f.get("bytes_received", 0)) for n, f in self.summary.get("flows",
                                                                               {}).items()}

    def qps(self, flow: str | None = None) -> list[dict]:
        """The summary's per-QP figures, of one flow or all."""
        flows = self.summary.get("flows", {})
        return [q for n, f in flows.items() if flow in (None, n) for q in f.get("qps", [])]

    def host(self, name: str) -> dict:
        for h in self.topology.get("hosts", []):
            if h["name"] == name:
                return h
        raise KeyError(name)

    def host_rate_bps(self) -> float:
        return float(self.config.get("fabric", {}).get("host_link_mbps", DEFAULT_LINK_MBPS)) * 1e6

    def lossless(self) -> list[int]:
        return list(self.config.get("qos", {}).get("pfc_enable", []))

    def not_faithful(self) -> str | None:
        """Why this run cannot be graded (None: it can): its summary has no fidelity verdict,
        or the verdict is not ok. A lab's answer rests on a faithful run, never on one the
        guard flagged or could not judge."""
        from testbed.analysis.fidelity import verdict_problem

        return verdict_problem(self.summary.get("fidelity"))


def marked_fraction(run: RunData, receiver: str, tc: int) -> tuple[float, int]:
    """The fraction of class ``tc`` packets the receiver's leaf port marked, and how many it
    sent (the P4 program counts marks per egress queue)."""
    h = run.host(receiver)
    sent = run.port_tc(h["leaf"], TX_TC, h["leaf_port"], tc)[0]
    marked = run.port_tc(h["leaf"], ECN_MARKED, h["leaf_port"], tc)[0]
    return (marked / sent if sent else 0.0), sent


def uplink_bytes(run: RunData, leaf: str, tc: int) -> dict[int, int]:
    """Bytes of class ``tc`` the leaf sent up each of its uplinks (port -> bytes)."""
    ports = [p["number"] for s in run.topology.get("leaves", []) if s["name"] == leaf
             for p in s["ports"] if p["peer"].startswith("spine")]
    return {p: run.port_tc(leaf, TX_TC, p, tc)[1] for p in ports}


def runs_under(results: Path) -> list[RunData]:
    """Every finished run at ``results``: the folder itself, or the run folders in it."""
    if (results / SUMMARY_FILE).exists():
        return [RunData.load(results)]
    if not results.is_dir():
        return []
    out = []
    for p in sorted(results.iterdir()):
        if (p / SUMMARY_FILE).exists():
            try:
                out.append(RunData.load(p))
            except (OSError, json.JSONDecodeError):
                continue  # a run cut short: no summary to grade
    return out


def newest_by_name(runs: list[RunData]) -> dict[str, RunData]:
    """The newest run of each scenario name (folders are named <name>-<time>, and a later
    run of the same scenario sorts after an earlier one)."""
    out: dict[str, RunData] = {}
    for r in sorted(runs, key=lambda r: r.path.name):
        out[r.name] = r
    return out
