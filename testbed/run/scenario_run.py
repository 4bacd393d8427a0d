"""Running a scenario (testbed.run.scenario): the fabric up, endpoints and flows started, faults
applied on the timeline while a status goes to the progress display, then the summary, the
headline figures and the reports written into the results folder, whatever happened.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.analysis.deadlock import deadlock_summary
from testbed.analysis.fidelity import steal_note
from testbed.analysis.tester import FlowQps, build_tester, per_class
from testbed.budget.cores import Verdict, budget_line
from testbed.machine.owner import make_results_dir
from testbed.results.files import (
    ENDPOINTS_DIR,
    LOG_SUFFIX,
    P4_COUNTERS_FILE,
    REPORT_HTML_FILE,
    SCENARIO_FILE,
    SUMMARY_FILE,
)
from testbed.results.summary import RunSummary
from testbed.results.telemetry import run_events
from testbed.run.capture import Captures
from testbed.run.counter_sampler import CounterSampler
from testbed.run.scenario import Fault, Scenario
from traffic.client import EndpointError
from traffic.flows import FlowRunner


@dataclass
class RunResult:
    results_dir: Path
    summary: RunSummary = field(default_factory=lambda: RunSummary())


@dataclass(frozen=True)
class RunStatus:
    """Where a running scenario stands, for a progress display: seconds into the run (flows'
    start_s and faults' at_s count from the same instant), and its flows."""

    t_s: float
    duration_s: float
    flows_total: int
    flows_started: int
    flows_done: int


class RunFailed(Exception):
    """A part of the run stopped working under it (an endpoint died, say): one line for the
    user, naming the part and where its log is."""


#: How often a running scenario reports its status.
STATUS_PERIOD_S = 0.5


def run_scenario(sc: Scenario, results_root: Path, progress=print,
                 status: Callable[[RunStatus], None] | None = None,
                 run_dir: Path | None = None, verdict: Verdict | None = None) -> RunResult:
    """Run ``sc`` and write its results folder under ``results_root`` (named after the scenario
    and the time), or into ``run_dir``. ``progress`` gets a line per step and per fault as it
    fires; ``status``, if given, a RunStatus every STATUS_PERIOD_S while the flows run;
    ``verdict``, the load against the budget if judged already (summary.json's ``budget``)."""
    from testbed.fabric.background import BackgroundPool
    from testbed.fabric.measure import fabric_counters
    from testbed.run.bringup import Fabric
    from testbed.run.lifecycle import Run

    run = (Run(sc.cfg, sc.topo, run_dir, progress) if run_dir is not None
           else Run.named(sc.cfg, sc.topo, results_root, progress))
    run_dir = run.results_dir
    _write_scenario(sc, run_dir)
    res = RunResult(run_dir)
    verdict = verdict or _judged(sc, progress)
    fabric = Fabric(sc.cfg, sc.topo, run_dir, run=run)
    timeline: list[dict] = []
    sampler = stolen = stopped_at = None
    captures = Captures(sc.extras.capture, run_dir, run.state, sc.extras.capture_max_mb,
                        sc.extras.capture_snaplen_bytes)
    bg = BackgroundPool(sc.extras.background, sc.cfg, sc.topo, run_dir, run.state)
    try:
        fabric.start()
        captures.start(fabric.net)  # before any traffic
        eps = fabric.start_endpoints(sc.extras.endpoints.args())
        bg.start(fabric.net)
        stolen = _bringup_steal(run, sc, progress)
        runner = FlowRunner(sc.extras.flows, eps, {h.name: h.ip for h in sc.topo.hosts})
        sampler = CounterSampler(fabric, run_dir / P4_COUNTERS_FILE, sc.extras.sample_period_s)
        sampler.start()
        events = _fault_events(sc)

        def clock() -> float:  # the run's clock, as in the agents' telemetry
            return round(time.monotonic() - fabric.t0, 3)

        t0 = time.monotonic()  # flows' start_s and faults' at_s count from here
        runner.start(t0)
        bg.go(t0)
        timeline.append({"t_s": clock(), "event": "start"})
        progress(f"running for {sc.extras.duration_s:g} s")
        ticker = _Ticker(fabric, runner, t0, sc.extras.duration_s, status)
        for at, kind, f in events:
            ticker.wait_until(t0 + at)
            begun = clock()
            what = _apply_fault(fabric, f, end=(kind == "fault_end"))
            timeline.append({"t_s": clock(), "event": what, **_link_event(f, begun)})
            progress(f"{time.monotonic() - t0:.1f} s: {what}")
        ticker.wait_until(t0 + sc.extras.duration_s)
        runner.stop()
        for host, c in eps.items():  # senders stop: what the network holds now stays or drains
            _call(c, host, run_dir, cmd="halt")
        bg.stop_senders()
        stopped_at = clock()
        timeline.append({"t_s": stopped_at, "event": "senders stop"})
        time.sleep(sc.extras.settle_s)
        check_switches(fabric)
        bg.stop()  # what the fabric held has arrived by now, or was dropped
        res.summary = _summary(sc, eps, runner, fabric_counters(fabric), timeline, run_dir)
        res.summary["background"] = bg.results(fabric.t0)
    finally:
        bg.stop()
        if sampler is not None:
            sampler.stop_event.set()
            sampler.join(timeout=5)
        if captures.targets:
            res.summary["captures"] = captures.stop()
        fabric.stop()
        res.summary.setdefault("timeline", timeline)
        res.summary["budget"] = {**verdict.to_dict(), "auto": sc.auto,
                                 "steal_bringup_pct": stolen}
        _write_results(sc, run, res.summary, stopped_at, progress)
    return res


def _write_results(sc: Scenario, run, summary: RunSummary, stopped_at: float | None,
                   progress) -> None:
    """The fabric is down: the agents' verdict, the watchdog's events, the deadlock section
    and the headline join the summary, and summary.json and the reports are written."""
    run_dir = run.results_dir
    tel = run.telemetry_summary()
    if tel is not None:  # the fidelity guard's verdict and what the agents ran at
        summary.update({k: tel.get(k) for k in ("fidelity", "agents")})
    summary["watchdog_events"] = _watchdog_events(run_dir)
    if stopped_at is not None:
        summary["deadlock"] = deadlock_summary(run_dir, stopped_at, [
            *sc.cfg.qos.pfc_enable, *sc.cfg.qos.credit_enable])  # paused, or out of credit
    _add_headline(run_dir, summary, progress)
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str))
    _write_reports(run_dir, progress)


