"""Packet captures: a host's NIC or a switch port, written as a pcap into the results folder.

A scenario asks for them with ``capture: [h1, leaf1:2]`` (or ``testbed run --capture h1
--capture leaf1:2``): ``h1`` is the host's only interface, ``leaf1:2`` the switch's port 2
(the veth BMv2 sends and receives on, inside the switch's namespace). Each becomes
``captures/<host>.pcap`` or ``captures/<switch>-p<port>.pcap``, decoded by Wireshark/tshark:
RoCEv2 on UDP 4791 as InfiniBand (BTH, RETH, AETH), PFC frames as MAC control (``macc``).

A capture is Wireshark's ``dumpcap`` in the node's namespace, started (and seen capturing)
before the traffic and stopped with SIGINT at the end of the run, so that it writes the file
out whole. Its size is capped by dumpcap itself (``-a filesize``: it stops writing there) and
each frame is cut at a snap length (headers are what a student reads in a capture; RoCE
payloads are 4 KB of filler). Every capture process is in the run's state record, so a run
killed half way leaves none behind (`testbed clean`).
"""

from __future__ import annotations

import contextlib
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.machine.state import RunState
from testbed.results.files import CAPTURES_DIR
from testbed.topology.graph import Topology, intf_name

#: Subfolder of the results folder that holds the pcaps.
#: How long dumpcap may take to open its interface before the run gives up on it.
START_TIMEOUT_S = 10.0
#: How long dumpcap may take to write out its file after SIGINT, before it is killed.
STOP_TIMEOUT_S = 5.0


class CaptureError(Exception):
    """A capture could not start; the message names it and what dumpcap said."""


@dataclass(frozen=True)
class CaptureTarget:
    """Where to capture: a host's NIC (``port`` None) or a switch's port."""

    node: str
    port: int | None = None

    @property
    def label(self) -> str:
        return self.node if self.port is None else f"{self.node}:{self.port}"

    @property
    def file_name(self) -> str:
        return f"{self.node}.pcap" if self.port is None else f"{self.node}-p{self.port}.pcap"

    def interface(self) -> str:
        """The Linux interface in the node's namespace (a host's is eth0)."""
        return intf_name(self.node, 0 if self.port is None else self.port)


def parse_target(text: str) -> CaptureTarget:
    """``h1`` or ``leaf1:2``. ValueError says the form it expects."""
    node, sep, port = text.strip().partition(":")
    if not node or (sep and not port.isdigit()):
        raise ValueError(f"{text!r} is neither a host (h1) nor a switch port (leaf1:2)")
    return CaptureTarget(node, int(port) if sep else None)


def target_problem(text: str, topo: Topology) -> str | None:
    """What is wrong with a capture target on this topology, or None if it exists."""
    try:
        t = parse_target(text)
    except ValueError as exc:
        return str(exc)
    hosts = {h.name for h in topo.hosts}
    switches = {s.name: s for s in topo.switches}
    if t.port is None:
        if t.node in hosts:
            return None
        if t.node in switches:
            return (f"{t.node} is a switch: name one of its ports, e.g. {t.node}:"
                    f"{min(switches[t.node].ports)}")
        return f"unknown host {t.node!r}; hosts are {', '.join(h.name for h in topo.hosts)}"
    if t.node not in switches:
        return (f"unknown switch {t.node!r}; switches are "
                f"{', '.join(s.name for s in topo.switches)}")
    ports = sorted(switches[t.node].ports)
    if t.port not in ports:
        return f"{t.node} has no port {t.port}; its ports are {ports[0]}..{ports[-1]}"
    return None


class Captures:
    """The run's captures: started in their nodes' namespaces, stopped cleanly, recorded."""

    def __init__(self, targets: list[str], out_dir: Path, state: RunState, max_mb: float,
                 snaplen: int) -> None:
        self.targets = list(dict.fromkeys(parse_target(t) for t in targets))  # no duplicates
        self.out_dir = out_dir / CAPTURES_DIR
        self.state = state
        self.max_kb = max(1, int(max_mb * 1000))  # dumpcap's filesize is in kB (1000 bytes)
        self.snaplen = snaplen
        self.procs: list[tuple[CaptureTarget, subprocess.Popen]] = []

    def command(self, t: CaptureTarget) -> list[str]:
        """dumpcap on the target's interface: pcap (-P), cut at the snap length, stopped by
        its own size limit; -q keeps its per-packet counter off stderr."""
        return ["dumpcap", "-q", "-P", "-i", t.interface(), "-s", str(self.snaplen),
                "-a", f"filesize:{self.max_kb}", "-w", str(self.out_dir / t.file_name)]

    def start(self, net) -> None:
        """Start every capture (``net.get(node)`` must have Mininet's ``popen``) and wait
        until each says it is capturing, so that no frame of the run is missed."""
        if not self.targets:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for t in self.targets:
            p = net.get(t.node).popen(self.command(t), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
            self.procs.append((t, p))
            self.state.add_process(p.pid, str(self.out_dir / t.file_name))
        for t, p in self.procs:
            self._wait_capturing(t, p)

    @staticmethod
    def _wait_capturing(t: CaptureTarget, p: subprocess.Popen) -> None:
        """dumpcap writes "Capturing on '<interface>'" to stderr once the interface is open."""
        assert p.stderr is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        seen: list[str] = []
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([p.stderr], [], [], left)[0]:
                break
            line = p.stderr.readline()
            if not line:  # dumpcap exited
                break
            seen.append(line.strip())
            if line.startswith("Capturing on"):
                return
        raise CaptureError(f"capture {t.label} did not start: {' '.join(seen)[-300:]}")

    def stop(self) -> list[str]:
        """SIGINT to each capture (dumpcap then writes out its file), a kill after
        STOP_TIMEOUT_S; returns the pcaps written, relative to the results folder."""
        for _t, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        written = []
        for t, p in self.procs:
            try:
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            with contextlib.suppress(OSError):
                if p.stderr is not None:
                    p.stderr.close()
            if (self.out_dir / t.file_name).exists():
                written.append(f"{CAPTURES_DIR}/{t.file_name}")
        self.procs = []
        return written
