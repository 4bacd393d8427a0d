"""The PFC watchdog state machine (testbed.agent.pfcwd) against SONiC's pfcwd rules, with injected
time: no root, no switch. Times are multiples of 1/8 s, exact in binary, so a boundary such as
"restored exactly restoration_time after the last PFC" is tested as such."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.agent.pfcwd import (
    PfcWatchdog,
    QueueObservation,
    StormDetected,
    StormRestored,
    WatchdogSettings,
)
from testbed.config.models import PfcWatchdogConfig

REPO = Path(__file__).resolve().parent.parent

POLL, DETECT, RESTORE = 0.125, 0.5, 1.0  # seconds
Q = (1, 3)  # (port, class) watched in most tests


def watchdog(action: str = "drop", ports=(1, 2), classes=(3,), **kw) -> PfcWatchdog:
    cfg = PfcWatchdogConfig(enabled=True, polling_interval_ms=int(POLL * 1000),
                            detection_time_ms=int(DETECT * 1000),
                            restoration_time_ms=int(RESTORE * 1000), action=action, **kw)
    return PfcWatchdog(cfg, ports, classes)


@dataclass
class FakeQueue:
    """One queue's counters, as the agent would read them."""

    paused: bool = True
    backlog: int = 5
    sent: int = 100
    drops: int = 0
    last_pfc: float | None = 0.0

    def obs(self) -> QueueObservation:
        return QueueObservation(self.paused, self.backlog, self.sent, self.drops, self.last_pfc)


def poll(wd: PfcWatchdog, k: int, **queues: FakeQueue) -> list:
    """The k-th poll (at k * POLL); queues named like q1_3 for (1, 3)."""
    obs = {tuple(int(x) for x in name[1:].split("_")): q.obs() for name, q in queues.items()}
    return wd.poll(k * POLL, obs)


def detect(wd: PfcWatchdog, q: FakeQueue, start: int = 0) -> tuple[int, StormDetected]:
    """Poll a stuck queue until the watchdog detects it: the poll number, and the action."""
    for k in range(start, start + 100):
        if acts := poll(wd, k, q1_3=q):
            return k, acts[0]
    raise AssertionError("never detected")


def stuck_until_detected(wd: PfcWatchdog, q: FakeQueue, start: int = 0) -> int:
    return detect(wd, q, start)[0]


# -- detection --------------------------------------------------------------------------

def test_detected_after_detection_time_of_stuck_polls_and_not_one_poll_earlier() -> None:
    wd, q = watchdog(), FakeQueue()
    assert poll(wd, 0, q1_3=q) == []  # first sight: no earlier counter to compare with
    left = []
    for k in range(1, 4):  # stuck polls 1-3: time runs down
        assert poll(wd, k, q1_3=q) == []
        left.append(wd.queues[Q].detection_left_ms)
    assert left == [375, 250, 125]
    (act,) = poll(wd, 4, q1_3=q)  # the 4th stuck poll: 4 x 125 ms = detection_time
    assert act == StormDetected(1, 3, "drop", 4 * POLL, 5)
    assert wd.storm(1, 3) and wd.queues[Q].storms == 1 and wd.queues[Q].detection_left_ms == 0


def test_detection_time_not_a_multiple_of_the_poll_rounds_up() -> None:
    cfg = PfcWatchdogConfig(enabled=True, polling_interval_ms=100, detection_time_ms=250)
    wd = PfcWatchdog(cfg, [1], [3])
    q = FakeQueue()
    got = [wd.poll(k * 0.1, {Q: q.obs()}) for k in range(4)]
    assert [bool(a) for a in got] == [False, False, False, True]  # 3 stuck polls >= 250 ms


@pytest.mark.parametrize("change", ["sends", "unpauses", "empties"])
def test_a_queue_that_is_not_stuck_gets_its_whole_detection_time_back(change: str) -> None:
    wd, q = watchdog(), FakeQueue()
    for k in range(4):  # first sight and three stuck polls: one poll from detection
        assert poll(wd, k, q1_3=q) == []
    if change == "sends":
        q.sent += 1
    elif change == "unpauses":
        q.paused = False
    else:
        q.backlog = 0
    assert poll(wd, 4, q1_3=q) == []
    assert wd.queues[Q].detection_left_ms == int(DETECT * 1000)
    q.paused, q.backlog = True, 5
    # counting starts again from the poll that was not stuck: four more stuck polls
    assert stuck_until_detected(wd, q, start=5) == 8