def _bringup_steal(run, sc: Scenario, progress) -> float | None:
    """The steal share over the bring-up (the first busy stretch to measure it in), said
    before the flows start when it reaches fidelity.steal_note_pct (None: not sampled)."""
    stolen = run.steal_so_far()
    note = steal_note(stolen, None, sc.cfg.fidelity.steal_note_pct, "while the fabric came up")
    if note:
        progress(f"warning: {note}")
    return None if stolen is None else round(stolen, 1)


def _fault_events(sc: Scenario) -> list[tuple[float, str, Fault]]:
    """Each fault's start and end, in time order."""
    return sorted([(f.at_s, "fault", f) for f in sc.extras.faults]
                  + [(f.until_s, "fault_end", f) for f in sc.extras.faults
                     if f.until_s is not None], key=lambda e: e[0])


def _write_scenario(sc: Scenario, run_dir: Path) -> None:
    """scenario.json: the resolved config (an `auto` rate as the number chosen) and the rest,
    in a results folder made safely (testbed.machine.owner.make_results_dir)."""
    make_results_dir(run_dir)
    (run_dir / SCENARIO_FILE).write_text(json.dumps(scenario_record(sc), indent=2))


def scenario_record(sc: Scenario) -> dict:
    """scenario.json's contents: the config under ``config``, the rest beside it. Parsed again
    (``{**config, **rest}``, as the labs' checks do), it is the same scenario."""
    return {"config": sc.cfg.model_dump(mode="json"), **sc.extras.model_dump(mode="json")}


