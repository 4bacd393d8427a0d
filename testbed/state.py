"""What a running fabric created, on disk, so that `testbed clean` can remove exactly that.

The record is written as things are created (not at the end), so that a run killed half way
still leaves a record of what it had made. Cleaning kills only processes whose PID *and*
command line match the record, and deletes only interfaces the record names: another Mininet
or BMv2 on the same machine is never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

RUNTIME_DIR = Path(os.environ.get("ROCE_TESTBED_RUNTIME", "/tmp/roce-testbed"))
#: One fabric at a time on a machine: Mininet's node and interface names (h1, leaf1-eth1) are
#: machine-wide, so two fabrics up at once (two test runs, a test and a benchmark) would tear
#: down each other's. Tests and benchmarks hold this lock around each fabric they bring up, and
#: `flock /tmp/roce-testbed-fabric.lock testbed run ...` takes it from a shell.
FABRIC_LOCK = Path(os.environ.get("ROCE_TESTBED_FABRIC_LOCK", "/tmp/roce-testbed-fabric.lock"))


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
        return RUNTIME_DIR / f"{self.name}.state.json"

    def save(self) -> None:
        RUNTIME_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(self.path)

    def add_process(self, pid: int, match: str) -> None:
        """Record a process; a node's shell (``mininet:NAME``) with its network namespace, which
        outlives the shell while anything it started is still in it."""
        ns = netns_of(pid) if match.startswith("mininet:") else None
        self.processes.append(ProcRecord(pid, match, ns))
        self.save()

    @classmethod
    def load(cls, path: Path) -> RunState:
        d = json.loads(path.read_text())
        d["processes"] = [ProcRecord(**p) for p in d.get("processes", [])]
        return cls(**d)


@contextlib.contextmanager
def fabric_lock() -> Iterator[None]:
    """Hold :data:`FABRIC_LOCK` (waits for whoever holds it)."""
    with open(FABRIC_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def runtime_dir_for(name: str) -> Path:
    return RUNTIME_DIR / name


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _matching(rec: ProcRecord) -> bool:
    return rec.match in _cmdline(rec.pid)


def kill_recorded(records: list[ProcRecord], grace: float = 2.0) -> int:
    """Terminate, then kill, the recorded processes that still match; return how many."""
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
    """SIGKILL every process in these network namespaces (started at or after ``since``, a
    wall-clock time, if given); return how many.

    A node's namespace lives as long as a process in it. Ending a node's shell (Mininet's
    SIGHUP, or a kill of the recorded shell) does not end what it started when that ignores
    the signal: anything started under nohup inherits SIGHUP as ignored."""
    import psutil

    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or netns_of(int(entry)) not in namespaces:
            continue
        with contextlib.suppress(OSError, psutil.Error):
            if since is not None and psutil.Process(int(entry)).create_time() < since - 1:
                continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
    return killed


def _root_interfaces() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}


def clean_state(state: RunState) -> dict[str, int]:
    """Remove what one run recorded, and whatever is still in its nodes' namespaces. Returns
    counts of what was removed."""
    namespaces = node_namespaces([r.pid for r in state.processes
                                  if r.match.startswith("mininet:") and _matching(r)])
    # A node whose shell is gone (a crashed run's shells end with it) may still hold what the
    # shell started: its namespace, recorded at the start, finds it. A namespace's number can be
    # reused once it is gone, so only what started after this run did is killed there.
    recorded = {r.netns for r in state.processes if r.netns} - namespaces
    killed = kill_recorded(state.processes)
    killed += kill_in_namespaces(namespaces)
    killed += kill_in_namespaces(recorded - {netns_of(os.getpid())}, since=state.started)
    deleted = 0
    present = _root_interfaces()
    for intf in state.interfaces:
        if intf in present:
            subprocess.run(["ip", "link", "del", intf], capture_output=True, check=False)
            deleted += 1
    removed = 0
    for f in state.files:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            Path(f).unlink()
            removed += 1
    with contextlib.suppress(FileNotFoundError):
        state.path.unlink()
    with contextlib.suppress(OSError):  # the run's folder of sockets, once it is empty
        runtime_dir_for(state.name).rmdir()
    return {"processes": killed, "interfaces": deleted, "files": removed}


def recorded_runs() -> list[RunState]:
    if not RUNTIME_DIR.is_dir():
        return []
    runs = []
    for p in sorted(RUNTIME_DIR.glob("*.state.json")):
        try:
            runs.append(RunState.load(p))
        except (OSError, ValueError, TypeError):
            continue
    return runs


def owner_alive(state: RunState) -> bool:
    """Whether the process that recorded the run still runs: its PID, started no later than
    the run (a PID is reused once its process is gone)."""
    import psutil

    try:
        return psutil.Process(state.owner_pid).create_time() <= state.started + 1
    except psutil.Error:
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


def clean_orphans() -> list[tuple[str, dict[str, int]]]:
    """Remove what each run whose owner is gone (killed: no teardown) left, as `testbed clean`
    does: its switches, agents and endpoints would otherwise go on taking the CPU from the next
    run, and a run of the same name would take over its record, so that `testbed clean` no
    longer finds them. Returns each run's name and what was removed."""
    return [(st.name, clean_state(st)) for st in recorded_runs()
            if st.owner_pid != os.getpid() and not owner_alive(st)]


def clean_all() -> dict[str, int]:
    total = {"runs": 0, "processes": 0, "interfaces": 0, "files": 0}
    for st in recorded_runs():
        counts = clean_state(st)
        total["runs"] += 1
        for k, v in counts.items():
            total[k] += v
    return total
