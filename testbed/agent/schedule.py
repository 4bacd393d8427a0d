"""When the switch agent's periodic jobs run: each on a fixed grid of its own period, the grids
laid so that jobs fall due together and share one wake-up (and one kernel dump).

Why: the agents' CPU under incast was mostly wake-ups, not work. Each job used to be rescheduled
``period`` after it last ran, so a 10 ms tick, a 50 ms resync, a 100 ms sample and a 100 ms
watchdog poll drifted apart and each woke the agent on its own; one process serving six
switches spread every switch's ticks over the period on purpose, so six switches' ticks took
six wake-ups. A wake-up costs a context switch and the interpreter's way through the loop
whatever it then does (the kernel's task switch alone was a tenth of the agents' samples under
perf). Here every job of an agent is pinned to ``anchor + k * period``: the ticks of every
switch a process serves share one grid, and a switch's resyncs, samples and watchdog polls start
on one slot of it, so at the default periods (10, 50, 100, 100 ms) each lands on a tick.
Samples are the heavy job (a kernel dump, the register reads, a row per queue): the switches
of one process take theirs on different slots, so a PFC frame never waits behind them all.

Pure logic: no clock of its own, unit-tested without a switch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Jobs due within this long of each other run in one wake-up (a job runs at most this early).
#: Grids whose periods are multiples of the tick period meet to within float rounding, which
#: this absorbs; so do grids that nearly meet.
COALESCE_S = 0.001


def grid_after(anchor: float, period: float, t: float) -> float:
    """The first point ``anchor + k * period`` (k an integer) strictly after ``t``."""
    return anchor + (math.floor((t - anchor) / period) + 1) * period


@dataclass
class Periodic:
    """One job's grid: due at ``next``, then at the grid's next point past the run."""

    anchor: float
    period: float
    next: float

    @classmethod
    def starting(cls, anchor: float, period: float) -> Periodic:
        return cls(anchor, period, anchor)

    def due(self, soon: float) -> bool:
        return self.next <= soon

    def ran(self, soon: float) -> None:
        """The job ran at a wake-up that served everything due up to ``soon``: its next point
        is past that, so the same point never runs twice, and a late wake-up skips the points
        it missed instead of running them back to back."""
        self.next = grid_after(self.anchor, self.period, soon)

    def at_once(self, now: float) -> None:
        """Run at the next wake-up (an event wants it); afterwards the grid resumes."""
        self.next = min(self.next, now)


def window(tick_period_s: float) -> float:
    """How far ahead a wake-up serves what is due: :data:`COALESCE_S`, but never so much of a
    short tick period that a tick could run twice in one period."""
    return min(COALESCE_S, tick_period_s / 4)


def offset_slots(index: int, count: int, tick_period_s: float, sample_period_s: float) -> float:
    """Where on the tick grid the ``index``-th of ``count`` switches served by one process
    starts its resyncs, samples and polls: spread over the sample period, rounded to a whole
    tick so that they land on a tick wake-up."""
    slots = max(1, round(sample_period_s / tick_period_s))
    return (index * slots // count) * tick_period_s
