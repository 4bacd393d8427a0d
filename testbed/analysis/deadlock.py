"""What a run's telemetry says about deadlock and the PFC watchdog.

A run folder holds every switch agent's samples (``telemetry/<switch>.telemetry.csv``) and
events (``telemetry/<switch>.events.csv``), all on the run's clock, read with
:mod:`testbed.results.telemetry`. From them:

* **Stuck queues**: a queue that, over a window, always held packets, sent none and kept
  receiving PFC. After the senders stop, that is a deadlock's signature (Hu et al., HotNets
  2016): nothing new arrives, yet the buffers on the cycle stay full because each is paused by
  the next.
* **Watchdog detections**: for each ``storm_detected``, when its queue's stall began (the
  pause that was still in force) and how long detection took, to compare with SONiC's bound of
  detection_time + polling_interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.analysis.fidelity import Figures, longest_run
from testbed.results.telemetry import (
    CpuRow,
    EventRow,
    QueueId,
    TelemetryRow,
    run_cpu,
    run_events,
    run_telemetry,
)
from testbed.topology.graph import Topology


@dataclass(frozen=True)
class StuckQueue:
    switch: str
    port: int
    tc: int
    backlog_bytes_min: int
    pfc_frames: int  # PFC frames that arrived over the window
    window_s: float


@dataclass(frozen=True)
class Detection:
    switch: str
    port: int
    tc: int
    stalled_at_s: float  # the pause (still in force) under which the queue stopped
    detected_at_s: float
    latency_s: float
    restored_at_s: float | None


def queue_name(q: QueueId) -> str:
    return f"{q[0]}:{q[1]}:{q[2]}"


def load_telemetry(run_dir: Path) -> dict[QueueId, list[TelemetryRow]]:
    """Each queue's samples, in time order."""
    out: dict[QueueId, list[TelemetryRow]] = {}
    for s in run_telemetry(run_dir):
        out.setdefault(s.queue, []).append(s)
    return out


def pause_reactions_us(run_dir: Path, events: list[EventRow] | None = None) -> list[int]:
    """Every pause the agents applied: the frame's arrival in the kernel to the gate command
    (from ``events`` when the caller has read them already)."""
    return [int(e.reaction_us) for e in (run_events(run_dir) if events is None else events)
            if e.event == "pause" and e.reaction_us is not None]


def load_events(run_dir: Path) -> list[EventRow]:
    """Every switch's events, in time order."""
    return sorted(run_events(run_dir), key=lambda e: e.t_s)


def routed_queues(topo: Topology, routes: Iterable[Any], tc: int) -> set[QueueId]:
    """Class ``tc``'s queues that a scenario's static routes (``routes:``, each a switch and its
    next hop ``via``) send through. The deadlock scenarios' bounce routes close a loop, so these
    are the buffers of their cycle (scenarios/deadlock-watchdog-off.yaml, credit-loop.yaml)."""
    return {(r.switch, p.number, tc) for r in routes
            for p in topo.switch(r.switch).ports.values() if p.peer == r.via}


def stuck_queues(series: dict[QueueId, list[TelemetryRow]], start_s: float, end_s: float,
                 tcs: list[int]) -> list[StuckQueue]:
    """Queues of the given classes that were stuck for all of [start_s, end_s]: packets waiting
    at every sample, not one sent, and PFC still arriving (the pause was being refreshed), or,
    a credited class (mode ib-credit), waiting for credit at every sample."""
    found = []
    for q, samples in sorted(series.items()):
        if q[2] not in tcs:
            continue
        win = [s for s in samples if start_s <= s.t_s <= end_s]
        if len(win) < 2 or win[-1].t_s - win[0].t_s < 0.8 * (end_s - start_s):
            continue  # too few samples to say (the agent was not sampling then)
        held = win[-1].pfc_rx > win[0].pfc_rx or (win[-1].pfc_rx == 0 and
                                                  all(s.paused for s in win))
        if all(s.backlog_packets > 0 for s in win) and win[0].sent_packets == \
                win[-1].sent_packets and held:
            found.append(StuckQueue(q[0], q[1], q[2], min(s.backlog_bytes for s in win),
                                    win[-1].pfc_rx - win[0].pfc_rx,
                                    round(win[-1].t_s - win[0].t_s, 3)))
    return found