def test_a_queue_missing_from_a_poll_keeps_its_state() -> None:
    wd, q = watchdog(), FakeQueue()
    for k in range(3):
        poll(wd, k, q1_3=q)
    assert poll(wd, 3) == []  # no counters for it this time: nothing learnt, nothing lost
    assert wd.queues[Q].detection_left_ms == 250
    assert stuck_until_detected(wd, q, start=4) == 5


# -- restoration ------------------------------------------------------------------------

def test_restored_only_after_restoration_time_without_pfc() -> None:
    wd, q = watchdog(), FakeQueue()
    q.last_pfc = 3 * POLL  # the storm's last frame before the detection
    k_det = stuck_until_detected(wd, q)
    k_restore = 3 + int(RESTORE / POLL)  # exactly restoration_time after the last PFC
    for k in range(k_det + 1, k_restore):
        assert poll(wd, k, q1_3=q) == [], k
    (act,) = poll(wd, k_restore, q1_3=q)
    assert isinstance(act, StormRestored) and (act.port, act.tc) == Q
    assert act.storm_s == pytest.approx((k_restore - k_det) * POLL)
    assert not wd.storm(1, 3)
    assert wd.queues[Q].detection_left_ms == int(DETECT * 1000)


def test_a_pfc_frame_during_the_storm_postpones_restoration() -> None:
    wd, q = watchdog(), FakeQueue()
    k_det = stuck_until_detected(wd, q)  # the storm's frames stopped at t = 0
    k_due = int(RESTORE / POLL)  # when it would be restored without another frame
    frame_at = (k_due - 0.5) * POLL  # the storm goes on: one more frame, just before
    k_restore = k_due + int(RESTORE / POLL)
    for k in range(k_det + 1, k_restore):
        if k == k_due:
            q.last_pfc = frame_at
        assert poll(wd, k, q1_3=q) == [], k
    assert isinstance(poll(wd, k_restore, q1_3=q)[0], StormRestored)


def test_restored_queue_is_judged_afresh() -> None:
    wd, q = watchdog(), FakeQueue()
    q.last_pfc = None  # never a frame: restored at the first poll of the storm
    k_det = stuck_until_detected(wd, q)
    assert isinstance(poll(wd, k_det + 1, q1_3=q)[0], StormRestored)
    # still stuck, and its sent counter unchanged since before the storm: the full detection
    # time again, then a second storm
    assert stuck_until_detected(wd, q, start=k_det + 2) == k_det + 1 + 4
    assert wd.queues[Q].storms == 2


# -- actions ----------------------------------------------------------------------------

def test_drop_counts_the_purged_queue_and_later_drops() -> None:
    wd, q = watchdog("drop"), FakeQueue(backlog=5, drops=7)
    k_det, act = detect(wd, q)
    assert act == StormDetected(1, 3, "drop", k_det * POLL, 5)
    assert act.ignores_pfc and act.detail == "action=drop backlog_packets=5"
    assert wd.queues[Q].dropped == 5  # the purged backlog
    # the agent's gates keep the counters cumulative and count the purge as drops
    q.backlog, q.drops = 0, 7 + 5 + 3
    assert poll(wd, k_det + 1, q1_3=q) == []
    assert wd.queues[Q].dropped == 5 + 3
    q.drops += 2
    (done,) = poll(wd, int(RESTORE / POLL), q1_3=q)
    assert isinstance(done, StormRestored) and done.action == "drop"
    assert done.dropped == 10
    assert done.detail == f"after {done.storm_s:.3f} s, dropped=10"


