"""`testbed calibrate`: the per-unit costs from its two windows (pure), and on real BMv2 the
command that measures this machine and writes a profile a run then reads."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.run.calibrate import Window, costs, median_costs

REPO = Path(__file__).resolve().parent.parent


def test_costs_from_an_idle_and_a_loaded_window() -> None:
    """Idle 2 s: the leaf 0.02 s of CPU (1%), both switches 0.04 s, both endpoints 0.02 s.
    Loaded 5 s with 3,000 frames: the leaf 0.65 s, less 5 s x 1% idle = 0.6 s over 3,000 passes,
    200 us a pass; the endpoints 0.65 s less 0.05 s idle over 2 x 3,000 handlings, 100 us a
    frame; the agents 0.1 s over 500 wake-ups, 200 us each, 50 a second for each of 2."""
    idle = Window(2.0, 0.02, 0.04, 0.02, 0.01, 100)
    load = Window(5.0, 0.65, 0.70, 0.65, 0.1, 500, frames=3000)
    c = costs(idle, load, n_switches=2, n_endpoints=2, n_agents=2)
    assert c == pytest.approx({"us_per_pass": 200.0, "bmv2_idle_cores": 0.01,
                               "endpoint_us_per_frame": 100.0,
                               "endpoint_us_per_frame_per_qp": 0.0, "endpoint_idle_cores": 0.005,
                               "agent_us_per_wakeup": 200.0, "agent_wakeups_per_s": 50.0})
    with pytest.raises(ValueError, match="carried no frames"):
        costs(idle, Window(5.0, 0.1, 0.1, 0.1, 0.1, 10), 2, 2, 2)


def test_each_further_qp_adds_to_the_cpu_a_frame() -> None:
    """The same 3,000 frames over WIDE_QPS (8) QPs cost the endpoints 0.86 s: less 0.05 s idle,
    0.81 s over 6,000 handlings is 135 us a frame, 35 us more than one QP's 100, so 5 us for
    each of the 7 further QPs. A wide window that cost less than the single QP's is not a
    negative cost."""
    idle = Window(2.0, 0.02, 0.04, 0.02, 0.01, 100)
    load = Window(5.0, 0.65, 0.70, 0.65, 0.1, 500, frames=3000)
    wide = Window(5.0, 0.65, 0.70, 0.86, 0.1, 500, frames=3000)
    c = costs(idle, load, 2, 2, 2, wide=wide)
    assert c["endpoint_us_per_frame"] == pytest.approx(100.0)
    assert c["endpoint_us_per_frame_per_qp"] == pytest.approx(5.0)
    cheaper = Window(5.0, 0.65, 0.70, 0.60, 0.1, 500, frames=3000)
    assert costs(idle, load, 2, 2, 2, wide=cheaper)["endpoint_us_per_frame_per_qp"] == 0.0
    with pytest.raises(ValueError, match="carried no frames"):
        costs(idle, load, 2, 2, 2, wide=Window(5.0, 0.1, 0.1, 0.1, 0.1, 10))


def test_each_figure_is_the_median_of_the_rounds() -> None:
    rounds = [{"us_per_pass": 158.0, "endpoint_us_per_frame": 100.0},
              {"us_per_pass": 206.0, "endpoint_us_per_frame": 67.0},
              {"us_per_pass": 190.0, "endpoint_us_per_frame": 81.0}]
    assert median_costs(rounds) == {"us_per_pass": 190.0, "endpoint_us_per_frame": 81.0}


@pytest.mark.bmv2
@pytest.mark.root
def test_calibrate_writes_a_sane_profile_that_doctor_and_runs_read(tmp_path: Path) -> None:
    folder = tmp_path / "lib"
    path = folder / "calibration.json"
    # a terminal wide enough that no cell of doctor's table wraps (an optional check's fix, on a
    # machine without sch_netem, is a long line; a wrapped cell splits the words asserted below)
    env = {**os.environ, "ROCE_TESTBED_CALIBRATION": str(path), "PYTHONPATH": str(REPO),
           "COLUMNS": "2000"}
    testbed = [sys.executable, "-m", "testbed.cli"]
    # a profile an older testbed wrote: calibrating is its fix, so it is replaced, not refused
    folder.mkdir(mode=0o755)
    path.write_text(json.dumps({"version": 1, "measured_at": "2026-12-03T00:00:00+00:00"}))
    path.chmod(0o644)
    r = subprocess.run([*testbed, "calibrate"], capture_output=True, text=True, env=env,
                       timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    said = " ".join((r.stdout + r.stderr).split())  # the testbed says its lines on stderr
    assert "a profile of version 1" in said and "replacing it" in said
    assert "calibrated:" in said and str(path) in said
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    p = json.loads(path.read_text())
    assert p["cores"] == len(os.sched_getaffinity(0))
    (build, cost), = p["builds"].items()
    assert build in ("default", "fast")
    # sane: a packet pass costs BMv2 between 1 us and 10 ms of CPU, a frame an endpoint
    # between 1 us and 10 ms, a wake-up an agent between 1 us and 10 ms
    assert 1 < cost["us_per_pass"] < 10_000, p
    assert 1 < p["endpoint_us_per_frame"] < 10_000, p
    assert 0 <= p["endpoint_us_per_frame_per_qp"] < p["endpoint_us_per_frame"], p
    assert 1 < p["agent_us_per_wakeup"] < 10_000, p
    assert 0 <= cost["idle_cores"] < 1 and 0 <= p["endpoint_idle_cores"] < 1
    doctor = subprocess.run([*testbed, "doctor"], capture_output=True, text=True, env=env,
                            timeout=120, cwd=REPO)
    assert f"{cost['us_per_pass']:.0f} us a packet pass" in " ".join(doctor.stdout.split())
    from testbed.run.scenario import load_scenario
    from testbed.run.scenario_run import budget_verdict

    os.environ["ROCE_TESTBED_CALIBRATION"] = str(path)
    try:
        v = budget_verdict(load_scenario(REPO / "scenarios" / "incast.yaml"))
    finally:
        del os.environ["ROCE_TESTBED_CALIBRATION"]
    assert v.status in ("fits", "over") and v.demand is not None and v.demand.total > 0