def stalls(series: dict[QueueId, list[TelemetryRow]], tcs: list[int]) -> list[tuple[QueueId, float,
                                                                               float]]:
    """Stretches of consecutive samples in which a queue was paused with packets waiting and
    sent nothing: (queue, first such sample, last such sample)."""
    out = []
    for q, samples in sorted(series.items()):
        if q[2] not in tcs:
            continue
        start: TelemetryRow | None = None
        last: TelemetryRow | None = None
        for s in samples:
            held = s.paused and s.backlog_packets > 0
            if held and start is not None and s.sent_packets == start.sent_packets:
                last = s
                continue
            if start is not None and last is not None:
                out.append((q, start.t_s, last.t_s))
            start, last = (s, None) if held else (None, None)
        if start is not None and last is not None:
            out.append((q, start.t_s, last.t_s))
    return out


def detections(events: list[EventRow]) -> list[Detection]:
    """Each watchdog detection, with the start of the pause it broke and its restoration."""
    out = []
    paused_since: dict[QueueId, float] = {}
    open_storms: dict[QueueId, int] = {}
    for e in events:
        if e.event == "pause":
            paused_since[e.queue] = e.t_s
        elif e.event in ("resume", "expire"):
            paused_since.pop(e.queue, None)
        elif e.event == "storm_detected":
            since = paused_since.pop(e.queue, e.t_s)
            open_storms[e.queue] = len(out)
            out.append(Detection(*e.queue, stalled_at_s=since, detected_at_s=e.t_s,
                                 latency_s=round(e.t_s - since, 4), restored_at_s=None))
        elif e.event == "storm_restored" and e.queue in open_storms:
            i = open_storms.pop(e.queue)
            out[i] = Detection(**{**asdict(out[i]), "restored_at_s": e.t_s})
    return out


