"""PFC deadlock and the PFC watchdog on a real fabric: the shipped scenarios, run through the
scenario runner against real BMv2, kernel queues and RoCE endpoints.

* watchdog off: the deadlock forms 5 runs out of 5 and outlives the senders;
* watchdog on (drop): every queue that stays stuck is detected within detection_time +
  polling_interval, the cycle moves again, and each queue is restored after restoration_time
  without PFC, 5 runs out of 5;
* control run with every link up: no deadlock, no watchdog event;
* a host that storms PAUSE, with the watchdog off and on.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from testbed.analysis.deadlock import load_events, load_telemetry, routed_queues, stalls
from testbed.analysis.fidelity import verdict_problem
from testbed.fabric.measure import peer_ports
from testbed.run.scenario import Scenario, load_scenario
from testbed.run.scenario_run import run_scenario
from traffic.wire import NUM_TCS

#: Four flows of 8 QPs at line rate on six switches run two cores near their limit; CI runs
#: them (about 3.5 minutes on an idle 2-core machine). Each claim rests on faithful runs.
pytestmark = pytest.mark.bmv2

REPO = Path(__file__).resolve().parent.parent
RUNS = 5
#: Scheduling slack on this 2-core machine, on top of SONiC's detection bound.
SLACK_S = 0.05


def cycle_queues(sc: Scenario) -> set[tuple[str, int, int]]:
    """The four buffers of the scenario's cycle: the class-3 queues its bounce routes send
    through, each the egress queue that holds what the next switch on the cycle will not
    take."""
    return routed_queues(sc.topo, sc.extras.routes, 3)


def run(name: str, tmp: Path) -> tuple[Scenario, dict, Path]:
    sc = load_scenario(REPO / "scenarios" / f"{name}.yaml")
    res = run_scenario(sc, tmp, progress=lambda _m: None)
    # a deadlock, a detection or a storm counts only on a faithful run
    assert verdict_problem(res.summary.get("fidelity")) is None, \
        f"{name}: not a faithful run: {verdict_problem(res.summary.get('fidelity'))}"
    return sc, res.summary, res.results_dir


def senders_stop(summary: dict) -> float:
    return next(e["t_s"] for e in summary["timeline"] if e["event"] == "senders stop")


@pytest.fixture(scope="module")
def off_runs(tmp_path_factory) -> list[tuple[Scenario, dict, Path]]:
    return [run("deadlock-watchdog-off", tmp_path_factory.mktemp(f"off{i}")) for i in range(RUNS)]


@pytest.fixture(scope="module")
def on_runs(tmp_path_factory) -> list[tuple[Scenario, dict, Path]]:
    return [run("deadlock-watchdog-on", tmp_path_factory.mktemp(f"on{i}")) for i in range(RUNS)]


def test_deadlock_forms_without_the_watchdog(off_runs) -> None:
    for i, (sc, summary, _dir) in enumerate(off_runs):
        dl = summary["deadlock"]
        detection = sc.cfg.agent.pfc_watchdog.detection_time_ms / 1000
        start, end = dl["window_s"]
        assert start >= senders_stop(summary), f"run {i}: the window begins before the stop"
        assert end - start >= 10 * detection, f"run {i}: window {start}-{end} is too short"
        stuck = {(q["switch"], q["port"], q["tc"]): q for q in dl["stuck_after_stop"]}
        missing = cycle_queues(sc) - set(stuck)
        assert not missing, f"run {i}: cycle queues not stuck after the stop: {missing}"
        for q in cycle_queues(sc):
            # stuck_queues() demands packets waiting at every sample, TX unchanged and PFC
            # still arriving; the figures say how much
            assert stuck[q]["backlog_bytes_min"] > 0 and stuck[q]["pfc_frames"] >= 1, stuck[q]
        assert not summary["watchdog_events"], f"run {i}: a watchdog event with it disabled"


def test_watchdog_detects_and_breaks_every_deadlock(on_runs) -> None:
    latencies = []
    for i, (sc, summary, run_dir) in enumerate(on_runs):
        wd = sc.cfg.agent.pfc_watchdog
        detect, poll, restore = (wd.detection_time_ms / 1000, wd.polling_interval_ms / 1000,
                                 wd.restoration_time_ms / 1000)
        bound = detect + poll + SLACK_S
        dets = summary["deadlock"]["watchdog_detections"]
        cycle = cycle_queues(sc)
        assert any((d["switch"], d["port"], d["tc"]) in cycle for d in dets), \
            f"run {i}: no queue of the cycle was ever detected: {dets}"
        for d in dets:
            # from the pause under which the queue stopped to the detection
            assert d["latency_s"] <= bound, f"run {i}: detection took {d['latency_s']} s: {d}"
            assert d["restored_at_s"] is not None, f"run {i}: never restored: {d}"
            latencies.append(d["latency_s"])
        series = load_telemetry(run_dir)
        detected = {}
        for d in dets:
            detected.setdefault((d["switch"], d["port"], d["tc"]), []).append(d["detected_at_s"])
        # every queue that stayed stuck longer than the bound was detected during its stall
        for q, first, last in stalls(series, [3]):
            if last - first > bound:
                assert any(first <= t <= last + 0.2 for t in detected.get(q, [])), \
                    f"run {i}: {q} stuck from {first} to {last} s and not detected"
        # the deadlock is broken: the cycle's queues send again after the first detection
        first_detection = min(d["detected_at_s"] for d in dets)
        for q in cycle:
            sent = [(s.t_s, s.sent_packets) for s in series[q]]
            before = max(n for t, n in sent if t <= first_detection)
            assert max(n for _t, n in sent) > before, f"run {i}: {q} never sent again"
        # restored only after restoration_time without PFC on that queue
        for d in dets:
            q = (d["switch"], d["port"], d["tc"])
            quiet = [s.pfc_rx for s in series[q]
                     if d["restored_at_s"] - restore + 0.15 <= s.t_s <= d["restored_at_s"] - 0.05]
            assert len(set(quiet)) <= 1, f"run {i}: PFC arrived within restoration_time: {d}"
        # and once the senders stop, nothing stays stuck
        assert not summary["deadlock"]["stuck_after_stop"], f"run {i}: stuck after the stop"
        assert summary["kernel_drops_lossless"] > 0  # what the drop action discarded
    print(f"\ndetection latency over {len(latencies)} detections: "
          f"min {min(latencies):.3f} median {statistics.median(latencies):.3f} "
          f"max {max(latencies):.3f} s; sorted: {sorted(latencies)}")


def test_control_run_has_no_deadlock_and_no_watchdog_event(tmp_path: Path) -> None:
    _sc, summary, _dir = run("deadlock-control", tmp_path)
    assert not summary["deadlock"]["deadlock"], summary["deadlock"]
    assert not summary["watchdog_events"], summary["watchdog_events"]
    for name, flow in summary["flows"].items():
        # the four flows share the fabric: each moves data at a few Mbit/s for 4 s
        assert flow["bytes_received"] > 1_000_000, f"flow {name}: {flow['bytes_received']} B"


# -- a host storming PAUSE ----------------------------------------------------------------------

def delivered_rate(run_dir: Path, switch: str, port: int, tc: int, t0: float,
                   t1: float) -> float:
    """Mbit/s the switch sent out of (port, class) between t0 and t1, from the P4 counters."""
    cells = []
    with open(run_dir / "p4_counters.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            if (r["switch"] == switch and r["counter"] == "RoceEgress.tx_port_tc"
                    and int(r["index"]) == port * NUM_TCS + tc):
                cells.append((float(r["t_s"]), int(r["bytes"])))

    def at(t: float) -> tuple[float, int]:
        return min(cells, key=lambda c: abs(c[0] - t))

    (ta, ba), (tb, bb) = at(t0), at(t1)
    return (bb - ba) * 8 / (tb - ta) / 1e6


def storm_times(summary: dict) -> tuple[float, float, float]:
    t = {e["event"]: e["t_s"] for e in summary["timeline"]}
    start = t["start"]
    return start, next(v for k, v in t.items() if "storm" in k), t["h2: fault ends"]


def test_storming_host_without_watchdog_starves_the_victim(tmp_path: Path) -> None:
    sc, summary, run_dir = run("storm-watchdog-off", tmp_path)
    start, storm, calm = storm_times(summary)
    h1_port = peer_ports(sc.topo, "leaf1", "h1")[0]
    h2_port = peer_ports(sc.topo, "leaf1", "h2")[0]
    before = delivered_rate(run_dir, "leaf1", h1_port, 3, start + 0.7, storm)
    during = delivered_rate(run_dir, "leaf1", h1_port, 3, storm + 2, calm)
    # the two flows share spine1 -> leaf1: about 5 Mbit/s each before the storm
    assert before > 3, f"victim ran at {before:.2f} Mbit/s before the storm"
    assert during < 0.5 * before, f"victim {before:.2f} -> {during:.2f} Mbit/s in the storm"
    series = load_telemetry(run_dir)
    q = ("leaf1", h2_port, 3)
    held = [s for s in series[q] if storm + 1 <= s.t_s <= calm]
    assert held and all(s.paused for s in held), "the port toward h2 was not held paused"
    assert not summary["watchdog_events"]


def test_storming_host_is_cut_off_by_the_watchdog_and_restored(tmp_path: Path) -> None:
    sc, summary, run_dir = run("storm-watchdog-on", tmp_path)
    start, storm, calm = storm_times(summary)
    wd = sc.cfg.agent.pfc_watchdog
    restore = wd.restoration_time_ms / 1000
    h1_port = peer_ports(sc.topo, "leaf1", "h1")[0]
    h2_port = peer_ports(sc.topo, "leaf1", "h2")[0]
    q = ("leaf1", h2_port, 3)
    storms = [e for e in load_events(run_dir) if e.event.startswith("storm")]
    # only the storming host's queue: the program ignores PFC where the watchdog does, so the
    # storm does not spread into secondary detections upstream
    assert {e.queue for e in storms} == {q}, storms
    ev = [e for e in storms if e.queue == q]
    assert ev and ev[0].event == "storm_detected", ev
    detected = ev[0].t_s
    assert storm < detected < calm, f"detected at {detected}, storm {storm}-{calm}"
    restored = [e.t_s for e in ev if e.event == "storm_restored" and e.t_s > calm]
    assert restored and restored[0] >= calm + restore - SLACK_S, \
        f"restored at {restored} after the storm ended at {calm}"
    before = delivered_rate(run_dir, "leaf1", h1_port, 3, start + 0.7, storm)
    after = delivered_rate(run_dir, "leaf1", h1_port, 3, detected + 0.5, calm)
    assert after > 0.8 * before, f"victim {before:.2f} -> {after:.2f} Mbit/s after detection"
    # once restored, the queue honours PFC again and carries h2's traffic
    series = load_telemetry(run_dir)
    sent = [(s.t_s, s.sent_packets) for s in series[q]]
    at_restore = max(n for t, n in sent if t <= restored[0])
    assert max(n for _t, n in sent) > at_restore, "no traffic to h2 after the restoration"
