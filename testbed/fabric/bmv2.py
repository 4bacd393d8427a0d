"""One BMv2 ``simple_switch_grpc`` process: its command line, its log, its readiness.

Management stays on the machine: gRPC listens on a unix socket, and the Thrift server (which
binds every address and cannot be told otherwise) runs inside the switch's own network
namespace, where no interface has an address and IPv6 is off, so nothing but the namespace's
own loopback reaches it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from traffic.wire import NUM_TCS

#: Lines BMv2 prints when it cannot go on, though it may not exit (a Thrift port already taken
#: leaves it running without a gRPC server).
FATAL_LOG_LINES = ("Could not bind", "Error while parsing command line",
                   "Invalid interface", "error while loading shared libraries")


def realtime_allowed(priority: int) -> bool:
    """Whether this machine lets a process of ours take SCHED_FIFO at ``priority`` (root
    without CAP_SYS_NICE, in a container, or without a real-time budget may not)."""
    try:
        return subprocess.run(["chrt", "-f", str(priority), "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def scheduling(asked: int, nice: int, allowed: bool) -> tuple[str, str | None]:
    """What the switches run at, and why not what was asked when the machine refused it:
    given ``asked`` (switch.realtime_priority, 0 for none) and whether it is allowed."""
    if asked and allowed:
        return f"SCHED_FIFO {asked}", None
    if not asked:
        return f"nice {nice}", None
    return f"nice {nice}", (
        f"switch.realtime_priority {asked} was refused by this machine: the BMv2 switches run "
        f"at nice {nice} and wait for a core behind the hosts' endpoints (a container needs "
        "--cap-add SYS_NICE --cpu-rt-runtime 950000; `testbed doctor` checks it)")


def deal_cores(switches: Sequence[str], cores: Iterable[int]) -> dict[str, int]:
    """Each switch's one core: the switches in order, dealt round robin over ``cores`` (the
    cores this run may use, in any order: dealt lowest first), so that every core carries as
    many switches as another, give or take one."""
    ordered = sorted(cores)
    return {name: ordered[i % len(ordered)] for i, name in enumerate(switches)}


class SwitchStartError(Exception):
    """A switch did not come up; the message names it, shows its log tail and command line."""


@dataclass
class Bmv2Options:
    name: str
    device_id: int
    ports: dict[int, str]  # port number -> interface name
    binary: str  # which simple_switch_grpc (testbed.config.bmv2_build.select)
    grpc_socket: Path
    log_path: Path
    thrift_port: int = 9090
    priority_queues: int = NUM_TCS  # one per class (the program sets priority = class)
    log: bool = False
    log_max_bytes: int = 20 * 1024 * 1024
    nice: int = 0  # scheduling priority, inherited by every thread of the switch
    #: SCHED_FIFO priority of every thread of the switch (chrt(1); 0: the fair scheduler).
    realtime_priority: int = 0
    #: The one core every thread of the switch runs on (taskset(1); None: any core).
    core: int | None = None
    extra: Sequence[str] = field(default_factory=tuple)

    @property
    def grpc_addr(self) -> str:
        return f"unix://{self.grpc_socket}"

    def command(self) -> list[str]:
        cmd = ["taskset", "-c", str(self.core)] if self.core is not None else []
        cmd += ["chrt", "-f", str(self.realtime_priority)] if self.realtime_priority else []
        cmd += ["nice", "-n", str(self.nice)] if self.nice else []
        cmd += [self.binary, "--device-id", str(self.device_id), "--thrift-port",
                str(self.thrift_port)]
        for port, intf in sorted(self.ports.items()):
            cmd += ["-i", f"{port}@{intf}"]
        if self.log:
            cmd += ["--log-console", "--log-level", "debug"]
        else:  # BMv2's default level (trace) formats every packet's messages for no sink
            cmd += ["--log-level", "off"]
        cmd += ["--no-p4", *self.extra, "--",
                "--grpc-server-addr", self.grpc_addr,
                "--priority-queues", str(self.priority_queues)]
        return cmd


class LogPump(threading.Thread):
    """Copies a switch's output to its log file, and stops copying at a size limit.

    BMv2's console log grows without bound; capping it here keeps a long run from filling the
    disk while the switch itself keeps writing into the pipe, which is always drained.
    """

    def __init__(self, stream, path: Path, max_bytes: int) -> None:
        super().__init__(daemon=True, name=f"log:{path.name}")
        self.stream = stream
        self.path = path
        self.max_bytes = max_bytes

    def run(self) -> None:
        written = 0
        with open(self.path, "ab") as out:
            for chunk in iter(lambda: self.stream.read1(65536), b""):
                if written < self.max_bytes:
                    part = chunk[: self.max_bytes - written]
                    out.write(part)
                    written += len(part)
                    if written >= self.max_bytes:
                        out.write(b"\n[log truncated at log_max_mb]\n")
                    out.flush()


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Bmv2Process:
    """A running switch. ``spawn`` runs the command where it must run (a namespace)."""

    def __init__(self, opts: Bmv2Options) -> None:
        self.opts = opts
        self.proc: subprocess.Popen | None = None
        self.pump: LogPump | None = None

    def start(self, spawn: Callable[..., subprocess.Popen]) -> None:
        if not Path(self.opts.binary).is_file():
            raise SwitchStartError(f"{self.opts.name}: {self.opts.binary} is not installed; run "
                                   "`testbed doctor` for how to get BMv2")
        with contextlib.suppress(FileNotFoundError):
            self.opts.grpc_socket.unlink()
        self.opts.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.opts.log_path.write_bytes(b"")
        self.proc = spawn(self.opts.command(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
        self.pump = LogPump(self.proc.stdout, self.opts.log_path, self.opts.log_max_bytes)
        self.pump.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exit_status(self) -> int | None:
        """The process's exit status once it has ended (None while it runs)."""
        return self.proc.poll() if self.proc else None

    def failure(self, why: str) -> SwitchStartError:
        return SwitchStartError(
            f"switch {self.opts.name} {why}.\n"
            f"  command: {' '.join(self.opts.command())}\n"
            f"  last lines of {self.opts.log_path}:\n"
            + "\n".join("    " + ln for ln in tail(self.opts.log_path).splitlines())
        )

    def wait_ready(self, timeout: float) -> float:
        """Block until the process is alive and its gRPC server accepts; return seconds waited."""
        assert self.proc is not None
        t0 = time.monotonic()
        deadline = t0 + timeout
        while not self.opts.grpc_socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise self.failure(f"did not open its gRPC socket within {timeout:g} s")
            time.sleep(0.01)
        channel = grpc.insecure_channel(self.opts.grpc_addr)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self.failure(f"did not accept gRPC within {timeout:g} s")
                try:
                    grpc.channel_ready_future(channel).result(timeout=min(0.2, left))
                    return time.monotonic() - t0
                except grpc.FutureTimeoutError:
                    self._check_alive()
        finally:
            channel.close()

    def _check_alive(self) -> None:
        """Raise if the switch died or printed a fatal error (it may run on regardless)."""
        assert self.proc is not None
        exited = self.proc.poll() is not None
        if exited and self.pump is not None:
            self.pump.join(timeout=1)  # its last words are still in the pipe
        fatal = self._fatal_line()
        if fatal:
            raise self.failure(f"failed to start ({fatal.strip()})")
        if exited:
            raise self.failure(f"exited with status {self.proc.returncode} while starting")

    def _fatal_line(self) -> str | None:
        try:
            text = self.opts.log_path.read_text(errors="replace")
        except OSError:
            return None
        return next((ln for ln in text.splitlines() if any(f in ln for f in FATAL_LOG_LINES)),
                    None)

    def terminate(self) -> None:
        """Ask the switch to exit, without waiting (stop() waits)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, timeout: float = 3.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.pump is not None:
            self.pump.join(timeout=1)
        with contextlib.suppress(FileNotFoundError):
            self.opts.grpc_socket.unlink()
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
