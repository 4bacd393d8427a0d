"""The fidelity guard: each check flags what it must, the figures come from a results folder,
and a run whose condition is forced says so in the summary, the CLI and the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.analysis import fidelity_figures
from testbed.cpuload import busy_shares, read_jiffies
from testbed.fidelity import Budgets, Figures, assess, lines, longest_run
from testbed.results import (
    CpuRow,
    EventRow,
    TelemetryRow,
    cpu_writer,
    events_writer,
    telemetry_writer,
)

REPO = Path(__file__).resolve().parent.parent
BUDGET = Budgets(headroom_bytes=40_000, reaction_us=20_000, bmv2_lag_us=50_000,
                 cpu_saturated_s=1.0)
GOOD = Figures(pfc_enabled=True, lossless_drops=0, hidden_loss=0, host_loss=0,
               phantom_below_bytes=3000,
               buffer_exceeded_bytes=0, bmv2_lag_us=5000, agent_reaction_us=900,
               cpu_saturated_s=0.2)


def test_a_faithful_run_passes_every_check() -> None:
    v = assess(GOOD, BUDGET)
    assert v["ok"] and v["reasons"] == []
    assert {c["name"] for c in v["checks"]} == {
        "lossless_drops", "hidden_loss", "host_loss", "buffer_exceeded", "phantom_below",
        "bmv2_lag", "agent_reaction", "cpu_saturated"}
    assert lines(v)[0].startswith("FIDELITY OK")


@pytest.mark.parametrize(("field", "value", "words"), [
    ("lossless_drops", 3, "3 packets dropped in a lossless class"),
    ("hidden_loss", 12, "12 frames lost in front of BMv2"),
    ("host_loss", 4, "4 frames lost at the hosts' own sockets"),
    ("phantom_below_bytes", 40_001, "40001 bytes below the real occupancy"),
    ("buffer_exceeded_bytes", 5000, "held 5000 bytes beyond its buffer"),
    ("bmv2_lag_us", 50_001, "BMv2 held a lossless packet 50001 us"),
    ("agent_reaction_us", 20_001, "took 20001 us to apply a PFC pause"),
    ("cpu_saturated_s", 1.5, "busy for 1.5 s at a stretch"),
])
def test_each_check_flags_its_condition(field: str, value: float, words: str) -> None:
    v = assess(Figures(**{**GOOD.__dict__, field: value}), BUDGET)
    assert not v["ok"]
    assert len(v["reasons"]) == 1 and words in v["reasons"][0], v["reasons"]
    text = lines(v)
    assert text[0].startswith("FIDELITY NOT OK") and words in text[1]


def test_lossless_checks_only_with_pfc_and_unmeasured_figures_are_not_judged() -> None:
    lossy = Figures(pfc_enabled=False, lossless_drops=500, hidden_loss=0, bmv2_lag_us=99_000)
    v = assess(lossy, BUDGET)
    assert v["ok"] and [c["name"] for c in v["checks"]] == ["hidden_loss"]  # host_loss unknown
    assert assess(Figures(pfc_enabled=True), BUDGET)["checks"] == []


def test_longest_saturated_stretch() -> None:
    s = [(0.0, 50), (0.2, 99), (0.4, 100), (0.6, 97), (0.8, 40), (1.0, 96), (1.2, 99)]
    assert longest_run(s, 95) == 0.4
    assert longest_run(s, 101) == 0.0
    assert longest_run([], 95) == 0.0


def test_cpu_shares_from_proc_stat() -> None:
    a = "cpu  1 2 3 4\ncpu0 100 0 100 800 0 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 0 0 0 0\nintr 5\n"
    b = "cpu  1 2 3 4\ncpu0 150 0 150 800 0 0 0 0 0 0\ncpu1 0 0 50 1050 0 0 0 0 0 0\nintr 9\n"
    ja, jb = read_jiffies(a), read_jiffies(b)
    assert ja == [(200, 1000), (0, 1000)]
    assert busy_shares(ja, jb) == [100.0, 50.0]
    assert read_jiffies(Path("/proc/stat").read_text())  # this machine's format parses


def _sample(t_s: float, tc: int, drops: int, **lossless: int) -> TelemetryRow:
    return TelemetryRow(t_s, "leaf1", 1, tc, backlog_bytes=0, backlog_packets=0, drops=drops,
                        sent_bytes=0, sent_packets=0, paused=False, pfc_rx=0, paused_s=0.0,
                        **lossless)


def test_figures_come_from_the_results_folder(tmp_path: Path) -> None:
    tel = tmp_path / "telemetry"
    tel.mkdir()
    with telemetry_writer(tel, "leaf1") as w:
        for row in [_sample(1.0, 3, 0, phantom_below_max_bytes=700,
                            occupancy_max_bytes=150_000, bmv2_lag_max_us=3000),
                    _sample(1.1, 3, 2, phantom_below_max_bytes=4200,
                            occupancy_max_bytes=90_000, bmv2_lag_max_us=9000),
                    _sample(1.1, 0, 50, bmv2_lag_max_us=9000),
                    # a queue the watchdog cut off with its drop action: its drops are its own
                    replace(_sample(1.1, 3, 40), port=2)]:
            w.write(row)
    with events_writer(tel, "leaf1") as w:
        for t, what, quanta, us in [(1.0, "pause", 65535, 800), (1.2, "resume", 0, 1900),
                                    (1.3, "pause", 65535, 1200)]:
            w.write(EventRow(t, "leaf1", 1, 3, what, quanta, us))
        w.write(EventRow(1.05, "leaf1", 2, 3, "storm_detected", 0, None,
                         "action=drop backlog_packets=30"))
    with cpu_writer(tel / "cpu.csv") as w:
        for t in range(5):
            w.write(CpuRow(t / 10, 99, 99))
    f = fidelity_figures(tmp_path, [3], cpu_busy_pct=95, hidden_loss=0,
                         buffers={("leaf1", 1, 3): 140_000}, host_loss=3)
    assert f == Figures(pfc_enabled=True, lossless_drops=2, hidden_loss=0, host_loss=3,
                        phantom_below_bytes=4200, buffer_exceeded_bytes=10_000, bmv2_lag_us=9000,
                        agent_reaction_us=1200, cpu_saturated_s=0.4)


SCENARIO = """
name: fidelity-forced
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 1}
qos: {pfc_enable: [3], ecn: {}}
fidelity: {cpu_saturated_s: %s}
endpoints: {dcqcn: false}
duration_s: 4
settle_s: 0.5
flows:
  - {name: a, src: h1, dst: h2, qps: 1, message_bytes: 16384, count: 20}
