"""Checks on PFC's failure modes: the deadlock of a cyclic buffer dependency (lab 6) and the
PFC watchdog that breaks it (lab 7). They read the summary's ``deadlock`` section (the queues
stuck after the senders stopped, every watchdog detection: testbed.analysis.deadlock) and the
events."""

from __future__ import annotations

from testbed.config.models import ConfigError
from testbed.labs.cycles import find_cycle, flow_paths, wait_for
from testbed.labs.evidence import RunData
from testbed.labs.verdict import Context, Verdict, check, failed, moved, passed
from testbed.results.telemetry import run_events
from testbed.run.scenario import parse_scenario


def _deadlock(run: RunData) -> dict:
    return run.summary.get("deadlock") or {}


def _stuck_names(dl: dict) -> str:
    return ", ".join(f"{q['switch']}:{q['port']}" for q in dl.get("stuck_after_stop", []))


@check("deadlock_formed")
def deadlock_formed(ctx: Context, run: RunData, min_queues: int = 2) -> Verdict:
    """The run froze: queues on the cycle stayed full after the senders stopped, sent nothing
    and kept receiving PFC (analysis.stuck_queues). A run with no such queue never passes."""
    if (bad := moved(run, 0.001, each=False)) is not None:
        return bad
    dl = _deadlock(run)
    stuck = dl.get("stuck_after_stop", [])
    if not dl.get("deadlock") or len(stuck) < min_queues:
        hint = ("the routes must make every flow's path part of one cycle of buffers: "
                "spine1 -> leaf2 -> spine2 -> leaf1 -> spine1 (flow a via leaf2 to leaf3, "
                "flow b via leaf1 to leaf4)")
        if not run.scenario.get("routes"):
            hint = "you added no route: " + hint
        return failed(f"nothing stayed stuck after the senders stopped ({len(stuck)} queue(s) "
                      "stuck): no deadlock", hint)
    return passed(f"deadlock: {len(stuck)} queues stayed full with nothing sent from "
                  f"{dl['window_s'][0]} s to {dl['window_s'][1]} s ({_stuck_names(dl)})")


@check("routes_form_cycle")
def routes_form_cycle(ctx: Context, run: RunData) -> Verdict:
    """The routes the run used (its failed links, static routes and flows) make a cycle of
    buffers that wait on one another: worked out from the scenario alone (testbed.labs.cycles),
    whatever the run then did."""
    try:
        sc = parse_scenario({**run.scenario.get("config", {}),
                             **{k: v for k, v in run.scenario.items() if k != "config"}})
    except ConfigError as exc:
        return failed(f"the run's scenario does not load: {exc.problems[0]}",
                      "run the lab's scenario file")
    cycle = find_cycle(wait_for(sc))
    if not cycle:
        paths = "; ".join(f"{f.name}: " + " | ".join(" -> ".join(p) for p in
                                                     flow_paths(sc, f.src, f.dst))
                          for f in sc.extras.flows[:2])
        return failed(f"the flows' paths make no cycle of buffers ({paths})",
                      "route flow a through leaf2 and flow b through leaf1, so that the "
                      "queues leaf1->spine1, spine1->leaf2, leaf2->spine2, spine2->leaf1 each "
                      "wait on the next")
    return passed("a cycle of buffers: " + ", ".join(f"{a}->{b}" for a, b in cycle))


def _watchdog(run: RunData) -> dict:
    return run.config.get("agent", {}).get("pfc_watchdog", {})


@check("watchdog_detected")
def watchdog_detected(ctx: Context, run: RunData, margin_ms: float = 300.0) -> Verdict:
    """The watchdog saw the stuck queues, each within detection_time + polling_interval (with
    ``margin_ms`` for a busy machine's late polls)."""
    if (bad := moved(run, 0.001, each=False)) is not None:
        return bad
    wd = _watchdog(run)
    if not wd.get("enabled"):
        return failed("the PFC watchdog is off in this run",
                      "agent: {pfc_watchdog: {enabled: true, ...}}")
    dets = _deadlock(run).get("watchdog_detections", [])
    if not dets:
        return failed("the watchdog detected nothing", "run the lab's deadlock: the bounce "
                      "routes and the four flows must stay as they are")
    bound = (wd["detection_time_ms"] + wd["polling_interval_ms"]) / 1000
    worst = max(d["latency_s"] for d in dets)
    msg = (f"{len(dets)} detections, the slowest {worst * 1000:.0f} ms after its queue stalled "
           f"(bound: detection_time + polling_interval = {bound * 1000:.0f} ms)")
    if worst > bound + margin_ms / 1000:
        return failed(msg, "a detection slower than its bound: rerun on a quieter machine")
    return passed(msg)


@check("watchdog_broke")
def watchdog_broke(ctx: Context, run: RunData) -> Verdict:
    """The watchdog broke the deadlock: with its drop action the cycle drains, and nothing is
    stuck after the senders stop (the flows' bytes arrived or were dropped)."""
    if (bad := moved(run, 0.001, each=False)) is not None:
        return bad
    wd, dl = _watchdog(run), _deadlock(run)
    if not wd.get("enabled"):
        return failed("the PFC watchdog is off in this run",
                      "agent: {pfc_watchdog: {enabled: true, action: drop, ...}}")
    if not dl.get("watchdog_detections"):
        return failed("the watchdog detected nothing, so it broke nothing",
                      "run the lab's deadlock unchanged but for the watchdog")
    if dl.get("deadlock"):
        hint = (f"action {wd.get('action')} only logs the storm and leaves the queues paused: "
                "use action: drop" if wd.get("action") == "alert" else
                "the queues stayed stuck: use action: drop")
        return failed(f"still deadlocked after the senders stopped ({_stuck_names(dl)})", hint)
    restored = [d for d in dl["watchdog_detections"] if d.get("restored_at_s") is not None]
    return passed(f"no queue stuck after the senders stopped; {len(restored)} of "
                  f"{len(dl['watchdog_detections'])} cut-off queues restored")


def _field(detail: str, key: str) -> int:
    for part in detail.replace(",", " ").split():
        if part.startswith(key + "="):
            return int(part.split("=", 1)[1])
    return 0


def dropped_by_watchdog(run: RunData) -> int:
    """Packets the watchdog's drop action discarded: ``dropped=N`` of each restoration
    (testbed.agent.pfcwd.StormRestored), and for a storm still open at the end the backlog it purged
    when detected (``backlog_packets=N``)."""
    total = 0
    open_storms: dict = {}
    for e in sorted(run_events(run.path), key=lambda e: e.t_s):
        if e.event == "storm_detected":
            open_storms[e.queue] = _field(e.detail, "backlog_packets")
        elif e.event == "storm_restored":
            open_storms.pop(e.queue, None)
            total += _field(e.detail, "dropped")
    return total + sum(open_storms.values())


@check("watchdog_cost")
def watchdog_cost(ctx: Context, run: RunData) -> Verdict:
    """The price of breaking the cycle: the queues the watchdog cut off dropped packets, which
    the senders had to resend (a lossless class that lost packets)."""
    if _watchdog(run).get("action") != "drop":
        return failed(f"action is {_watchdog(run).get('action')!r}: nothing is dropped",
                      "the drop action is what frees the cycle, at this cost")
    n = dropped_by_watchdog(run)
    rtx = sum(int(q.get("retransmitted", 0)) for q in run.qps())
    if n == 0:
        return failed("the watchdog dropped no packet", "run the deadlock with action: drop")
    return passed(f"the watchdog dropped {n} packets; the senders retransmitted {rtx}")
