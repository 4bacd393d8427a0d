"""The attacks of docs/THREAT_MODEL.md, each run as another local user would: an unprivileged
account (created here when missing), whose steps run under ``setpriv --reuid --regid
--clear-groups``. Each attack is refused or ignored with a clear line, and nothing of the
attacker's or anyone else's (a process, an interface, a file) is touched; the trusted user's
`testbed up` and `down` still work. One real fabric serves the attacks that need one."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.machine import state
from testbed.machine.state_check import START_SLACK_S

REPO = Path(__file__).resolve().parent.parent
TESTBED = [sys.executable, "-m", "testbed.cli"]
ATTACKER = "rtb-attacker"
pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def attacker() -> Iterator[pwd.struct_passwd]:
    """An unprivileged local user; removed again if this fixture made it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user; run pytest with sudo")
    made = False
    try:
        pwd.getpwnam(ATTACKER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell",
                        "/usr/sbin/nologin", ATTACKER], check=True, capture_output=True)
        made = True
    yield pwd.getpwnam(ATTACKER)
    if made:
        r = subprocess.run(["userdel", ATTACKER], capture_output=True, text=True)
        assert r.returncode == 0, f"{ATTACKER} left behind: {r.stderr}"


def as_user(user: pwd.struct_passwd, *cmd: str, **kw) -> subprocess.CompletedProcess:
    """``cmd`` as ``user``, with none of root's groups or capabilities."""
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                           "--clear-groups", "--", *cmd], capture_output=True, text=True,
                          timeout=30, **kw)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user can reach (0755, root's) under /tmp; pytest's tmp_path is 0700."""
    d = Path(tempfile.mkdtemp(prefix="rtb-shared-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run_testbed(*args: str, env: dict | None = None, cwd: Path = REPO,
            timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(TESTBED + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**os.environ, **(env or {})})


def one_error(r: subprocess.CompletedProcess) -> str:
    """The command's error, checked to be one line and no traceback."""
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


# -- a runtime folder made first -------------------------------------------------------------

def test_a_runtime_folder_another_user_made_first_is_refused(attacker, shared: Path) -> None:
    """The student's `mkdir /tmp/roce-testbed && chmod 777` before anyone starts a fabric:
    `testbed up` and `testbed down` refuse it, and create nothing in it."""
    shared.chmod(0o1777)  # as /tmp
    made = shared / "roce-testbed"
    assert as_user(attacker, "mkdir", "-m", "777", str(made)).returncode == 0
    for args in (["up", "--pingall"], ["down"], ["clean"]):
        line = one_error(run_testbed(*args, env={"ROCE_TESTBED_RUNTIME": str(made)}))
        assert f"{made} belongs to {ATTACKER}" in line and "refusing" in line, line
    assert list(made.iterdir()) == []


def test_a_runtime_folder_others_can_write_or_a_link_is_refused(attacker,
                                                                shared: Path) -> None:
    loose = shared / "loose"
    loose.mkdir(mode=0o777)
    loose.chmod(0o777)
    line = one_error(run_testbed("down", env={"ROCE_TESTBED_RUNTIME": str(loose)}))
    assert "mode 0777" in line, line
    # a link the student planted, to a folder that would pass every check
    good = shared / "good"
    good.mkdir(mode=0o700)
    sticky = shared / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert as_user(attacker, "ln", "-s", str(good), str(sticky / "rt")).returncode == 0
    for runtime in (sticky / "rt", sticky / "rt" / "below"):
        line = one_error(run_testbed("down", env={"ROCE_TESTBED_RUNTIME": str(runtime)}))
        assert f"{sticky / 'rt'} is a symbolic link" in line, line
    assert list(good.iterdir()) == []


def test_another_user_running_the_testbed_is_told_to_use_sudo(attacker) -> None:
    """Without sudo, `testbed down` reads nothing of root's runtime folder and says why."""
    state.runtime_root()
    r = as_user(attacker, *TESTBED, "down", cwd="/tmp")
    assert one_error(r) == f"error: {state.RUNTIME_DIR} is root's: run the testbed with sudo"


# -- the fabric lock ---------------------------------------------------------------------------

def test_no_other_user_can_take_the_lock_first(attacker, shared: Path) -> None:
    """The default lock is inside the root-only runtime folder: the student cannot create or
    open it, so cannot hold it. A lock moved (ROCE_TESTBED_FABRIC_LOCK) to a file the student
    made and holds is refused at once, not waited on."""
    lock = state.FABRIC_LOCK
    r = as_user(attacker, "flock", "-n", str(lock), "true")
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr
    sticky = shared / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    theirs = sticky / "fabric.lock"
    holder = subprocess.Popen(["setpriv", f"--reuid={attacker.pw_uid}",
                               f"--regid={attacker.pw_gid}", "--clear-groups", "--", "flock",
                               str(theirs), "sleep", "60"], start_new_session=True)
    try:
        deadline = time.time() + 10
        while not theirs.exists() and time.time() < deadline:
            time.sleep(0.05)
        code = ("from testbed.machine.state import fabric_lock\n"
                "with fabric_lock():\n    pass\n")
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=30, env={**os.environ, "ROCE_TESTBED_FABRIC_LOCK": str(theirs)})
        assert time.monotonic() - t < 10
        assert r.returncode != 0 and f"{theirs} belongs to {ATTACKER}" in r.stderr, r.stderr
        assert holder.poll() is None  # the student's process: untouched
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and the sleep it holds the lock for
        holder.wait()