def budget_verdict(sc: Scenario) -> Verdict:
    """The scenario's load at its rates against this machine's profile (unknown without)."""
    from testbed.budget.calibration_store import load_profile
    from testbed.budget.scenario import scenario_verdict

    profile, reason = load_profile()
    return scenario_verdict(sc.cfg, sc.topo, sc.extras, profile, reason)


def _judged(sc: Scenario, progress) -> Verdict:
    """The run's budget verdict, printed: what it runs at and whether the machine affords it."""
    verdict = budget_verdict(sc)
    progress(f"budget: {budget_line(verdict, sc.auto)}")
    return verdict


def _add_headline(run_dir: Path, summary: dict, progress) -> None:
    """summary["headline"]: the figures runs are compared by (testbed.analysis.headline)."""
    from testbed.analysis.headline import compute_headline

    try:
        summary["headline"] = compute_headline(run_dir, summary)
    except Exception as exc:  # the figures must not hide the results they come from
        progress(f"headline figures not computed: {exc}")


def _write_reports(run_dir: Path, progress) -> None:
    """report.md and report.png, then report.html; a report must not hide the results it
    reports on, so a failure is said and the run goes on."""
    from testbed.report.html import write_html_report
    from testbed.report.png import make_report

    for name, write in (("report", make_report), (REPORT_HTML_FILE, write_html_report)):
        try:
            write(run_dir)
        except Exception as exc:
            progress(f"{name} not written: {exc}")


def _link_event(f: Fault, begun: float) -> dict:
    """A link fault's place on the timeline, for the analysis to cut the run at
    (testbed.analysis.headline_links.link_phases): ``link`` [a, b] or [a, b, k], ``up``, and
    ``from_s``, when the fabric began to reroute (``t_s`` is when it was done: a reroute
    takes its drain time, testbed.control.reroute)."""
    if f.link_down is None and f.link_up is None:
        return {}
    ref, up = (f.link_up, True) if f.link_up is not None else (f.link_down, False)
    return {"link": list(ref), "up": up, "from_s": begun}


def _apply_fault(fabric, f: Fault, end: bool) -> str:
    if f.link_down is not None or f.link_up is not None:
        # both ends route around a failed link, and so does the rest of the fabric
        ref, up = (f.link_up, True) if f.link_up is not None else (f.link_down, False)
        index = ref[2] if len(ref) > 2 else None
        changed = fabric.set_link(ref[0], ref[1], up, index)
        which = f" (parallel link {index})" if index is not None else ""
        return (f"link {ref[0]}-{ref[1]}{which} {'up' if up else 'down'} "
                f"(routes changed on {', '.join(changed) or 'no switch'})")
    c = fabric.endpoints[f.host]
    if end or f.mode == "none":
        c.call(cmd="fault", mode="none")
        return f"{f.host}: fault ends"
    req: dict = {"mode": f.mode, "tc": f.tc}
    if f.max_rx_pps:
        req["max_rx_pps"] = f.max_rx_pps
    if f.quanta:
        req["quanta"] = f.quanta
    if f.mode == "rx_loss":
        req.update(rate=f.rate, seed=f.seed)
        c.call(cmd="fault", **req)
        return f"{f.host}: rx_loss (rate {f.rate:g}, seed {f.seed})"
    c.call(cmd="fault", **req)
    return f"{f.host}: {f.mode} (class {f.tc})"


def _watchdog_events(run_dir: Path) -> list[dict]:
    """The agents' watchdog events (storm_detected, storm_restored), as summary.json has them."""
    return [asdict(e) for e in run_events(run_dir) if e.event.startswith("storm")]


