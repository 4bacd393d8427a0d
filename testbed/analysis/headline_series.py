"""Time series of a run for overlaid plots (``testbed compare``): each flow's goodput and the
fabric's PFC frames, on a clock that starts when the run's senders start, so that runs line up.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from testbed.results.endpoints import read_qp_series
from testbed.results.files import SCENARIO_FILE
from testbed.results.telemetry import TelemetryRow, run_telemetry
from traffic.flows import FlowSpec, assign_qps


def run_start(summary: dict) -> float:
    """When the senders started, on the run's clock (0 if the timeline does not say)."""
    return next((float(e["t_s"]) for e in summary.get("timeline", [])
                 if e["event"] == "start"), 0.0)


def flow_goodput(run_dir: Path, summary: dict) -> dict[str, list[tuple[float, float]]]:
    """Per flow: (seconds since the senders started, Mbit/s its responders accepted over the
    endpoint's last sample period), summed over the flow's QPs."""
    scenario = json.loads((Path(run_dir) / SCENARIO_FILE).read_text())
    specs = [FlowSpec.model_validate(f) for f in scenario.get("flows", [])]
    t0 = run_start(summary)
    qps = assign_qps(specs)
    out = {}
    for spec in specs:
        mine = {a.responder_qpn for a in qps[spec.name]}
        by_t: dict[float, float] = defaultdict(float)
        for r in read_qp_series(run_dir, spec.dst):
            if r.qpn in mine:
                by_t[r.t_s] += r.goodput_bps
        out[spec.name] = [(round(t - t0, 4), v / 1e6) for t, v in sorted(by_t.items())]
    return out


def pfc_frames(rows: list[TelemetryRow], t0: float = 0.0) -> list[tuple[float, int]]:
    """PFC frames the switches had received so far, over the fabric, at every sample time of
    any switch (each switch counted at its own latest sample); time since ``t0``."""
    per_switch: dict[str, dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        per_switch[r.switch][r.t_s] += r.pfc_rx
    events = sorted((t, sw, v) for sw, by_t in per_switch.items() for t, v in by_t.items())
    latest: dict[str, int] = {}
    out = []
    for t, sw, v in events:
        latest[sw] = v
        total = sum(latest.values())
        if out and out[-1][0] == round(t - t0, 4):
            out[-1] = (out[-1][0], total)
        else:
            out.append((round(t - t0, 4), total))
    return out


def run_pfc_frames(run_dir: Path, summary: dict) -> list[tuple[float, int]]:
    return pfc_frames(run_telemetry(run_dir), run_start(summary))