def deadlock_summary(run_dir: Path, senders_stop_s: float, tcs: list[int],
                     grace_s: float = 1.0) -> dict:
    """The summary's deadlock section: queues stuck from grace_s after the senders stopped to
    the end of the run, and every watchdog detection with its latency."""
    series = load_telemetry(run_dir)
    end = max((s[-1].t_s for s in series.values() if s), default=0.0)
    stuck = stuck_queues(series, senders_stop_s + grace_s, end, tcs)
    return {
        "window_s": [round(senders_stop_s + grace_s, 3), round(end, 3)],
        "stuck_after_stop": [asdict(s) for s in stuck],
        "deadlock": bool(stuck),
        "watchdog_detections": [asdict(d) for d in detections(load_events(run_dir))],
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def telemetry_summary(run_dir: Path) -> dict:
    """The agents' telemetry in one JSON: per queue that did anything, its peak backlog, what
    it sent and dropped, PFC received and time paused, and the phantom's drift from the kernel
    backlog (median and 99th percentile of |drift| over samples with packets waiting)."""
    series = load_telemetry(run_dir)
    queues, drifts, held = [], [], []
    for (sw, port, tc), samples in sorted(series.items()):
        last = samples[-1]
        if not (last.sent_packets or last.drops or last.pfc_rx):
            continue
        d = [abs(s.phantom_drift_bytes) for s in samples if s.phantom_drift_bytes is not None
             and s.backlog_packets > 0]
        drifts += d
        held += [s.held_bytes for s in samples if s.held_bytes is not None
                 and s.backlog_packets > 0]
        queues.append({
            "switch": sw, "port": port, "tc": tc,
            "max_backlog_bytes": max(s.backlog_bytes for s in samples),
            "sent_packets": last.sent_packets, "sent_bytes": last.sent_bytes,
            "drops": last.drops, "pfc_rx": last.pfc_rx, "paused_s": round(last.paused_s, 4),
            "drift_median_bytes": _percentile(d, 0.5) if d else None,
            "drift_p99_bytes": _percentile(d, 0.99) if d else None,
        })
    counts: dict[str, int] = {}
    for e in load_events(run_dir):
        counts[e.event] = counts.get(e.event, 0) + 1
    ends = [s[-1].t_s for s in series.values() if s]
    return {
        "duration_s": round(max(ends), 3) if ends else 0.0,
        "queues": queues,
        "events": counts,
        "drift_bytes": {"samples": len(drifts),
                        "median": _percentile(drifts, 0.5) if drifts else None,
                        "p99": _percentile(drifts, 0.99) if drifts else None},
        "held_bytes": {"samples": len(held),
                       "median": _percentile(held, 0.5) if held else None,
                       "p99": _percentile(held, 0.99) if held else None},
    }


def _telemetry_whole(series: dict[QueueId, list[TelemetryRow]], switches: list[str] | None,
                     why: dict[str, str]) -> bool:
    """Whether every switch's agent wrote telemetry; if not, why the figures that come from
    it are unknown."""
    missing = sorted(set(switches or ()) - {q[0] for q in series})
    if series and not missing:
        return True
    gap = (f"no telemetry from {', '.join(missing)} (its agent wrote none)" if missing
           else "no switch telemetry at all (the agents wrote none)")
    for name in ("lossless_drops", "phantom_below", "buffer_exceeded", "bmv2_lag",
                 "bmv2_stall", "agent_stall", "agent_reaction", "credit_overrun"):
        why.setdefault(name, gap)
    return False


def _credit_overrun(series: dict[QueueId, list[TelemetryRow]], credited: list[int],
                    buffers: dict[QueueId, int], why: dict[str, str]) -> int | None:
    """Mode ib-credit: the most an input held in the kernel beyond its credit buffer (0 when
    none did, or no credited frame passed), None (and why) when credited frames passed and
    no input's occupancy was read."""
    rows = [(q, s) for q, ss in series.items() if q[2] in credited for s in ss]
    over = [s.input_max_bytes - buffers[q] for q, s in rows
            if s.input_max_bytes is not None and q in buffers]
    if over:
        return max(max(over), 0)
    if not any(s.sent_packets for _q, s in rows):
        return 0
    why.setdefault("credit_overrun", "credited frames passed, but no input's occupancy was "
                                     "read against its credit buffer")
    return None


def _cpu_saturated(rows: list[CpuRow] | None, cpu_busy_pct: float,
                   why: dict[str, str]) -> float | None:
    """The longest stretch with every core busy, None (and why) with no CPU samples."""
    if not rows:
        why.setdefault("cpu_saturated", "no CPU samples (telemetry/cpu.csv is missing or empty)")
        return None
    return longest_run([(r.t_s, r.busy_pct) for r in rows], cpu_busy_pct)


def _steal(rows: list[CpuRow] | None) -> tuple[float | None, float | None]:
    """The steal share over the run and its largest sample (None: not recorded)."""
    steal = [r.steal_pct for r in rows or ()]
    if not steal or None in steal:
        return None, None
    return sum(steal) / len(steal), max(steal)


def _reactions(events: list, why: dict[str, str]) -> tuple[list, int]:
    """The PFC frames the agents applied (a late XON keeps a link idle as a late XOFF
    overfills a buffer: both are reactions), and how many of them had no kernel timestamp."""
    applied = [e for e in events if e.event in ("pause", "resume")]
    blind = sum(1 for e in applied if e.reaction_us is None)
    if blind:
        why.setdefault("agent_reaction", f"{blind} PFC frames were applied without the "
                                         "frame's kernel timestamp")
    return applied, blind


def _switch_column(series: dict[QueueId, list[TelemetryRow]], name: str) -> list[int]:
    """Every value a switch-wide column (the same in each of a switch's rows) was given."""
    return [v for ss in series.values() for s in ss if (v := getattr(s, name)) is not None]


def fidelity_figures(run_dir: Path, lossless: list[int], cpu_busy_pct: float,
                     hidden_loss: int | None = None, buffers: dict[QueueId, int] | None = None,
                     host_loss: int | None = None, *, pipeline_drops: int | None = None,
                     switches: list[str] | None = None,
                     host_lag_pct: float | None = None, hosts_pace: bool = True,
                     host_lag_host: str | None = None, host_lag_longest_ms: float | None = None,
                     unmeasured: dict[str, str] | None = None, credited: list[int] | None = None,
                     input_buffers: dict[QueueId, int] | None = None,
                     credit_timed: bool = False) -> Figures:
    """The figures the fidelity guard judges, from a results folder's telemetry (and what only
    the running fabric could tell: the hidden loss and the pipeline's drops from the switches'
    counters, the host loss from the endpoints). ``buffers``: each lossless queue's configured
    buffer, to say how far past it a queue went; ``input_buffers``, in mode ib-credit, each
    input's credit buffer, likewise. ``switches``: the fabric's, each of whose agents must
    have written telemetry. ``unmeasured``: why a figure passed in as None is missing.

    A figure is zero when there was nothing to measure (no lossless packet passed, no pause
    was applied) and None, with its reason, when there was and it was not measured."""
    why = dict(unmeasured or {})
    cpu = run_cpu(run_dir)  # read once: the saturation and the steal both come from it
    steal = _steal(cpu)
    series = load_telemetry(run_dir)
    events = run_events(run_dir)
    ok_series = _telemetry_whole(series, switches, why)
    mine = {q: ss for q, ss in series.items() if q[2] in lossless and ss}
    last = [ss[-1] for ss in mine.values()]
    # mode ib-credit's classes lose nothing either: their drops count with PFC's
    kept = [ss[-1] for q, ss in series.items() if q[2] in (credited or ()) and ss]
    traffic = any(s.sent_packets for s in last)

    def peak(values: list[int], what: str) -> int | None:
        """The largest value; 0 with no lossless packet to measure; None when packets
        passed and the program's views were never read."""
        if values:
            return max(values)
        if not traffic:
            return 0
        why.setdefault(what, "lossless packets passed, but the P4 program's queue views "
                             "were never read (BMv2's registers did not answer)")
        return None

    over = [s.occupancy_max_bytes - buffers[q] for q, ss in mine.items()
            if buffers and q in buffers for s in ss if s.occupancy_max_bytes is not None]
    below = [s.phantom_below_max_bytes for ss in mine.values() for s in ss
             if s.phantom_below_max_bytes is not None]
    lag, stall, late = (_switch_column(series, name) for name in (
        "bmv2_lag_max_us", "bmv2_answer_max_us", "agent_late_max_us"))
    applied, blind = _reactions(events, why)
    wd = sum(s.wd_dropped or 0 for s in last)
    if ok_series and (lossless or credited) and not (last or kept):
        why.setdefault("lossless_drops", "the telemetry has no lossless queue")
    exceeded = max(max(over), 0) if over else (0 if buffers and not traffic else None)
    if exceeded is None:
        why.setdefault("buffer_exceeded", "lossless packets passed, but no queue's occupancy "
                                          "was read against its buffer")
    return Figures(
        pfc_enabled=bool(lossless), credit_enabled=bool(credited), credit_timed=credit_timed,
        lossless_drops=(sum(s.drops for s in last + kept) - wd if ok_series and (last or kept)
                        else None),
        pipeline_drops=pipeline_drops,
        hidden_loss=hidden_loss,
        host_loss=host_loss,
        phantom_below_bytes=peak(below, "phantom_below") if ok_series else None,
        buffer_exceeded_bytes=exceeded if ok_series else None,
        credit_overrun_bytes=(_credit_overrun(series, credited, input_buffers or {}, why)
                              if ok_series and credited else None),
        bmv2_lag_us=peak(lag, "bmv2_lag") if ok_series else None,
        bmv2_stall_us=peak(stall, "bmv2_stall") if ok_series else None,
        agent_stall_us=peak(late, "agent_stall") if ok_series else None,
        agent_reaction_us=(max((int(e.reaction_us) for e in applied
                                if e.reaction_us is not None), default=0)
                           if ok_series and not blind else None),
        host_lag_pct=host_lag_pct, hosts_pace=hosts_pace, host_lag_host=host_lag_host,
        host_lag_longest_ms=host_lag_longest_ms,
        cpu_saturated_s=_cpu_saturated(cpu, cpu_busy_pct, why),
        steal_pct=steal[0], steal_peak_pct=steal[1],
        watchdog_drops=wd if ok_series else None,
        unmeasured=why)
