"""The record of what a fabric created: whether another fabric is up, and what a killed run
left, told apart by whether the process that recorded it still runs. Real processes, no
root."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.machine import state
from testbed.machine.state import (
    ProcRecord,
    RunState,
    ask_owners_to_stop,
    clean_orphans,
    owner_alive,
    running_elsewhere,
)


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


def _testbed_named(seconds: int) -> subprocess.Popen:
    """A process whose command line names testbed, as a `testbed up` in another terminal."""
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})",
                             "testbed", "up"])


def test_down_asks_a_live_owner_to_stop_but_not_a_reused_pid() -> None:
    owner, later = _testbed_named(30), _testbed_named(30)
    try:
        time.sleep(0.2)  # both have their command lines
        RunState("up-elsewhere", owner_pid=owner.pid).save()
        # `later` holds a PID a dead owner's record names, but started after that run
        RunState("old", owner_pid=later.pid, started=time.time() - 600).save()
        assert ask_owners_to_stop() == [owner.pid]
        assert owner.wait(timeout=5) == -signal.SIGTERM
        assert later.poll() is None  # not signalled
    finally:
        for p in (owner, later):
            p.kill()
            p.wait()


def test_down_leaves_an_owner_that_is_not_a_testbed_command_to_the_clean_up() -> None:
    script = _sleeper(30)  # a benchmark script or a test holding a fabric
    try:
        RunState("scripted", owner_pid=script.pid).save()
        assert ask_owners_to_stop() == []
        assert script.poll() is None
    finally:
        script.kill()
        script.wait()
