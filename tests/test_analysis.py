"""What a run's telemetry says about deadlock and the PFC watchdog (testbed.analysis.deadlock), on
series and events written here: pure data, no root needed.

The results folders are written with the agent's own column lists, so a renamed or reordered
column in the agent breaks these tests rather than the analysis of a real run.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from testbed.analysis.deadlock import (
    Detection,
    StuckQueue,
    deadlock_summary,
    detections,
    stalls,
    stuck_queues,
    telemetry_summary,
)
from testbed.results.telemetry import (
    EVENT_COLUMNS,
    TELEMETRY_COLUMNS,
    EventRow,
    QueueId,
    TelemetryRow,
)

Q: QueueId = ("leaf1", 3, 3)


def held(t: float, *, packets: int = 4, sent: int = 100, pfc: int = 7, paused: bool = True,
         backlog: int | None = None) -> TelemetryRow:
    """A sample of a queue: by default paused with packets waiting."""
    return TelemetryRow(t_s=t, switch=Q[0], port=Q[1], tc=Q[2],
                        backlog_bytes=1000 * packets if backlog is None else backlog,
                        backlog_packets=packets, drops=0, sent_bytes=0, sent_packets=sent,
                        paused=paused, pfc_rx=pfc, paused_s=0.0)


def every(start: float, end: float, step: float = 0.1) -> list[float]:
    n = round((end - start) / step)
    return [round(start + i * step, 3) for i in range(n + 1)]


def deadlocked(times: list[float], pfc0: int = 7) -> list[TelemetryRow]:
    """Packets waiting at every sample, nothing sent, a PFC refresh every fifth sample."""
    return [held(t, packets=3 + i % 2, pfc=pfc0 + i // 5) for i, t in enumerate(times)]


# -- stuck_queues -----------------------------------------------------------------------------

def test_a_deadlocked_queue_is_stuck_over_the_window() -> None:
    samples = deadlocked(every(2.0, 4.0))
    assert stuck_queues({Q: samples}, 2.0, 4.0, [3]) == [
        StuckQueue("leaf1", 3, 3, backlog_bytes_min=3000, pfc_frames=4, window_s=2.0)]


def test_samples_outside_the_window_do_not_count() -> None:
    """It sent and drained before the window (while the senders ran): still stuck in it."""
    before = [held(0.5, packets=0, sent=10, pfc=0), held(1.0, packets=9, sent=60, pfc=3)]
    after = deadlocked(every(2.0, 4.0))
    (found,) = stuck_queues({Q: before + after}, 2.0, 4.0, [3])
    assert found.pfc_frames == 4 and found.backlog_bytes_min == 3000


@pytest.mark.parametrize(("why", "change"), [
    ("one sample empty", lambda s, i: held(s.t_s, packets=0, pfc=s.pfc_rx) if i == 10 else s),
    ("it sent", lambda s, i: held(s.t_s, packets=s.backlog_packets, sent=101, pfc=s.pfc_rx)
     if i >= 15 else s),
    ("no PFC arrived", lambda s, i: held(s.t_s, packets=s.backlog_packets, pfc=7)),
])
def test_not_stuck(why: str, change) -> None:
    samples = [change(s, i) for i, s in enumerate(deadlocked(every(2.0, 4.0)))]
    assert stuck_queues({Q: deadlocked(every(2.0, 4.0))}, 2.0, 4.0, [3]), "the control"
    assert stuck_queues({Q: samples}, 2.0, 4.0, [3]) == [], why


def test_too_few_samples_cover_the_window() -> None:
    """The agent was not sampling for part of the window: no verdict, either way."""
    assert stuck_queues({Q: deadlocked([3.0])}, 2.0, 4.0, [3]) == []
    assert stuck_queues({Q: deadlocked(every(2.0, 3.5))}, 2.0, 4.0, [3]) == []  # 75 %
    assert stuck_queues({Q: deadlocked(every(2.0, 3.7))}, 2.0, 4.0, [3]) != []  # 85 %
    assert stuck_queues({Q: deadlocked(every(2.3, 4.0))}, 2.0, 4.0, [3]) != []


def test_only_the_given_classes() -> None:
    lossy: QueueId = ("leaf1", 3, 0)
    series = {Q: deadlocked(every(2.0, 4.0)), lossy: deadlocked(every(2.0, 4.0))}
    assert [(s.switch, s.port, s.tc) for s in stuck_queues(series, 2.0, 4.0, [3])] == [Q]
    assert len(stuck_queues(series, 2.0, 4.0, [0, 3])) == 2
    assert stuck_queues(series, 2.0, 4.0, []) == []


# -- stalls -----------------------------------------------------------------------------------

def test_a_stall_runs_from_its_first_held_sample_to_its_last() -> None:
    samples = [held(0.0, packets=0, paused=False), held(1.0), held(1.1), held(1.2),
               held(1.3, paused=False), held(1.4, paused=False, packets=0)]
    assert stalls({Q: samples}, [3]) == [(Q, 1.0, 1.2)]


def test_a_stall_ends_when_the_queue_sends_and_one_still_open_at_the_end_counts() -> None:
    samples = [held(1.0), held(1.1), held(1.2, sent=101), held(1.3, sent=101),
               held(1.4, sent=101)]
    assert stalls({Q: samples}, [3]) == [(Q, 1.0, 1.1), (Q, 1.2, 1.4)]


def test_no_stall() -> None:
    assert stalls({Q: [held(1.0)]}, [3]) == []  # one sample is not a stretch
    assert stalls({Q: [held(t, paused=False) for t in (1, 2, 3)]}, [3]) == []  # slow, unpaused
    assert stalls({Q: [held(t, packets=0) for t in (1, 2, 3)]}, [3]) == []  # paused, empty
    assert stalls({Q: [held(t) for t in (1, 2, 3)]}, [0]) == []  # another class
    # sending through the pause (the watchdog's forward action): never the same count twice
    assert stalls({Q: [held(t, sent=100 + t) for t in (1, 2, 3)]}, [3]) == []


# -- detections -------------------------------------------------------------------------------

def ev(t: float, event: str, q: QueueId = Q) -> EventRow:
    return EventRow(t, *q, event)


def test_detection_latency_is_from_the_pause_still_in_force() -> None:
    events = [ev(0.5, "pause"), ev(0.9, "resume"),     # an earlier pause that ended
              ev(1.0, "pause"), ev(1.25, "storm_detected"), ev(3.0, "storm_restored")]
    assert detections(events) == [Detection("leaf1", 3, 3, stalled_at_s=1.0,
                                             detected_at_s=1.25, latency_s=0.25,
                                             restored_at_s=3.0)]


def test_an_expired_pause_is_not_in_force() -> None:
    (d,) = detections([ev(1.0, "pause"), ev(2.0, "expire"), ev(2.5, "storm_detected")])
    assert (d.stalled_at_s, d.latency_s) == (2.5, 0.0)


def test_a_detection_without_a_preceding_pause_has_no_latency() -> None:
    (d,) = detections([ev(2.0, "storm_detected")])
    assert (d.stalled_at_s, d.detected_at_s, d.latency_s, d.restored_at_s) == (2.0, 2.0, 0.0,
                                                                               None)


def test_detections_per_queue_and_restoration_only_of_an_open_storm() -> None:
    other: QueueId = ("spine1", 1, 3)
    events = [ev(0.1, "storm_restored"),                  # nothing open: ignored
              ev(1.0, "pause"), ev(1.1, "pause", other),
              ev(1.3, "storm_detected", other),
              ev(1.35, "storm_restored"),                  # leaf1's storm is not open yet
              ev(1.4, "storm_detected"),
              ev(2.0, "storm_restored", other),
              ev(2.5, "pause", other), ev(2.7, "storm_detected", other)]
    got = detections(events)
    assert [(d.switch, d.stalled_at_s, d.latency_s, d.restored_at_s) for d in got] == [
        ("spine1", 1.1, 0.2, 2.0), ("leaf1", 1.0, 0.4, None), ("spine1", 2.5, 0.2, None)]


# -- a results folder, as the agents write it --------------------------------------------------

TEL = [c for c, _ in TELEMETRY_COLUMNS]
EV = [c for c, _ in EVENT_COLUMNS]


def write_run(run: Path, switch: str, rows: list[dict], events: list[dict]) -> None:
    tel = run / "telemetry"
    tel.mkdir(parents=True, exist_ok=True)
    with open(tel / f"{switch}.telemetry.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, TEL, restval="")  # the agent writes "" where it has no value
        w.writeheader()
        w.writerows({"switch": switch, **r} for r in rows)
    with open(tel / f"{switch}.events.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, EV, restval="")
        w.writeheader()
        w.writerows({"switch": switch, "quanta": 0, "reaction_us": "", "detail": "", **e}
                    for e in events)


def row(t: float, port: int, tc: int, backlog: int, packets: int, sent: int, pfc: int,
        paused: int = 1, drops: int = 0, paused_s: float = 0.0, **extra) -> dict:
    return {"t_s": f"{t:.6f}", "port": port, "tc": tc, "backlog_bytes": backlog,
            "backlog_packets": packets, "drops": drops, "sent_bytes": sent * 1000,
            "sent_packets": sent, "paused": paused, "pfc_rx": pfc, "paused_s": paused_s,
            **extra}


@pytest.fixture
def deadlock_run(tmp_path: Path) -> Path:
    """Senders stop at 5 s. leaf1:3:3 stays full, paused and refreshed to the end (9 s);
    spine1:1:3 drains and sends; leaf1:1:0 (lossy) is full but another class."""
    leaf, spine = [], []
    for i, t in enumerate(every(4.0, 9.0)):
        leaf.append(row(t, 3, 3, 8000 + 100 * ((i + 1) % 3), 8, 50, 10 + i // 5,
                        phantom_drift_bytes=-200 if i % 2 else 300, held_bytes=100))
        leaf.append(row(t, 1, 0, 5000, 5, 20, 0, paused=0))
        spine.append(row(t, 1, 3, 4000 if t < 6 else 0, 4 if t < 6 else 0,
                         30 if t < 6 else 34, 2, paused=int(t < 6)))
    write_run(tmp_path, "leaf1", leaf, [
        {"t_s": "4.500000", "port": 3, "tc": 3, "event": "pause", "quanta": 65535,
         "reaction_us": "310"},
        {"t_s": "4.800000", "port": 3, "tc": 3, "event": "storm_detected",
         "detail": "alert"}])
    write_run(tmp_path, "spine1", spine, [
        {"t_s": "4.200000", "port": 1, "tc": 3, "event": "pause", "quanta": 65535},
        {"t_s": "6.000000", "port": 1, "tc": 3, "event": "resume"}])
    return tmp_path


def test_deadlock_summary_names_the_queue_stuck_after_the_senders_stop(deadlock_run) -> None:
    s = deadlock_summary(deadlock_run, senders_stop_s=5.0, tcs=[3], grace_s=1.0)
    assert s["window_s"] == [6.0, 9.0]
    assert s["deadlock"] is True
    assert s["stuck_after_stop"] == [{"switch": "leaf1", "port": 3, "tc": 3,
                                      "backlog_bytes_min": 8000, "pfc_frames": 6,
                                      "window_s": 3.0}]
    assert s["watchdog_detections"] == [
        {"switch": "leaf1", "port": 3, "tc": 3, "stalled_at_s": 4.5, "detected_at_s": 4.8,
         "latency_s": 0.3, "restored_at_s": None}]


def test_deadlock_summary_of_a_run_that_drained(deadlock_run) -> None:
    # the run ended before stop + grace: no samples to judge, no verdict of deadlock
    late = deadlock_summary(deadlock_run, senders_stop_s=8.5, tcs=[3])
    assert (late["window_s"], late["deadlock"]) == ([9.5, 9.0], False)
    # class 0 alone: its full queue never got PFC, and the stuck class-3 queue is not judged
    assert deadlock_summary(deadlock_run, senders_stop_s=5.0, tcs=[0])["deadlock"] is False
    # only spine1's queue, which drained and sent after the stop: no deadlock
    (deadlock_run / "telemetry" / "leaf1.telemetry.csv").unlink()
    s = deadlock_summary(deadlock_run, senders_stop_s=5.0, tcs=[3])
    assert (s["deadlock"], s["stuck_after_stop"]) == (False, [])
    assert len(s["watchdog_detections"]) == 1  # the events are read all the same


def test_telemetry_summary(deadlock_run) -> None:
    s = telemetry_summary(deadlock_run)
    assert s["duration_s"] == 9.0
    by = {(q["switch"], q["port"], q["tc"]): q for q in s["queues"]}
    # leaf1:1:0 sent 20 packets, so it is listed; the stuck one and spine1's too
    assert set(by) == {("leaf1", 1, 0), ("leaf1", 3, 3), ("spine1", 1, 3)}
    stuck = by[("leaf1", 3, 3)]
    assert stuck["max_backlog_bytes"] == 8200
    assert (stuck["sent_packets"], stuck["sent_bytes"], stuck["pfc_rx"]) == (50, 50_000, 20)
    # |drift| over 51 samples with packets waiting: 25 of 200, 26 of 300
    assert (stuck["drift_median_bytes"], stuck["drift_p99_bytes"]) == (300, 300)
    assert by[("spine1", 1, 3)]["drift_median_bytes"] is None  # no drift column there
    assert s["drift_bytes"] == {"samples": 51, "median": 300, "p99": 300}
    assert s["held_bytes"] == {"samples": 51, "median": 100, "p99": 100}
    assert s["events"] == {"pause": 2, "storm_detected": 1, "resume": 1}


def test_telemetry_summary_drift_percentiles_and_idle_queues(tmp_path: Path) -> None:
    """Drift counts only while packets wait; a queue that never sent, dropped or got PFC is
    left out."""
    rows = [row(float(t), 2, 3, 1000 * (t > 0), int(t > 0), t, 0, paused=0,
                phantom_drift_bytes=d) for t, d in enumerate([-999, -10, 20, -30, 40])]
    rows += [row(float(t), 4, 3, 0, 0, 0, 0, paused=0) for t in range(5)]
    write_run(tmp_path, "leaf2", rows, [])
    s = telemetry_summary(tmp_path)
    assert [(q["port"], q["drift_median_bytes"], q["drift_p99_bytes"]) for q in s["queues"]] \
        == [(2, 30, 40)]  # -999 was at an empty queue
    assert s["drift_bytes"] == {"samples": 4, "median": 30, "p99": 40}
    assert s["held_bytes"] == {"samples": 0, "median": None, "p99": None}
    assert s["duration_s"] == 4.0 and s["events"] == {}


def test_telemetry_summary_of_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "telemetry").mkdir()
    s = telemetry_summary(tmp_path)
    assert (s["duration_s"], s["queues"], s["events"]) == (0.0, [], {})