def test_what_the_drop_gate_discards_after_the_last_poll_is_the_watchdogs_too() -> None:
    """The drop gate goes on discarding until the agent restores the queue, after the poll
    that decided the restoration: read as the gate comes off, those packets are the action's
    (dropped_total, what the fidelity guard excuses), not losses; storms add up, and the
    drops of a queue not in a storm are not the watchdog's."""
    wd, q = watchdog("drop"), FakeQueue(backlog=5, drops=7)
    k_det, _act = detect(wd, q)
    q.backlog, q.drops = 0, 7 + 5 + 3
    (done,) = poll(wd, k_det + int(RESTORE / POLL), q1_3=q)
    assert isinstance(done, StormRestored) and done.dropped == 8
    assert wd.dropped_total(1, 3, q.drops + 1) == 8  # not settled: one short
    assert wd.settle_dropped(1, 3, q.drops + 1) == 9  # one more came before the restore
    assert wd.dropped_total(1, 3, q.drops + 1) == 9
    assert wd.dropped_total(1, 3, q.drops + 50) == 9  # later drops are the queue's own
    # a second storm adds to the first
    q.drops += 1
    k2, _ = detect(wd, FakeQueue(backlog=2, drops=q.drops), start=k_det + 20)
    assert wd.dropped_total(1, 3, q.drops + 2 + 4) == 9 + 6
    assert wd.dropped_total(2, 3, 100) == 0  # a queue never in a storm


@pytest.mark.parametrize("action, ignores", [("forward", True), ("alert", False)])
def test_forward_and_alert_produce_their_records_and_drop_nothing(action: str,
                                                                  ignores: bool) -> None:
    wd, q = watchdog(action), FakeQueue(drops=7)
    acts = [poll(wd, k, q1_3=q) for k in range(5)]
    (det,) = acts[4]
    assert det == StormDetected(1, 3, action, 4 * POLL, 5)
    assert det.ignores_pfc is ignores and det.detail == f"action={action} backlog_packets=5"
    q.drops += 4  # not the watchdog's doing: not counted
    (done,) = poll(wd, int(RESTORE / POLL), q1_3=q)
    assert done == StormRestored(1, 3, action, RESTORE, RESTORE - 4 * POLL, 0)


# -- which queues -----------------------------------------------------------------------

def test_queues_not_watched_are_ignored() -> None:
    wd = watchdog(ports=(1,), classes=(3,))
    q = FakeQueue()
    for k in range(10):  # a stuck queue on an unwatched port, and in a lossy class
        assert poll(wd, k, q2_3=q, q1_4=q) == []
    assert set(wd.queues) == {Q}


def test_disabled_watches_nothing() -> None:
    wd = PfcWatchdog(PfcWatchdogConfig(enabled=False), [1, 2], [3, 4])
    assert wd.queues == {} and wd.ports == []
    assert all(wd.poll(k * POLL, {Q: FakeQueue().obs()}) == [] for k in range(10))


def test_several_queues_are_independent() -> None:
    wd = watchdog(ports=(1, 2), classes=(3, 4))
    a, b, c = FakeQueue(), FakeQueue(), FakeQueue()
    seen: dict[int, list] = {}
    for k in range(12):
        if k < 6:
            b.sent += 1  # (2, 3) drains until poll 6, then is stuck as well
        c.paused = k % 2 == 0  # (1, 4): paused every other poll, never stuck for long
        a.last_pfc = b.last_pfc = k * POLL  # the storms go on: neither is restored
        if acts := poll(wd, k, q1_3=a, q2_3=b, q1_4=c):
            seen[k] = acts
    assert {k: [(x.port, x.tc) for x in v] for k, v in seen.items()} == {4: [(1, 3)],
                                                                       9: [(2, 3)]}
    assert not wd.storm(1, 4) and not wd.storm(2, 4)


