"""What a running fabric created, on disk, so that `testbed clean` can remove exactly that.

The record is written as things are created (not at the end), so that a run killed half way
still leaves a record of what it had made. It lives, with the fabric lock, the switches'
gRPC sockets and the agents' configs, in a runtime folder only root can enter (0700, checked
by testbed.machine.safepath). Cleaning treats a record as candidates (testbed.machine.state_check):
it kills only processes the testbed started (user, start time, command line, namespace), deletes
only
veths named after the run's nodes and files inside the run's folder, and reports the rest:
another Mininet or BMv2 on the same machine, or another user's process, is never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.machine.safepath import UnsafePath, check_ancestors, read_own, secure_dir, write_new
from testbed.machine.state_check import (
    ProcFacts,
    RunFacts,
    file_problem,
    interface_problem,
    process_problem,
)
from traffic.names import is_name

#: Where runs keep their state: a tmpfs only root may write (the FHS's /run,
#: https://refspecs.linuxfoundation.org/FHS_3.0/fhs/ch03s15.html), checked before each use.
#: ROCE_TESTBED_RUNTIME moves it (tests); the same checks apply there.
RUNTIME_DIR = Path(os.environ.get("ROCE_TESTBED_RUNTIME", "/run/roce-testbed"))
#: One fabric at a time on a machine: Mininet's node and interface names (h1, leaf1-eth1) are
#: machine-wide, so two fabrics up at once (two test runs, a test and a benchmark) would tear
#: down each other's. Tests and benchmarks hold this lock around each fabric they bring up, and
#: `sudo flock /run/roce-testbed/fabric.lock testbed run ...` takes it from a shell. Inside the
#: runtime folder, so that no other user can create it first and hold it;
#: ROCE_TESTBED_FABRIC_LOCK moves it (checked the same way: testbed.machine.safepath.open_lock).
FABRIC_LOCK = Path(os.environ.get("ROCE_TESTBED_FABRIC_LOCK", str(RUNTIME_DIR / "fabric.lock")))

#: Where a clean's skipped candidates are told (one line each).
Report = Callable[[str], None]


def _to_stderr(line: str) -> None:
    print(f"skipped {line}", file=sys.stderr)


def runtime_root() -> Path:
    """:data:`RUNTIME_DIR`, created 0700 if missing, refused if anyone else could change it."""
    return secure_dir(RUNTIME_DIR, parents=True)


@dataclass
class ProcRecord:
    pid: int
    match: str  # a substring its command line must contain
    netns: int | None = None  # a node shell's network namespace (inode), recorded at its start


@dataclass
class RunState:
    name: str
    owner_pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)
    processes: list[ProcRecord] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return runtime_dir_for(self.name).with_name(f"{self.name}.state.json")

    def save(self) -> None:
        """Written to a new file (O_EXCL, no link followed), then renamed over the record."""
        runtime_root()
        tmp = self.path.with_suffix(".tmp")
        write_new(tmp, json.dumps(asdict(self), indent=1))
        tmp.replace(self.path)

    def add_process(self, pid: int, match: str) -> None:
        """Record a process; a node's shell (``mininet:NAME``) with its network namespace, which
        outlives the shell while anything it started is still in it."""
        ns = netns_of(pid) if match.startswith("mininet:") else None
        self.processes.append(ProcRecord(pid, match, ns))
        self.save()

    @classmethod
    def load(cls, path: Path) -> RunState:
        """A record, read only if root wrote it (testbed.machine.safepath.read_own) and well formed:
        ValueError otherwise."""
        d = json.loads(read_own(path))
        if not isinstance(d, dict) or not is_name(d.get("name")) or (
                path.name != f"{d['name']}.state.json"):
            raise ValueError(f"{path}: not a state record of a run named after its file")
        d["processes"] = [ProcRecord(**p) for p in d.get("processes", [])]
        st = cls(**d)
        if not all(isinstance(p.pid, int) and isinstance(p.match, str)
                   for p in st.processes) or not all(
                isinstance(x, str) for x in st.interfaces + st.files):
            raise ValueError(f"{path}: a process, interface or file of the wrong type")
        return st


@contextlib.contextmanager
def fabric_lock() -> Iterator[None]:
    """Hold :data:`FABRIC_LOCK` (waits for whoever holds it)."""
    from testbed.machine.safepath import open_lock

    if FABRIC_LOCK.parent == RUNTIME_DIR:
        runtime_root()
    fd = open_lock(FABRIC_LOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def runtime_dir_for(name: str) -> Path:
    """A run's own folder of sockets and configs (created by :func:`make_runtime_dir`)."""
    if not is_name(name):
        raise UnsafePath(f"{name!r} is not a run name: no runtime folder for it")
    return RUNTIME_DIR / name


