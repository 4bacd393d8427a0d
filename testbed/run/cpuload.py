"""How busy the machine's cores were during a run: ``telemetry/cpu.csv`` (its columns are
:data:`testbed.results.telemetry.CPU_COLUMNS`).

Every process of a fabric (BMv2, agents, endpoints) shares the machine's cores; when all of
them are busy, the emulation's timings stop being its own (see :mod:`testbed.analysis.fidelity`).
The sampler reads ``/proc/stat`` (proc(5)): per core, the jiffies spent in each state since
boot; busy is everything but idle and iowait. Busy includes *steal*: on a virtual machine, the
time its virtual CPUs were ready to run while the hypervisor ran something else. A core stolen
from is lost to the fabric as surely as one busy with it, so it counts as busy; the sampler
also records the steal alone, so that a verdict can say when the machine's own host, not the
fabric, took the cores.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import NamedTuple

from testbed.results.telemetry import CpuRow, cpu_writer


class Jiffies(NamedTuple):
    """One core's jiffies since boot: busy (steal included), all of them, and steal alone."""

    busy: int
    total: int
    steal: int = 0


def read_jiffies(text: str) -> list[Jiffies]:
    """Per core (cpu0, cpu1, ...): its jiffies from /proc/stat's text."""
    out = []
    for line in text.splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name != "cpu":
            n = [int(v) for v in vals[:8]]  # user nice system idle iowait irq softirq steal
            n += [0] * (8 - len(n))  # a kernel too old to count steal has none to say
            total = sum(n)
            out.append(Jiffies(total - n[3] - n[4], total, n[7]))
    return out


def busy_shares(before: list[Jiffies], after: list[Jiffies]) -> list[float]:
    """Each core's busy share (0-100) between two readings."""
    return [100.0 * (b.busy - a.busy) / (b.total - a.total) if b.total > a.total else 0.0
            for a, b in zip(before, after, strict=True)]


def steal_share(before: list[Jiffies], after: list[Jiffies]) -> float:
    """The share (0-100) of all the cores' time between two readings that the hypervisor gave
    to others (steal)."""
    total = sum(b.total - a.total for a, b in zip(before, after, strict=True))
    return 100.0 * sum(b.steal - a.steal for a, b in zip(before, after, strict=True)) / total \
        if total > 0 else 0.0


class CpuSampler(threading.Thread):
    """Samples every core's load into a CSV (:class:`testbed.results.telemetry.CpuRow`) until
    stopped."""

    def __init__(self, path: Path, t0: float, period_s: float = 0.2) -> None:
        super().__init__(daemon=True, name="cpu-sampler")
        self.path, self.t0, self.period_s = path, t0, period_s
        self.stop_event = threading.Event()
        self.stat = Path("/proc/stat")
        self.first = read_jiffies(self.stat.read_text())

    def steal_so_far(self) -> float:
        """The steal share (0-100) of the cores' time since the sampler started."""
        return steal_share(self.first, read_jiffies(self.stat.read_text()))

    def run(self) -> None:
        prev = self.first
        with cpu_writer(self.path) as out:
            while not self.stop_event.wait(self.period_s):
                cur = read_jiffies(self.stat.read_text())
                shares = busy_shares(prev, cur)
                out.write(CpuRow(time.monotonic() - self.t0, min(shares),
                                 sum(shares) / len(shares), steal_share(prev, cur)))
                prev = cur
                out.flush()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=2)