# -- a record another user wrote -----------------------------------------------------------------

def test_a_record_not_written_by_root_is_not_read(attacker, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Were a record ever not root's (a folder moved, an old version's), `clean` reads
    nothing from it: it says why, and kills nothing it names."""
    runtime = state.secure_dir(tmp_path / "rt")
    monkeypatch.setattr(state, "RUNTIME_DIR", runtime)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        record = runtime / "planted.state.json"
        record.write_text(json.dumps({"name": "planted", "owner_pid": 1, "started": 0,
                                      "processes": [{"pid": victim.pid, "match": "sleep"}]}))
        os.chown(record, attacker.pw_uid, attacker.pw_gid)
        said: list[str] = []
        assert state.clean_all(said.append) == {"runs": 0, "processes": 0, "interfaces": 0,
                                                "files": 0}
        assert said == [f"record planted.state.json: {record} belongs to {ATTACKER} "
                        f"(uid {attacker.pw_uid}): not reading it"]
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


# -- results handed to the sudo user ------------------------------------------------------------

SCENARIO = REPO / "scenarios" / "incast-lossy.yaml"


def test_a_link_planted_in_the_results_path_is_refused(attacker, shared: Path) -> None:
    """A class's shared folder (sticky, as /tmp): the student plants the results folder as a
    link to a folder of root's. `testbed run` refuses before anything runs; and a results
    folder under one that others can write is refused too (they could swap it mid-run)."""
    sticky = shared / "class"
    sticky.mkdir()
    sticky.chmod(0o1777)
    victim = shared / "victim"
    victim.mkdir()
    assert as_user(attacker, "ln", "-s", str(victim), str(sticky / "results")).returncode == 0
    line = one_error(run_testbed("run", str(SCENARIO), "--results", str(sticky / "results"),
                             env={"SUDO_UID": "65534", "SUDO_GID": "65534"}))
    assert f"{sticky / 'results'} is a symbolic link of another user" in line, line
    assert list(victim.iterdir()) == [] and victim.stat().st_uid == 0
    loose = shared / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    line = one_error(run_testbed("run", str(SCENARIO), "--results", str(loose / "results")))
    assert f"{loose} has mode 0777: other users can write in it" in line, line
    assert list(loose.iterdir()) == []


def test_the_hand_over_follows_no_link_and_takes_only_roots_files(
        attacker, shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a run creates in a shared results folder becomes the sudo user's; a link and a
    file the student put there meanwhile, and what the link points to, keep their owners."""
    from testbed.machine.owner import for_sudo_user

    sticky = shared / "class"
    sticky.mkdir()
    sticky.chmod(0o1777)
    precious = shared / "precious"
    precious.write_text("root's")
    monkeypatch.setenv("SUDO_UID", "65534")
    monkeypatch.setenv("SUDO_GID", "65534")
    with for_sudo_user(sticky):
        run = sticky / "run-1"
        run.mkdir()
        (run / "summary.json").write_text("{}")
        assert as_user(attacker, "ln", "-s", str(precious), str(sticky / "evil")).returncode == 0
        assert as_user(attacker, "touch", str(sticky / "theirs")).returncode == 0
    assert run.stat().st_uid == (run / "summary.json").stat().st_uid == 65534
    assert precious.stat().st_uid == 0
    assert (sticky / "evil").lstat().st_uid == (sticky / "theirs").stat().st_uid == (
        attacker.pw_uid)


# -- a real fabric: the runtime folder, and a record naming what is not the run's ----------------

