"""The best-effort background flows of a run: a sender and a receiver process per flow
(``python -m traffic.background``), in the hosts' namespaces.

:class:`BackgroundPool` starts the receivers and then the senders before the run's clock
starts (a Python process takes a while to come up on a busy core), hands the senders that
clock when the run starts (:meth:`go`), stops the senders when the run's senders stop and the
receivers after the settle time (what the fabric still held has arrived or was dropped), and
reads what each counted into the run's summary (:meth:`results`). Every process is in the
run's record, so an interrupted run's clean-up ends them too.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

from testbed.config.models import FabricConfig
from testbed.machine.state import RunState
from testbed.results.files import (
    BACKGROUND_DIR,
    BACKGROUND_RECEIVED_SUFFIX,
    BACKGROUND_SENT_SUFFIX,
    LOG_SUFFIX,
)
from testbed.topology.graph import Topology
from traffic.background import BASE_PORT, BackgroundSpec, frame_size, offered_mbps

#: How long a background process has to write its figures once told to stop.
STOP_WAIT_S = 5


class BackgroundPool:
    """The background flows' processes of one run."""

    def __init__(self, specs: list[BackgroundSpec], cfg: FabricConfig, topo: Topology,
                 results_dir: Path, state: RunState) -> None:
        self.specs, self.cfg, self.topo, self.state = specs, cfg, topo, state
        self.out = results_dir / BACKGROUND_DIR
        self.senders: list[subprocess.Popen] = []
        self.receivers: list[subprocess.Popen] = []

    def _sent(self, spec: BackgroundSpec) -> Path:
        return self.out / f"{spec.name}{BACKGROUND_SENT_SUFFIX}"

    def _received(self, spec: BackgroundSpec) -> Path:
        return self.out / f"{spec.name}{BACKGROUND_RECEIVED_SUFFIX}"

    def _rate_mbps(self, spec: BackgroundSpec) -> float:
        return offered_mbps(spec, self.topo.host(spec.src).rate_mbps)

    def commands(self, i: int, spec: BackgroundSpec) -> tuple[list[str], list[str]]:
        """The receiver's and the sender's command lines of flow ``i``."""
        src, dst = self.topo.host(spec.src), self.topo.host(spec.dst)
        port = str(BASE_PORT + i)
        me = [sys.executable, "-m", "traffic.background"]
        recv = [*me, "recv", "--dst-ip", dst.ip, "--port", port,
                "--out", str(self._received(spec))]
        send = [*me, "send", "--src-ip", src.ip, "--dst-ip", dst.ip, "--port", port,
                "--dscp", str(self.cfg.qos.tc_to_dscp()[spec.tc]),
                "--frame-bytes", str(frame_size(spec, self.topo.mtu)),
                "--rate-bps", repr(self._rate_mbps(spec) * 1e6),
                "--start-s", repr(spec.start_s), "--duration-s", repr(spec.duration_s or 0.0),
                "--out", str(self._sent(spec))]
        return recv, send

    def start(self, net) -> None:
        """Every receiver, then every sender (waiting for :meth:`go`)."""
        if not self.specs:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        for i, spec in enumerate(self.specs):
            recv, send = self.commands(i, spec)
            for host, cmd, procs, stdin in ((spec.dst, recv, self.receivers, None),
                                            (spec.src, send, self.senders, subprocess.PIPE)):
                out = Path(cmd[-1])  # its --out: the log beside it, <flow>.sent.log
                with open(out.with_suffix(LOG_SUFFIX), "w") as log:
                    p = net.get(host).popen(cmd, stdin=stdin, stdout=log,
                                            stderr=subprocess.STDOUT, text=True)
                procs.append(p)
                self.state.add_process(p.pid, str(out))  # its --out path: this run's alone

    def go(self, t0: float) -> None:
        """The run's clock starts: each sender counts its start from ``t0`` (monotonic)."""
        for p in self.senders:
            if p.stdin is not None:
                with contextlib.suppress(OSError):
                    p.stdin.write(f"{t0!r}\n")
                    p.stdin.close()

    @staticmethod
    def _end(procs: list[subprocess.Popen]) -> None:
        for p in procs:
            if p.stdin is not None:  # a sender never started: it reads end of file and ends
                with contextlib.suppress(OSError):
                    p.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        for p in procs:
            try:
                p.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_senders(self) -> None:
        self._end(self.senders)
        self.senders = []

    def stop(self) -> None:
        """Senders, then receivers (idempotent: the fabric's tear-down calls it too)."""
        self.stop_senders()
        self._end(self.receivers)
        self.receivers = []

    def results(self, clock_t0: float) -> dict[str, dict]:
        """Per flow: what was sent and what arrived, and what was lost between (the frames the
        receiver did not count); a figure a process did not write is None (unknown). Its
        ``series``: [t_s, Mbit/s] over each interval the receiver noted, on the run's clock
        (``clock_t0``: its origin on CLOCK_MONOTONIC, as the endpoints' series count it)."""
        out = {}
        for spec in self.specs:
            sent, got = _read(self._sent(spec)), _read(self._received(spec))
            got["series"] = rates(got.get("series") or [], clock_t0)
            row: dict = {"src": spec.src, "dst": spec.dst, "tc": spec.tc,
                         "offered_mbps": self._rate_mbps(spec),
                         "frame_bytes": frame_size(spec, self.topo.mtu), **sent, **got}
            known = sent.get("sent_packets") is not None and got.get("received_packets") is not None
            row["lost_packets"] = (sent["sent_packets"] - got["received_packets"]
                                   if known else None)
            span = (sent.get("last_s") or 0) - (sent.get("first_s") or 0)
            row["goodput_mbps"] = (round(got["received_bytes"] * 8 / span / 1e6, 3)
                                   if known and span > 0 else None)
            out[spec.name] = row
        return out


def rates(marks: list, clock_t0: float) -> list[list[float]]:
    """The receiver's marks ([monotonic s, bytes so far]) as [t_s, Mbit/s] over each interval,
    at the interval's end, on the run's clock. Pure."""
    return [[round(t - clock_t0, 3), round((b - b0) * 8 / (t - t0) / 1e6, 3)]
            for (t0, b0), (t, b) in zip(marks, marks[1:], strict=False) if t > t0]


def _read(path: Path) -> dict:
    """A process's figures, or nothing if it wrote none."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            return data
    return {}
