"""The record of what a fabric created: whether another fabric is up, and what a killed run
left, told apart by whether the process that recorded it still runs. Real processes, no
root."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from testbed import state
from testbed.state import ProcRecord, RunState, clean_orphans, owner_alive, running_elsewhere


@pytest.fixture(autouse=True)
def _runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state, "RUNTIME_DIR", tmp_path)


def _sleeper(seconds: int) -> subprocess.Popen:
    return subprocess.Popen(["sleep", str(seconds)])


def test_a_live_owner_is_another_fabric_up_and_is_left_alone() -> None:
    owner = _sleeper(30)
    try:
        st = RunState("other", owner_pid=owner.pid)
        st.save()
        assert owner_alive(st)
        assert running_elsewhere() == st
        assert clean_orphans() == []
        assert st.path.exists()
    finally:
        owner.kill()
        owner.wait()


def test_a_killed_runs_processes_and_record_are_removed() -> None:
    owner = _sleeper(30)
    left = _sleeper(31)  # what the run started and its owner's death did not end
    st = RunState("killed", owner_pid=owner.pid, processes=[ProcRecord(left.pid, "sleep 31")])
    st.save()
    owner.kill()
    owner.wait()
    assert not owner_alive(st) and running_elsewhere() is None
    assert clean_orphans() == [("killed", {"processes": 1, "interfaces": 0, "files": 0})]
    assert left.wait(timeout=5) != 0  # terminated
    assert not st.path.exists()


def test_a_pid_reused_after_the_owner_died_is_not_the_owner() -> None:
    later = _sleeper(30)  # holds a PID, but started after the run it would own
    try:
        st = RunState("old", owner_pid=later.pid, started=time.time() - 600)
        st.save()
        assert not owner_alive(st)
        assert running_elsewhere() is None
    finally:
        later.kill()
        later.wait()


def test_this_process_own_record_is_neither_refused_nor_cleaned() -> None:
    RunState("mine").save()
    assert running_elsewhere() is None
    assert clean_orphans() == []