def make_runtime_dir(name: str) -> Path:
    """The run's folder, 0700 inside the checked runtime folder."""
    runtime_root()
    return secure_dir(runtime_dir_for(name))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _matching(rec: ProcRecord) -> bool:
    return rec.match in _cmdline(rec.pid)


def proc_facts(pid: int) -> ProcFacts | None:
    """What /proc says of a live process (None if it is gone)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return ProcFacts(p.uids().real, p.create_time(), _cmdline(pid), netns_of(pid))
    except (psutil.Error, ValueError):  # ValueError: a negative PID in a record
        return None


def run_facts(state: RunState) -> RunFacts:
    """What every process of ``state`` shares: our user, the run's start, its nodes' and the
    machine's namespaces."""
    return RunFacts(os.geteuid(), state.started,
                    frozenset(r.netns for r in state.processes
                              if r.match.startswith("mininet:") and r.netns),
                    netns_of(os.getpid()))


def verified(records: list[ProcRecord], run: RunFacts, report: Report) -> list[ProcRecord]:
    """The records that are still processes the run started; the others are reported."""
    out = []
    for r in records:
        problem = process_problem(r.pid, r.match, r.netns, proc_facts(r.pid), run)
        if problem is None:
            out.append(r)
        elif not problem.endswith(": gone"):
            report(problem)
    return out


def kill_recorded(records: list[ProcRecord], grace: float = 2.0) -> int:
    """Terminate, then kill, the recorded processes that still match; return how many.
    ``records`` have passed :func:`verified`."""
    live = [r for r in records if _matching(r)]
    for r in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(r.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_matching(r) for r in live):
        time.sleep(0.05)
    for r in live:
        if _matching(r):
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.pid, signal.SIGKILL)
    return len(live)


def netns_of(pid: int) -> int | None:
    """The network namespace (its inode) a process is in; None if it is gone."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def node_namespaces(pids: list[int]) -> set[int]:
    """The network namespaces of these processes, the machine's own left out."""
    return {ns for ns in map(netns_of, pids) if ns is not None} - {netns_of(os.getpid())}


def kill_in_namespaces(namespaces: set[int], since: float | None = None) -> int:
    """SIGKILL every process of ours (our user's) in these network namespaces (started at or
    after ``since``, a wall-clock time, if given); return how many.

    A node's namespace lives as long as a process in it. Ending a node's shell (Mininet's
    SIGHUP, or a kill of the recorded shell) does not end what it started when that ignores
    the signal: anything started under nohup inherits SIGHUP as ignored. Another user's
    process is never ours to kill, whatever namespace it is in."""
    import psutil

    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or netns_of(int(entry)) not in namespaces:
            continue
        with contextlib.suppress(OSError, psutil.Error):
            p = psutil.Process(int(entry))
            if p.uids().real != os.geteuid():
                continue
            if since is not None and p.create_time() < since - 1:
                continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
    return killed


def interface_kinds() -> dict[str, str]:
    """The machine's interfaces and their kinds (veth, dummy, ..; "" for a physical one)."""
    out = subprocess.run(["ip", "-j", "-d", "link", "show"], capture_output=True, text=True,
                         check=False).stdout
    try:
        links = json.loads(out or "[]")
    except ValueError:
        return {}
    return {ln["ifname"]: ln.get("linkinfo", {}).get("info_kind", "") for ln in links}


def _delete_interfaces(state: RunState, nodes: set[str], report: Report) -> int:
    kinds = interface_kinds()
    deleted = 0
    for intf in state.interfaces:
        problem = interface_problem(intf, nodes, kinds)
        if problem is not None:
            report(problem)
        elif intf in kinds:
            subprocess.run(["ip", "link", "del", intf], capture_output=True, check=False)
            deleted += 1
    return deleted


