"""When the switch agent's jobs run (testbed.agent.schedule, SwitchAgent.due): on fixed grids
that meet, so that jobs due together share a wake-up and a kernel dump. Pure: the agent's jobs
are recorded, not run, on a clock the test moves."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import pytest

from testbed.agent.schedule import COALESCE_S, Periodic, grid_after, offset_slots, window
from testbed.agent.switch import SwitchAgent

TICK, RESYNC, SAMPLE, POLL = 0.010, 0.050, 0.100, 0.100


def test_grid_after_is_strictly_after_and_on_the_grid() -> None:
    assert grid_after(1.0, 0.01, 1.0) == pytest.approx(1.01)
    assert grid_after(1.0, 0.01, 1.0049) == pytest.approx(1.01)
    assert grid_after(1.0, 0.01, 1.0351) == pytest.approx(1.04)
    assert grid_after(1.0, 0.05, 0.9) == pytest.approx(0.95)  # before the anchor too


def test_a_late_run_skips_the_points_it_missed_and_never_repeats_one() -> None:
    p = Periodic.starting(0.0, TICK)
    assert p.due(0.0)
    p.ran(0.0 + COALESCE_S)
    assert p.next == pytest.approx(0.01)
    p.ran(0.0351)  # woken 25 ms late: the next point is the grid's, not three back to back
    assert p.next == pytest.approx(0.04)
    p.ran(0.04 - 0.0005 + COALESCE_S)  # woken half a millisecond early, served as due
    assert p.next == pytest.approx(0.05)
    p.at_once(0.042)
    assert p.next == pytest.approx(0.042)
    p.ran(0.042 + COALESCE_S)
    assert p.next == pytest.approx(0.05)  # back on the grid after an event's tick


def test_window_never_spans_a_short_tick_period() -> None:
    assert window(0.010) == COALESCE_S
    assert window(0.002) == pytest.approx(0.0005)


def test_the_switches_of_one_process_start_their_samples_on_different_whole_ticks() -> None:
    offsets = [offset_slots(i, 6, TICK, SAMPLE) for i in range(6)]
    assert offsets[0] == 0.0
    assert len(set(offsets)) == 6
    assert all(0 <= o < SAMPLE for o in offsets)
    assert all(math.isclose(o / TICK, round(o / TICK), abs_tol=1e-9) for o in offsets)
    assert offset_slots(0, 1, TICK, SAMPLE) == 0.0


class _Agent(SwitchAgent):
    """The loop's scheduling alone: each job records (time, what) instead of running."""

    def __init__(self, clock, log: list, name: str, watchdog: bool = False) -> None:
        self.clock = clock
        self.cfg = SimpleNamespace(tick_period_s=TICK, resync_period_s=RESYNC,
                                   sample_period_s=SAMPLE, credited=[], credit_period_s=TICK)
        self.watchdog = SimpleNamespace(config=SimpleNamespace(
            enabled=watchdog, polling_interval_ms=POLL * 1000))
        self.busy_until = math.inf  # under incast throughout
        self.xoff_until = {(1, 3): math.inf}  # a pause of ours stands on a neighbour
        self.timers = []
        self.log = log
        self.name = name

    def _rec(self, what: str) -> None:
        self.log.append((round(self.clock(), 6), self.name, what))

    def sample(self, every_class: bool = False, resync: bool = False):
        self._rec("sample+resync" if resync else "sample")
        return {}

    def tick(self, stats=None) -> None:
        self._rec("resync")

    def timer_tick(self) -> None:
        self._rec("timer" if self.xoff_until else "timer, no pause")

    def watchdog_poll(self, backlogs=None) -> None:
        self._rec("poll" if backlogs is None else "poll+shared")

    def expire(self) -> None:
        pass


def _run(n: int, seconds: float, watchdog: bool = False, paused: bool = True):
    """n busy switches in one process for ``seconds``: the loop wakes at each due time.
    ``paused``: each has a pause standing on a neighbour (else its queues are busy, but it
    paused nobody)."""
    t = [0.0]
    log: list = []
    agents = [_Agent(lambda: t[0], log, f"s{i}", watchdog) for i in range(n)]
    if not paused:
        for a in agents:
            a.xoff_until = {}
    for i, a in enumerate(agents):
        a.start_loop(0.0, offset_slots(i, n, TICK, SAMPLE))
    wakes = 0
    while t[0] < seconds - 1e-9:
        t[0] = min(a.due() for a in agents)
        wakes += 1
    return wakes, log


def test_a_busy_switch_wakes_once_a_tick_and_its_sample_carries_the_resync() -> None:
    wakes, log = _run(1, 1.0)
    jobs = Counter(what for _t, _s, what in log)
    assert wakes == 100  # ticks, resyncs and samples on one grid: a wake-up a tick
    assert jobs["sample+resync"] == 10  # every sample is a resync slot: one dump for both
    assert jobs["resync"] == 10  # the other resyncs, each 50 ms after a sample
    assert jobs["timer"] == 80
    assert "sample" not in jobs
    times = [t for t, _s, what in log if what != "sample"]
    assert len(times) == len(set(times)) == 100  # no tick ran twice, none was skipped


def test_six_switches_of_one_process_tick_together_and_sample_in_turn() -> None:
    wakes, log = _run(6, 1.0)
    assert wakes == 100  # six switches' ticks share each wake-up
    samples = Counter(t for t, _s, what in log if what.startswith("sample"))
    assert sum(samples.values()) == 60
    assert max(samples.values()) == 1  # no wake-up takes two switches' samples
    per_switch = Counter(s for _t, s, what in log)
    assert set(per_switch.values()) == {100}  # each switch: a job every tick, no more


def test_the_watchdog_poll_shares_the_samples_dump() -> None:
    _wakes, log = _run(1, 1.0, watchdog=True)
    polls = Counter(what for _t, _s, what in log if what.startswith("poll"))
    assert polls == {"poll+shared": 10}


def test_with_no_pause_of_its_own_a_busy_switch_wakes_for_resyncs_and_samples_alone() -> None:
    """Timer ticks act only on a pause the switch sent (XON or a refresh): with none standing,
    waking for them was a wake-up a tick for nothing."""
    wakes, log = _run(1, 1.0, paused=False)
    jobs = Counter(what for _t, _s, what in log)
    assert wakes == 20
    assert jobs == {"sample+resync": 10, "resync": 10}