@pytest.mark.parametrize("offset", [0.001, 0.03, 0.0625, 0.1, 0.124])
def test_detection_latency_within_detection_time_plus_polling_interval(offset: float) -> None:
    """A queue that stops sending at t0 (paused, packets waiting) is detected within
    [detection_time, detection_time + polling_interval] of t0, wherever t0 falls between two
    polls: SONiC's bound."""
    wd = watchdog()
    t0 = 2 * POLL + offset
    for k in range(40):
        now = k * POLL
        sent = int(min(now, t0) * 10_000)  # 10 packets a millisecond until t0
        obs = QueueObservation(paused=now >= t0, backlog_packets=5, sent_packets=sent, drops=0,
                               last_pfc_at=min(now, t0))
        if acts := wd.poll(now, {Q: obs}):
            latency = acts[0].at - t0
            assert DETECT <= latency <= DETECT + POLL, latency
            return
    raise AssertionError("never detected")


# -- the agent's config -----------------------------------------------------------------

def test_from_agent_takes_the_models_defaults_and_this_switchs_ports() -> None:
    assert PfcWatchdog.from_agent(None, [1, 2], [3]).action == PfcWatchdogConfig().action
    assert PfcWatchdog.from_agent({"enabled": True}, [1, 2], [3]).action == "drop"
    assert PfcWatchdog.from_agent(None, [1, 2], [3]).queues == {}
    wd = PfcWatchdog.from_agent({"enabled": True, "ports": [2, 9]}, [1, 2], [3, 4])
    assert list(wd.queues) == [(2, 3), (2, 4)]  # port 9 is not this switch's


def test_agent_config_round_trip() -> None:
    """What testbed.agent.agent_config writes is what the watchdog reads back."""
    from testbed.agent import AgentPort, agent_config
    from testbed.config.models import QosConfig

    cfg = PfcWatchdogConfig(enabled=True, ports=["sw:2", "other:1"], detection_time_ms=300)
    d = agent_config("sw", [AgentPort(n, f"p{n}", 10.0, [1000] * 8) for n in (1, 2)],
                     QosConfig(), "agt", 0.01, 0.1, "/tmp", 9014, cfg)
    wd = PfcWatchdog.from_agent(d["watchdog"], [1, 2], d["lossless"])
    assert wd.ports == [2] and wd.action == "drop"
    assert wd.config == WatchdogSettings(True, 300, 800, 100, "drop")


def test_the_agent_reads_its_watchdog_settings_without_pydantic() -> None:
    """The switch agent starts without importing pydantic (slow on a loaded machine): the
    settings its config file holds are complete and need no model."""
    code = ("import sys, testbed.agent\n"
            "from testbed.agent.pfcwd import PfcWatchdog\n"
            f"wd = PfcWatchdog.from_agent({PfcWatchdogConfig(enabled=True).model_dump()!r}, "
            "[1], [3])\n"
            "assert list(wd.queues) == [(1, 3)], wd.queues\n"
            "assert 'pydantic' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def agent_without_io(watchdog: dict | None):
    """A SwitchAgent with its config and port records but none of the sockets, gates or
    files its constructor opens (those need root): enough for its watchdog wiring."""
    from testbed.agent import AgentConfig, AgentPort, PortRuntime, SwitchAgent

    port = AgentPort(1, "p1", 10.0, [1000] * 8)
    agent = SwitchAgent.__new__(SwitchAgent)
    agent.cfg = AgentConfig("sw", [port], [], 0, [3], "agt", 0.01, 0.1, "/tmp",
                            watchdog=watchdog, resynced=[3])
    agent.ports = {1: PortRuntime(port, None, None)}  # type: ignore[arg-type]
    return agent


def test_the_agents_default_action_is_the_models() -> None:
    """It was "alert" in the agent while the config model said "drop"."""
    assert agent_without_io(None).wd_action == PfcWatchdogConfig().action == "drop"
    assert agent_without_io({"enabled": True}).wd_action == "drop"


def test_the_agents_pause_code_reads_the_storm_from_the_watchdog() -> None:
    agent = agent_without_io(PfcWatchdogConfig(enabled=True).model_dump())
    wd = agent.ports[1].wd[3]
    assert not wd.storm  # the watchdog not made yet: nothing can be in a storm
    queues = agent.watchdog.queues  # made on first use: binds each watched queue's state
    assert wd.queue is queues[Q] and not wd.storm
    agent.watchdog.queues[Q].storm = True
    assert wd.storm and not agent.ports[1].wd[4].storm  # class 4 is not watched
