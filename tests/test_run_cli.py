"""`sudo testbed run` as a user sees it on real BMv2: a live line while the flows run (seconds
left, flows started and done), each fault printed as it fires, the results folder given to the
user who ran sudo, and an endpoint that dies mid-run reported in one line, with what was
measured kept and nothing left running."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from testbed.machine.owner import for_sudo_user
from testbed.run.scenario_run import RunStatus

REPO = Path(__file__).resolve().parent.parent
#: Not a user of this machine: whoever ran sudo, as SUDO_UID and SUDO_GID tell it.
USER = (4242, 4243)

SCENARIO = {
    "name": "runcli", "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "duration_s": 4, "settle_s": 1,
    "flows": [
        {"name": "a", "src": "h2", "dst": "h1", "qps": 1, "duration_s": 3, "start_s": 0.3},
        {"name": "b", "src": "h3", "dst": "h1", "qps": 1, "count": 4, "start_s": 0.5}],
    "faults": [{"at_s": 1, "link_down": ["spine1", "leaf1"]},
               {"at_s": 2, "link_up": ["spine1", "leaf1"]}],
}


def _scenario(tmp: Path) -> Path:
    f = tmp / "runcli.yaml"
    f.write_text(yaml.safe_dump(SCENARIO))
    return f


def _owners(folder: Path) -> set[tuple[int, int]]:
    return {(p.lstat().st_uid, p.lstat().st_gid) for p in [folder, *folder.rglob("*")]}


# -- without a fabric -------------------------------------------------------------------------

def test_status_line_text() -> None:
    from testbed.cli.progress import status_text

    assert status_text(RunStatus(3.04, 6.0, 3, 2, 1)) == (
        "3.0 s of 6 s, 3.0 s left", "flows: 2 of 3 started, 1 done")
    assert status_text(RunStatus(6.3, 6.0, 3, 3, 3))[0] == "6.3 s of 6 s, 0.0 s left"


@pytest.mark.root
def test_what_a_command_creates_goes_to_the_sudo_user(tmp_path: Path, monkeypatch) -> None:
    """New folders and new entries of an existing folder change hands; what was there before,
    and a new entry that another user made meanwhile, do not."""
    monkeypatch.setenv("SUDO_UID", str(USER[0]))
    monkeypatch.setenv("SUDO_GID", str(USER[1]))
    old = tmp_path / "results" / "old-run"
    old.mkdir(parents=True)
    with for_sudo_user(tmp_path / "results", tmp_path / "new"):
        (tmp_path / "results" / "run-1" / "telemetry").mkdir(parents=True)
        (tmp_path / "results" / "run-1" / "telemetry" / "x.csv").write_text("t\n")
        (tmp_path / "new" / "a").mkdir(parents=True)
        other = tmp_path / "results" / "someone-elses"
        other.write_text("")
        os.chown(other, 1000, 1000)
    assert _owners(tmp_path / "results" / "run-1") == {USER}
    assert _owners(tmp_path / "new") == {USER}
    assert _owners(old) == {(0, 0)} and (tmp_path / "results").stat().st_uid == 0
    assert other.stat().st_uid == 1000


def test_without_sudo_nothing_changes_hands(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SUDO_UID", raising=False)
    with for_sudo_user(tmp_path):
        (tmp_path / "f").write_text("")
    assert (tmp_path / "f").stat().st_uid == os.geteuid()


# -- on real switches -------------------------------------------------------------------------

@pytest.mark.bmv2
@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a terminal")
def test_run_shows_its_progress_and_gives_the_results_to_the_user(tmp_path: Path) -> None:
    """In a terminal (script(1) gives the command one), as `sudo testbed run` would be."""
    from testbed.budget.calibration_store import write_profile
    from tests.test_budget import profile

    results = tmp_path / "results"
    calibration = write_profile(profile(), tmp_path / "lib" / "calibration.json")
    cmd = f"{sys.executable} -m testbed.cli run {_scenario(tmp_path)} --results {results}"
    env = {**os.environ, "SUDO_UID": str(USER[0]), "SUDO_GID": str(USER[1]),
           "COLUMNS": "120", "ROCE_TESTBED_CALIBRATION": str(calibration)}
    r = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=180)
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", r.stdout)  # colours and cursor moves
    assert r.returncode == 0, out[-2000:]
    # the live line, while the flows run: seconds left, then the count-message flow done
    assert re.search(r"\d\.\d s of 4 s, \d\.\d s left", out), out[-2000:]
    assert "flows: 2 of 2 started" in out
    assert re.search(r"flows: 2 of 2 started, [12] done", out)
    # each fault as it fires, on its own line, at its time
    assert re.search(r"> 1\.\d s: link spine1-leaf1 down", out), out[-2000:]
    assert re.search(r"> 2\.\d s: link spine1-leaf1 up", out)
    (run_dir,) = results.iterdir()
    assert (run_dir / "summary.json").is_file() and (run_dir / "report.html").is_file()
    assert _owners(results) == {USER}, "the results belong to the user who ran sudo"
    # the rate, the time scale and the load against the budget: said before the fabric comes
    # up, and kept in summary.json
    said = " ".join(out.split())
    assert said.index("budget: rate 10 Mbit/s; time scale 4,000") < said.index("creating")
    assert re.search(r"needs 0\.\d\d of 1\.50 cores \(2 cores less 25% margin, \w+ build\): "
                     r"fits", said), said[:2000]
    budget = json.loads((run_dir / "summary.json").read_text())["budget"]
    assert (budget["status"], budget["host_link_mbps"], budget["time_scale"]) == (
        "fits", 10.0, 4000.0)
    assert budget["load"]["passes_per_s"] > 0 and budget["cores_limit"] == 1.5


#: What dies mid-run (a pattern for pkill -f), and the one line the user must see.
DEATHS = {
    "endpoint": ("traffic.endpoint --intf h2-eth0", "error: the endpoint on h2 failed",
                 "h2.log"),
    "switch": ("simple_switch_grpc.*leaf1-eth1", "error: switch leaf1 stopped during the run",
               "leaf1.log"),
}


@pytest.mark.bmv2
@pytest.mark.parametrize("part", sorted(DEATHS))
def test_a_part_that_dies_is_one_line_and_the_run_keeps_what_it_measured(
        part: str, tmp_path: Path) -> None:
    pattern, line, log = DEATHS[part]
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "run", str(_scenario(tmp_path)), "--results",
         str(results)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any("running for" in ln for ln in lines) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)
    # h2's endpoint (the sender of flow a), or leaf1's BMv2, dies in the middle of the run
    subprocess.run(["pkill", "-9", "-f", pattern], check=True)
    proc.wait(timeout=120)
    reader.join(timeout=5)
    out = "".join(lines)
    assert proc.returncode == 1, out
    assert line in out and log in out, out
    assert "Traceback" not in out and "CRITICAL" not in out, out
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, errors
    (run_dir,) = results.iterdir()
    assert (run_dir / "summary.json").is_file(), "what was measured is kept"
    assert (run_dir / "endpoints" / "h1" / "qp_timeseries.csv").is_file()
    left = subprocess.run(["pgrep", "-f", "traffic.endpoint.*runcli|simple_switch"],
                          capture_output=True, text=True)
    assert left.stdout == "", f"left running: {left.stdout}"


def test_out_names_the_runs_folder_and_never_writes_over_another(tmp_path: Path) -> None:
    """`testbed run --out DIR` writes the run into DIR itself (as `testbed sweep --out` does
    for a sweep); a DIR that holds anything is refused in one line before any fabric starts."""
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "summary.json").write_text("{}")
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(_scenario(tmp_path)),
                        "--out", str(taken)], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"error: --out {taken}: already exists and is not an empty folder; give a new one"]
    assert [p.name for p in taken.iterdir()] == ["summary.json"]


@pytest.mark.bmv2
def test_a_run_writes_into_its_out_folder(tmp_path: Path) -> None:
    scenario = {**SCENARIO, "duration_s": 1, "settle_s": 0.5, "faults": [],
                "flows": [{"name": "b", "src": "h3", "dst": "h1", "qps": 1, "count": 2}]}
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "my-run"
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--out",
                        str(out), "--results", str(tmp_path / "results")], cwd=REPO,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"results in {out}" in r.stderr
    assert (out / "summary.json").is_file() and (out / "report.md").is_file()
    assert not (tmp_path / "results").exists()
    # what the switch agents ran at: real-time, by default
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agents"] == {"scheduling": "SCHED_FIFO 10", "refused": None}