def _delete_files(state: RunState, report: Report) -> int:
    run_dir = runtime_dir_for(state.name)
    removed = 0
    for f in state.files:
        problem = file_problem(f, run_dir)
        if problem is not None:
            report(problem)
            continue
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            Path(f).unlink()  # a link itself, never what it points to
            removed += 1
    return removed


def clean_state(state: RunState, report: Report = _to_stderr) -> dict[str, int]:
    """Remove what one run recorded, and whatever is still in its nodes' namespaces. Returns
    counts of what was removed; what the record names but is not the run's is ``report``ed
    (one line each) and left alone."""
    run = run_facts(state)
    mine = verified(state.processes, run, report)
    namespaces = node_namespaces([r.pid for r in mine if r.match.startswith("mininet:")])
    # A node whose shell is gone (a crashed run's shells end with it) may still hold what the
    # shell started: its namespace, recorded at the start, finds it. A namespace's number can be
    # reused once it is gone, so only what started after this run did is killed there.
    recorded = set(run.node_netns) - namespaces
    killed = kill_recorded(mine)
    killed += kill_in_namespaces(namespaces)
    killed += kill_in_namespaces(recorded - {netns_of(os.getpid())}, since=state.started)
    nodes = {r.match.removeprefix("mininet:") for r in state.processes
             if r.match.startswith("mininet:")}
    deleted = _delete_interfaces(state, nodes, report)
    removed = _delete_files(state, report)
    with contextlib.suppress(FileNotFoundError):
        state.path.unlink()
    with contextlib.suppress(OSError):  # the run's folder of sockets, once it is empty
        runtime_dir_for(state.name).rmdir()
    return {"processes": killed, "interfaces": deleted, "files": removed}


def recorded_runs(report: Report = _to_stderr) -> list[RunState]:
    """Every run's record in the runtime folder (checked first: testbed.machine.safepath); a record
    that is not root's or not well formed is reported and left out."""
    if not os.path.lexists(RUNTIME_DIR):
        check_ancestors(RUNTIME_DIR)  # nothing recorded, but a link on the way is said
        return []
    root = runtime_root()
    runs = []
    for p in sorted(root.glob("*.state.json")):
        try:
            runs.append(RunState.load(p))
        except (OSError, ValueError, TypeError, UnsafePath) as exc:
            report(f"record {p.name}: {exc}")
    return runs


def owner_alive(state: RunState) -> bool:
    """Whether the process that recorded the run still runs: its PID, started no later than
    the run (a PID is reused once its process is gone), as our user."""
    import psutil

    try:
        p = psutil.Process(state.owner_pid)
        return p.create_time() <= state.started + 1 and p.uids().real == os.geteuid()
    except (psutil.Error, ValueError):
        return False


def running_elsewhere() -> RunState | None:
    """A run another live process has up on this machine, if any."""
    return next((st for st in recorded_runs()
                 if st.owner_pid != os.getpid() and owner_alive(st)), None)


def ask_owners_to_stop() -> list[int]:
    """SIGTERM each live owner of a recorded run (a `testbed up` in another terminal), so that
    it tears its fabric down itself; returns the PIDs signalled. Only a process that started no
    later than its run (not a reused PID) and runs a `testbed` command: a script or a test
    that holds a fabric is left to `clean_all`, not killed."""
    pids = []
    for st in recorded_runs():
        if st.owner_pid != os.getpid() and owner_alive(st) and "testbed" in _cmdline(
                st.owner_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(st.owner_pid, signal.SIGTERM)
                pids.append(st.owner_pid)
    return pids


def clean_orphans(report: Report = _to_stderr) -> list[tuple[str, dict[str, int]]]:
    """Remove what each run whose owner is gone (killed: no teardown) left, as `testbed clean`
    does: its switches, agents and endpoints would otherwise go on taking the CPU from the next
    run, and a run of the same name would take over its record, so that `testbed clean` no
    longer finds them. Returns each run's name and what was removed."""
    return [(st.name, clean_state(st, report)) for st in recorded_runs(report)
            if st.owner_pid != os.getpid() and not owner_alive(st)]


def clean_all(report: Report = _to_stderr) -> dict[str, int]:
    total = {"runs": 0, "processes": 0, "interfaces": 0, "files": 0}
    for st in recorded_runs(report):
        counts = clean_state(st, report)
        total["runs"] += 1
        for k, v in counts.items():
            total[k] += v
    return total