class _Ticker:
    """Waits out the run's timeline, reporting a RunStatus every STATUS_PERIOD_S meanwhile,
    and stopping the run at once if a switch has died under it."""

    def __init__(self, fabric, runner: FlowRunner, t0: float, duration_s: float,
                 status: Callable[[RunStatus], None] | None) -> None:
        self.fabric, self.runner, self.t0 = fabric, runner, t0
        self.duration_s, self.status = duration_s, status

    def wait_until(self, deadline: float) -> None:
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, STATUS_PERIOD_S))
            check_switches(self.fabric)
            if self.status is not None:
                self.report()

    def report(self) -> None:
        try:
            done = len(self.runner.flows_done())
        except EndpointError:
            return  # the one-line error comes where the run needs the endpoint's answer
        self.status(RunStatus(time.monotonic() - self.t0, self.duration_s,
                              len(self.runner.flows), len(self.runner.started), done))


def check_switches(fabric) -> None:
    """A RunFailed naming the first switch whose BMv2 has ended, and its log."""
    for name, status, log in fabric.stopped_switches():
        raise RunFailed(f"switch {name} stopped during the run (BMv2 exited with status "
                        f"{status}); its log: {log}")


def _call(client, host: str, run_dir: Path, **req) -> dict:
    """``client.call(**req)``, with an endpoint's failure as a RunFailed naming it and its log."""
    try:
        return client.call(**req)
    except EndpointError as exc:
        raise RunFailed(f"the endpoint on {host} failed: {exc} (its log: "
                        f"{run_dir / ENDPOINTS_DIR / (host + LOG_SUFFIX)})") from None


def _summary(sc: Scenario, eps, runner, counters, timeline, run_dir: Path) -> RunSummary:
    from testbed.fabric.measure import hidden_loss, kernel_drops

    snaps = {h: _call(eps[h], h, run_dir, cmd="stats") for h in sorted(eps)}
    flows = {}
    for f in sc.extras.flows:
        src, dst = snaps[f.src]["qps"], snaps[f.dst]["qps"]
        qps = []
        for a in runner.assignments[f.name]:
            s, d = src.get(str(a.requester_qpn), {}), dst.get(str(a.responder_qpn), {})
            qps.append({"qpn": a.requester_qpn, "bytes_acked": s.get("bytes_acked", 0),
                        "bytes_received": d.get("bytes", 0),
                        "packets_sent": s.get("packets_sent", 0),
                        "retransmitted": s.get("retransmitted", 0), "naks": s.get("naks", 0),
                        "timeouts": s.get("timeouts", 0),
                        "cnps_received": s.get("cnps_received", 0),
                        # out of retries: the QP's messages were flushed, not delivered
                        "failed": bool(s.get("retry_exceeded", 0)),
                        "complete": s.get("idle", False) and not s.get("retry_exceeded", 0)})
        flows[f.name] = {"src": f.src, "dst": f.dst, "qps": qps,
                         "bytes_received": sum(q["bytes_received"] for q in qps)}
    tester = build_tester(
        [FlowQps(f.src, f.dst, f.tc, f.tc if f.ack_tc is None else f.ack_tc,
                 tuple((a.requester_qpn, a.responder_qpn) for a in runner.assignments[f.name]))
         for f in sc.extras.flows], snaps, sc.cfg.qos.cnp_tc,
        {h.name: (h.leaf, h.leaf_port) for h in sc.topo.hosts},
        {n: c.pfc_tx for n, c in counters.items()}, {n: c.pfc_rx for n, c in counters.items()},
        {n: c.ecn_marked for n, c in counters.items()},
        {n: c.tx_port_tc for n, c in counters.items()},
        {n: c.rx_port_tc for n, c in counters.items()})
    pfc_tx = {name: sum(sc_.pfc_tx.values()) for name, sc_ in counters.items()}
    by_class = per_class(sc_.pfc_tx for sc_ in counters.values())
    return {"scenario": sc.cfg.name, "duration_s": sc.extras.duration_s, "flows": flows,
            "pfc_frames_sent": pfc_tx, "pfc_frames_by_class": by_class, "tester": tester,
            "timeline": timeline, "flow_errors": runner.errors,
            "kernel_drops_lossless": sum(kernel_drops(counters, tc) for tc in
                                         [*sc.cfg.qos.pfc_enable, *sc.cfg.qos.credit_enable]),
            "hidden_loss": hidden_loss(counters)}