"""

HOG = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


def _testbed_run(tmp_path: Path, limit: str, hogs: int) -> tuple[subprocess.CompletedProcess,
                                                               dict, str]:
    sc = tmp_path / "sc.yaml"
    sc.write_text(SCENARIO % limit)
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    try:
        r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(sc), "--results",
                            str(tmp_path / "results")], capture_output=True, text=True,
                           timeout=180, cwd=REPO, env={**os.environ, "COLUMNS": "200"})
    finally:
        for p in procs:
            p.kill()
    run_dir = next((tmp_path / "results").iterdir())
    return r, json.loads((run_dir / "summary.json").read_text()), \
        (run_dir / "report.md").read_text()


@pytest.mark.bmv2
def test_a_run_on_saturated_cores_is_flagged_everywhere(tmp_path: Path) -> None:
    """Two busy loops saturate both cores for the whole run; with a 0.3 s limit the guard must
    flag it in summary.json, in what `testbed run` prints, and at the top of report.md."""
    r, summary, report = _testbed_run(tmp_path, "0.3", hogs=os.cpu_count() or 2)
    assert r.returncode == 0, r.stderr[-2000:]
    fid = summary["fidelity"]
    assert fid["ok"] is False, fid
    assert any("every CPU core was busy" in x for x in fid["reasons"]), fid
    assert "FIDELITY NOT OK" in r.stderr and "every CPU core was busy" in r.stderr
    head = report.splitlines()[:4]
    assert any("FIDELITY NOT OK" in ln for ln in head), head


@pytest.mark.bmv2
def test_a_light_run_on_an_idle_machine_is_faithful(tmp_path: Path) -> None:
    r, summary, report = _testbed_run(tmp_path, "1.0", hogs=0)
    assert r.returncode == 0, r.stderr[-2000:]
    assert summary["fidelity"]["ok"] is True, summary["fidelity"]["reasons"]
    assert "FIDELITY OK" in r.stderr and "FIDELITY OK" in report
