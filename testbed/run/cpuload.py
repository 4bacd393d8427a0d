"""How busy the machine's cores were during a run: ``telemetry/cpu.csv`` (its columns are
:data:`testbed.results.telemetry.CPU_COLUMNS`).

Every process of a fabric (BMv2, agents, endpoints) shares the machine's cores; when all of
them are busy, the emulation's timings stop being its own (see :mod:`testbed.analysis.fidelity`).
The sampler reads ``/proc/stat`` (proc(5)): per core, the jiffies spent in each state since
boot; busy is everything but idle and iowait.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from testbed.results.telemetry import CpuRow, cpu_writer


def read_jiffies(text: str) -> list[tuple[int, int]]:
    """Per core (cpu0, cpu1, ...): (busy, total) jiffies from /proc/stat's text."""
    out = []
    for line in text.splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name != "cpu":
            n = [int(v) for v in vals[:8]]  # user nice system idle iowait irq softirq steal
            total = sum(n)
            out.append((total - n[3] - n[4], total))
    return out


def busy_shares(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> list[float]:
    """Each core's busy share (0-100) between two readings."""
    out = []
    for (b0, t0), (b1, t1) in zip(before, after, strict=True):
        out.append(100.0 * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0)
    return out


class CpuSampler(threading.Thread):
    """Samples every core's load into a CSV (:class:`testbed.results.telemetry.CpuRow`) until
    stopped."""

    def __init__(self, path: Path, t0: float, period_s: float = 0.2) -> None:
        super().__init__(daemon=True, name="cpu-sampler")
        self.path, self.t0, self.period_s = path, t0, period_s
        self.stop_event = threading.Event()

    def run(self) -> None:
        stat = Path("/proc/stat")
        prev = read_jiffies(stat.read_text())
        with cpu_writer(self.path) as out:
            while not self.stop_event.wait(self.period_s):
                cur = read_jiffies(stat.read_text())
                shares = busy_shares(prev, cur)
                prev = cur
                out.write(CpuRow(time.monotonic() - self.t0, min(shares),
                                 sum(shares) / len(shares)))
                out.flush()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=2)