def _other_net_namespaces() -> set[int]:
    from tests.test_fabric import net_namespaces

    return net_namespaces()


@pytest.mark.bmv2
def test_down_acts_only_on_the_runs_own_objects(attacker, shared: Path) -> None:
    """A fabric up (`sudo testbed up`): the student can neither read nor move its record.
    Were the record swapped anyway (it is a list of candidates, never an order), `testbed
    down` after the run was killed removes the run's switches, shells and veths, and skips,
    one line each, a process of the student's, a root process older than the run, an
    interface that is not a veth of the run's nodes and files outside the run's folder: all
    of them still there afterwards."""
    from tests.test_fabric import _start_background, assert_clean, leftovers

    older = subprocess.Popen(["sleep", "300"])  # root's, started before the run
    time.sleep(2 * START_SLACK_S)  # a start time is known to a second (testbed.machine.state_check)
    before = _other_net_namespaces()
    sticky = shared / "class"
    sticky.mkdir()
    sticky.chmod(0o1777)
    theirs, roots = sticky / "theirs.txt", shared / "roots.txt"
    roots.write_text("root's")
    #: another's veth, and a bridge named as if it were a port of the run's leaf1
    dummies = ["rtb-foreign0", "leaf1-evil"]
    p = foreign = None
    try:
        p = _start_background(shared / "results")
        foreign = subprocess.Popen(["setpriv", f"--reuid={attacker.pw_uid}",
                                    f"--regid={attacker.pw_gid}", "--clear-groups", "--",
                                    "sleep", "300"])
        assert as_user(attacker, "sh", "-c", f"echo data > {theirs}").returncode == 0
        subprocess.run(["ip", "link", "add", dummies[0], "type", "veth", "peer", "name",
                        "rtb-foreign1"], check=True)
        subprocess.run(["ip", "link", "add", dummies[1], "type", "bridge"], check=True)
        record = state.RUNTIME_DIR / "fabric.state.json"
        for cmd in (["ls", str(state.RUNTIME_DIR)], ["cat", str(record)],
                    ["mv", str(record), str(sticky / "aside.json")]):
            r = as_user(attacker, *cmd)
            assert r.returncode != 0 and "Permission denied" in r.stderr, (cmd, r.stderr)
        assert set(leftovers()["switches"]) and record.exists()
        p.send_signal(signal.SIGKILL)  # no teardown: `down` reads the record
        p.wait()
        d = json.loads(record.read_text())
        d["processes"] += [{"pid": foreign.pid, "match": "sleep"},
                           {"pid": older.pid, "match": "sleep"}]
        d["interfaces"] += dummies
        d["files"] += [str(theirs), str(roots), str(state.RUNTIME_DIR / "fabric" / ".."
                                                    / "fabric.lock")]
        state.write_new(record, json.dumps(d))
        r = run_testbed("down", timeout=60)
        assert r.returncode == 0, r.stderr
        out = " ".join((r.stdout + r.stderr).split())
        for said in (f"skipped process {foreign.pid}: runs as uid {attacker.pw_uid}",
                     f"skipped process {older.pid}: started before the run did",
                     "skipped interface 'rtb-foreign0': not named after a node of the run",
                     "skipped interface 'leaf1-evil': a bridge interface, not a veth",
                     f"skipped file '{theirs}': not inside the run's folder",
                     f"skipped file '{roots}': not inside the run's folder",
                     "fabric/../fabric.lock': not inside the run's folder"):
            assert said in out, out
        assert foreign.poll() is None and older.poll() is None
        assert theirs.read_text() == "data\n" and roots.read_text() == "root's"
        assert all((Path("/sys/class/net") / d).exists() for d in dummies)
        assert (state.RUNTIME_DIR / "fabric.lock").exists()
    finally:
        if p is not None and p.poll() is None:  # a failure above, the fabric still up
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)
        for d in dummies:
            subprocess.run(["ip", "link", "del", d], check=False, capture_output=True)
        for proc in (foreign, older):
            if proc is not None:
                proc.kill()
                proc.wait()
    assert_clean(before)  # the run's own switches, shells, veths and record: gone


def test_the_runtime_folder_is_roots_alone() -> None:
    """As every fabric uses it: 0700, root's, no symbolic link on the way."""
    assert state.runtime_root() == state.RUNTIME_DIR
    st = os.lstat(state.RUNTIME_DIR)
    assert st.st_uid == 0 and st.st_mode & 0o7777 == 0o700
