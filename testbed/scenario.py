"""Scenarios: a fabric, its QoS and watchdog, flows and faults on a timeline, and a results
folder. `testbed run SCENARIO.yaml` runs one; every experiment of the lab is such a file.

A scenario file holds the fabric config sections (name, fabric, ecmp, switch, qos, agent,
fidelity), plus:

    duration_s: 20            # the run ends here (senders stop, counters are read)
    settle_s: 2               # then this long with no traffic, to see what stays stuck
    endpoints: {dcqcn: true}  # the hosts' RoCE NICs; dcqcn_profile: paper | connectx
    routes:                   # static overrides: path pinning, bounce routes
      - {switch: leaf1, prefix: 10.0.3.0/24, via: spine1}
    flows:                    # traffic.flows.FlowSpec
      - {name: a, src: h1, dst: h3, message_bytes: 65536, duration_s: 10}
    faults:
      - {at_s: 0, link_down: [spine1, leaf3]}     # every parallel link of the pair
      - {at_s: 1, link_down: [spine2, leaf3, 2]}  # only the 2nd of them (1..parallel_links)
      - {at_s: 5, link_up: [spine1, leaf3]}
      - {at_s: 2, host: h4, mode: storm, tc: 3, until_s: 8}
      - {at_s: 2, host: h2, mode: slow_receiver, max_rx_pps: 50}
      - {at_s: 0, host: h3, mode: rx_loss, rate: 0.01, seed: 1}
    capture: [h1, leaf1:2]    # pcaps of h1's NIC and leaf1's port 2 (testbed.capture)

``rx_loss`` is random loss on the way into a host: its NIC drops each arriving RoCE data packet
with probability ``rate`` (0..1) before the QP sees it, from a random generator seeded with
``seed`` (the same seed, the same packets lost in the same order of arrival), and counts it in
the endpoint's ``rx_loss_dropped``. It stands for a lossy link (this kernel may lack netem) in
any class, lossless ones included: the receiver's Go-Back-N sees a gap, NAKs it, and the sender
resends from the lost packet on (scenarios/loss-gobackn.yaml).

Parallel links between a spine and a leaf are numbered 1..parallel_links in the order of their
port numbers (link 1 is the lowest port at both ends); a third element names one of them.
A flow's ``tc`` must be a class some DSCP reaches (``qos.dscp_to_tc_map``, or any unmapped DSCP
for ``default_tc``): the hosts mark each class with that DSCP (see QosConfig.tc_to_dscp).

The results folder gets the resolved config and topology, the agents' telemetry and events,
the endpoints' per-QP series, P4 counters sampled over the run (``p4_counters.csv``), and
``summary.json``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from testbed.analysis import deadlock_summary
from testbed.capture import Captures
from testbed.config import ConfigError, FabricConfig
from testbed.counter_sampler import CounterSampler
from testbed.results import P4_COUNTERS_FILE, run_events
from testbed.topology import Topology, build_topology, link_ends, pin_route
from testbed.validate import explain, parse_config, read_yaml
from traffic.flows import FlowRunner, FlowSpec


class RouteOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")
    switch: str
    prefix: str
    via: str


#: A link fault's target: [switch, switch] for every parallel link between the two, or
#: [switch, switch, N] for the Nth of them (1..parallel_links, in port order).
LinkRef = tuple[str, str] | tuple[str, str, int]


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at_s: float = Field(ge=0)
    link_down: LinkRef | None = None
    link_up: LinkRef | None = None
    host: str | None = None
    mode: Literal["storm", "slow_receiver", "rx_loss", "none"] | None = None
    tc: int = Field(3, ge=0, le=7)
    until_s: float | None = Field(None, gt=0)
    max_rx_pps: float | None = Field(None, gt=0)
    rate: float | None = Field(None, ge=0, le=1, description="rx_loss: probability that an "
                               "arriving RoCE data packet is dropped (0.01: 1%)")
    seed: int = Field(1, ge=0, description="rx_loss: seed of the loss's random generator")

    @field_validator("link_down", "link_up", mode="before")
    @classmethod
    def _link_ref(cls, v: object) -> object:
        """One message for every wrong form (pydantic's would name each tuple type it tried)."""
        if v is None:
            return v
        ok = (isinstance(v, list | tuple) and len(v) in (2, 3)
              and all(isinstance(x, str) for x in v[:2])
              and (len(v) == 2 or (type(v[2]) is int and v[2] >= 1)))
        if not ok:
            raise ValueError("write [switch, switch] for every link between the two, or "
                             "[switch, switch, N] for their Nth parallel link (N from 1)")
        return tuple(v)

    @model_validator(mode="after")
    def _one_kind(self) -> Fault:
        kinds = [self.link_down is not None, self.link_up is not None, self.mode is not None]
        if sum(kinds) != 1:
            raise ValueError("a fault is exactly one of link_down, link_up, or a host mode")
        if self.mode is not None and self.host is None:
            raise ValueError(f"mode {self.mode} needs a host")
        if self.mode == "slow_receiver" and self.max_rx_pps is None:
            raise ValueError("slow_receiver needs max_rx_pps")
        if self.mode == "rx_loss" and self.rate is None:
            raise ValueError("rx_loss needs rate, the probability of losing a packet (0..1)")
        if self.until_s is not None and self.until_s <= self.at_s:
            raise ValueError("until_s must be after at_s")
        return self


class EndpointOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dcqcn: bool = True
    #: traffic.dcqcn.PROFILES: paper (Zhu et al. 2015, the default) or connectx (NVIDIA's
    #: defaults), both scaled to the link; the receivers' CNP interval follows it too.
    dcqcn_profile: Literal["paper", "connectx"] | None = None

    @model_validator(mode="after")
    def _profile_needs_dcqcn(self) -> EndpointOptions:
        if self.dcqcn_profile is not None and not self.dcqcn:
            raise ValueError(f"dcqcn_profile {self.dcqcn_profile} has no effect with dcqcn: "
                             "false; turn dcqcn on or leave the profile out")
        return self

    def args(self) -> list[str]:
        """The endpoints' command-line arguments for these options."""
        if not self.dcqcn:
            return ["--no-dcqcn"]
        return ["--dcqcn-profile", self.dcqcn_profile] if self.dcqcn_profile else []


class ScenarioExtras(BaseModel):
    model_config = ConfigDict(extra="forbid")
    duration_s: float = Field(10.0, gt=0, le=3600)
    settle_s: float = Field(2.0, ge=0, le=600)
    sample_period_s: float = Field(0.5, ge=0.05, le=60)
    endpoints: EndpointOptions = Field(default_factory=EndpointOptions)
    routes: list[RouteOverride] = Field(default_factory=list)
    flows: list[FlowSpec] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    capture: list[str] = Field(
        default_factory=list, description="Packet captures: a host (h1) or a switch port "
        "(leaf1:2), each written to captures/ as a pcap (testbed.capture).")
    capture_max_mb: float = Field(
        20.0, gt=0, le=2000, description="Each capture stops growing at this size (MB); a "
        "real capture's ring buffer or file limit (dumpcap -a filesize).")
    capture_snaplen_bytes: int = Field(
        256, ge=64, le=65535, description="Bytes kept of each frame: Ethernet, IPv4, UDP and "
        "the RoCE headers (BTH, RETH, AETH) fit; tcpdump's -s.")


#: The fabric config's own sections, one definition: FabricConfig's fields.
FABRIC_KEYS = set(FabricConfig.model_fields)


@dataclass
class Scenario:
    cfg: FabricConfig
    extras: ScenarioExtras
    topo: Topology
    source: str = "scenario"


def load_scenario(path: str | Path) -> Scenario:
    data: Any = read_yaml(path, "scenario") or {}
    if not isinstance(data, dict):
        raise ConfigError(["the top level must be a mapping"], str(path))
    return parse_scenario(data, str(path))


def parse_scenario(data: dict, source: str = "scenario") -> Scenario:
    problems: list[str] = []
    cfg = None
    try:
        cfg = parse_config({k: v for k, v in data.items() if k in FABRIC_KEYS}, source)
    except ConfigError as exc:
        problems += exc.problems
    extras = None
    try:
        extras = ScenarioExtras.model_validate({k: v for k, v in data.items()
                                                if k not in FABRIC_KEYS})
    except ValidationError as err:
        problems += explain(ScenarioExtras, err)
    if cfg is None or extras is None:
        raise ConfigError(problems, source)
    topo = build_topology(cfg)
    problems = (_flow_problems(cfg, extras, topo) + _fault_problems(extras, topo)
                + _route_problems(extras, topo) + _capture_problems(extras, topo))
    if problems:
        raise ConfigError(problems, source)
    return Scenario(cfg, extras, topo, source)


def _flow_problems(cfg: FabricConfig, extras: ScenarioExtras, topo: Topology) -> list[str]:
    """Hosts that exist, a start inside the run, and a class the hosts can mark: a class no
    DSCP reaches would be sent in whichever class the switches give its DSCP instead."""
    problems = []
    hosts = {h.name for h in topo.hosts}
    dscps = cfg.qos.tc_to_dscp()
    mapped = cfg.qos.dscp_to_tc_map
    for i, f in enumerate(extras.flows):
        for role in ("src", "dst"):
            h = getattr(f, role)
            if h not in hosts:
                problems.append(f"flows.{i}.{role}: unknown host {h!r}; hosts are "
                                f"{', '.join(sorted(hosts, key=lambda x: int(x[1:])))}")
        if f.start_s >= extras.duration_s:
            problems.append(f"flows.{i}.start_s: {f.start_s} is past the end "
                            f"(duration_s {extras.duration_s})")
        if f.tc not in dscps:
            free = f.tc << 3 if f.tc << 3 not in mapped else min(set(range(64)) - set(mapped),
                                                                   default=f.tc << 3)
            problems.append(
                f"flows.{i}.tc: no DSCP reaches class {f.tc} (qos.dscp_to_tc_map {mapped}, "
                f"default_tc {cfg.qos.default_tc}), so the hosts cannot send in it: map one, "
                f"e.g. qos.dscp_to_tc_map: {{{free}: {f.tc}}}, or use a class that has one "
                f"({', '.join(map(str, sorted(dscps)))})")
    return problems


def _fault_problems(extras: ScenarioExtras, topo: Topology) -> list[str]:
    problems = []
    hosts = {h.name for h in topo.hosts}
    end = extras.duration_s
    for i, fl in enumerate(extras.faults):
        if fl.at_s >= end:
            problems.append(f"faults.{i}.at_s: {fl.at_s} is past the end (duration_s {end})")
        if fl.until_s is not None and fl.until_s > end:
            problems.append(f"faults.{i}.until_s: {fl.until_s} is past the end "
                            f"(duration_s {end})")
        for kind in ("link_down", "link_up"):
            ref = getattr(fl, kind)
            if ref is None:
                continue
            try:
                link_ends(topo, ref[0], ref[1], ref[2] if len(ref) > 2 else None)
            except ValueError as exc:
                problems.append(f"faults.{i}.{kind}: {exc}")
                continue
            if set(ref[:2]) & hosts:
                problems.append(f"faults.{i}.{kind}: {ref[0]}-{ref[1]} is a host link; only "
                                f"links between switches can fail (use a host fault instead)")
        if fl.host is not None and fl.host not in hosts:
            problems.append(f"faults.{i}.host: unknown host {fl.host!r}")
    return problems


def _route_problems(extras: ScenarioExtras, topo: Topology) -> list[str]:
    problems = []
    switches = {s.name for s in topo.switches}
    for i, r in enumerate(extras.routes):
        if r.switch not in switches:
            problems.append(f"routes.{i}.switch: unknown switch {r.switch!r}")
            continue
        try:
            pin_route(topo, r.switch, r.prefix, r.via)
        except ValueError as exc:
            problems.append(f"routes.{i}: {exc}")
    return problems


def _capture_problems(extras: ScenarioExtras, topo: Topology) -> list[str]:
    from testbed.capture import target_problem

    return [f"capture.{i}: {msg}" for i, t in enumerate(extras.capture)
            if (msg := target_problem(t, topo)) is not None]


# -- running ----------------------------------------------------------------------------------

@dataclass
class RunResult:
    results_dir: Path
    summary: dict = field(default_factory=dict)


def run_scenario(sc: Scenario, results_root: Path, progress=print) -> RunResult:
    from testbed.fabric import Fabric
    from testbed.measure import fabric_counters, hidden_loss, kernel_drops
    from testbed.run import Run

    run = Run.named(sc.cfg, sc.topo, results_root, progress)
    run_dir = run.results_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario.json").write_text(json.dumps(
        {"config": sc.cfg.model_dump(mode="json"), **sc.extras.model_dump(mode="json")},
        indent=2))
    res = RunResult(run_dir)
    fabric = Fabric(sc.cfg, sc.topo, run_dir, run=run)
    timeline: list[dict] = []
    sampler = None
    stopped_at: float | None = None
    captures = Captures(sc.extras.capture, run_dir, run.state, sc.extras.capture_max_mb,
                        sc.extras.capture_snaplen_bytes)
    try:
        fabric.start()
        captures.start(fabric.net)  # before any traffic
        eps = fabric.start_endpoints(sc.extras.endpoints.args())
        runner = FlowRunner(sc.extras.flows, eps, {h.name: h.ip for h in sc.topo.hosts})
        sampler = CounterSampler(fabric, run_dir / P4_COUNTERS_FILE, sc.extras.sample_period_s)
        sampler.start()
        events = sorted(
            [(f.at_s, "fault", f) for f in sc.extras.faults]
            + [(f.until_s, "fault_end", f) for f in sc.extras.faults if f.until_s is not None],
            key=lambda e: e[0])
        def clock() -> float:  # the run's clock, as in the agents' telemetry
            return round(time.monotonic() - fabric.t0, 3)

        t0 = time.monotonic()  # flows' start_s and faults' at_s count from here
        runner.start(t0)
        timeline.append({"t_s": clock(), "event": "start"})
        progress(f"running for {sc.extras.duration_s:g} s")
        for at, kind, f in events:
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            what = _apply_fault(fabric, f, end=(kind == "fault_end"))
            timeline.append({"t_s": clock(), "event": what})
        delay = t0 + sc.extras.duration_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        runner.stop()
        for c in eps.values():  # senders stop: what the network holds now stays or drains
            c.call(cmd="halt")
        stopped_at = clock()
        timeline.append({"t_s": stopped_at, "event": "senders stop"})
        time.sleep(sc.extras.settle_s)
        counters = fabric_counters(fabric)
        res.summary = _summary(sc, eps, runner, counters, timeline)
        res.summary["kernel_drops_lossless"] = sum(kernel_drops(counters, tc)
                                                   for tc in sc.cfg.qos.pfc_enable)
        res.summary["hidden_loss"] = hidden_loss(counters)
    finally:
        if sampler is not None:
            sampler.stop_event.set()
            sampler.join(timeout=5)
        if captures.targets:
            res.summary["captures"] = captures.stop()
        fabric.stop()
        tel = run.telemetry_summary()
        if tel is not None:  # the fidelity guard's verdict, written as the fabric stopped
            res.summary["fidelity"] = tel.get("fidelity")
        res.summary.setdefault("timeline", timeline)
        res.summary["watchdog_events"] = _watchdog_events(run_dir)
        if stopped_at is not None:
            res.summary["deadlock"] = deadlock_summary(run_dir, stopped_at,
                                                       list(sc.cfg.qos.pfc_enable))
        _add_headline(run_dir, res.summary, progress)
        (run_dir / "summary.json").write_text(json.dumps(res.summary, indent=2, default=str))
        _write_reports(run_dir, progress)
    return res


def _add_headline(run_dir: Path, summary: dict, progress) -> None:
    """summary["headline"]: the figures runs are compared by (testbed.headline)."""
    from testbed.headline import compute_headline

    try:
        summary["headline"] = compute_headline(run_dir, summary)
    except Exception as exc:  # the figures must not hide the results they come from
        progress(f"headline figures not computed: {exc}")


def _write_reports(run_dir: Path, progress) -> None:
    """report.md and report.png, then report.html; a report must not hide the results it
    reports on, so a failure is said and the run goes on."""
    from testbed.report import make_report
    from testbed.report_html import write_html_report

    for name, write in (("report", make_report), ("report.html", write_html_report)):
        try:
            write(run_dir)
        except Exception as exc:
            progress(f"{name} not written: {exc}")


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
    if f.mode == "rx_loss":
        req.update(rate=f.rate, seed=f.seed)
        c.call(cmd="fault", **req)
        return f"{f.host}: rx_loss (rate {f.rate:g}, seed {f.seed})"
    c.call(cmd="fault", **req)
    return f"{f.host}: {f.mode} (class {f.tc})"


def _watchdog_events(run_dir: Path) -> list[dict]:
    """The agents' watchdog events (storm_detected, storm_restored), as summary.json has them."""
    return [asdict(e) for e in run_events(run_dir) if e.event.startswith("storm")]


def _summary(sc: Scenario, eps, runner, counters, timeline) -> dict:
    flows = {}
    for f in sc.extras.flows:
        src = eps[f.src].call(cmd="stats")["qps"]
        dst = eps[f.dst].call(cmd="stats")["qps"]
        qps = []
        for a in runner.assignments[f.name]:
            s, d = src.get(str(a.requester_qpn), {}), dst.get(str(a.responder_qpn), {})
            qps.append({"qpn": a.requester_qpn, "bytes_acked": s.get("bytes_acked", 0),
                        "bytes_received": d.get("bytes", 0),
                        "retransmitted": s.get("retransmitted", 0), "naks": s.get("naks", 0),
                        "cnps_received": s.get("cnps_received", 0),
                        "complete": s.get("idle", False)})
        flows[f.name] = {"src": f.src, "dst": f.dst, "qps": qps,
                         "bytes_received": sum(q["bytes_received"] for q in qps)}
    pfc_tx = {name: sum(sc_.pfc_tx.values()) for name, sc_ in counters.items()}
    return {"scenario": sc.cfg.name, "duration_s": sc.extras.duration_s, "flows": flows,
            "pfc_frames_sent": pfc_tx, "timeline": timeline,
            "flow_errors": runner.errors}
