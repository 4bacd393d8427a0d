"""Scenarios: a fabric, its QoS and watchdog, flows and faults on a timeline, and a results
folder. `testbed run SCENARIO.yaml` runs one; every experiment of the lab is such a file.

A scenario file holds the fabric config sections (name, fabric, ecmp, switch, qos, agent,
fidelity), plus:

    mode: roce-lossless       # or roce-lossy, tcp (testbed.run.modes); unset: as qos says
    duration_s: 20            # the run ends here (senders stop, counters are read)
    settle_s: 2               # then this long with no traffic, to see what stays stuck
    endpoints: {dcqcn: true}  # the hosts' RoCE NICs; dcqcn_profile: paper | connectx,
                              # local_ack_timeout: 8, retry_count: 7
    routes:                   # static overrides: path pinning, bounce routes
      - {switch: leaf1, prefix: 10.0.3.0/24, via: spine1}
    flows:                    # traffic.flows.FlowSpec
      - {name: a, src: h1, dst: h3, message_bytes: 65536, duration_s: 10}
    collectives:              # traffic.collectives.CollectiveSpec, run as flows
      - {name: ar, op: all_reduce, size_bytes: 1048576, iterations: 5, channels: 1}
    background:               # traffic.background.BackgroundSpec: UDP, not RoCE
      - {name: be, src: h2, dst: h1, tc: 0}       # line rate (rate_mbps), largest frames
    faults:
      - {at_s: 0, link_down: [spine1, leaf3]}     # every parallel link of the pair
      - {at_s: 1, link_down: [spine2, leaf3, 2]}  # only the 2nd of them (1..parallel_links)
      - {at_s: 5, link_up: [spine1, leaf3]}
      - {at_s: 2, host: h4, mode: storm, tc: 3, until_s: 8}   # quanta: 65535 each PAUSE
      - {at_s: 2, host: h2, mode: slow_receiver, max_rx_pps: 50}
      - {at_s: 0, host: h3, mode: rx_loss, rate: 0.01, seed: 1}
    capture: [h1, leaf1:2]    # pcaps of h1's NIC and leaf1's port 2 (testbed.run.capture)

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from testbed.budget.scenario import AUTO_FIELDS, auto_fields, auto_problem, choose_rates
from testbed.config.models import ConfigError, FabricConfig
from testbed.run.modes import apply_mode
from testbed.run.scenario_background import background_problems, shared_sources
from testbed.run.scenario_fields import class_problem, past_end
from testbed.topology.graph import Topology, build_topology, link_ends, pin_route
from testbed.topology.validate import explain, parse_config, read_yaml
from traffic.background import BackgroundSpec
from traffic.collectives import CollectiveSpec, default_ranks, flows_of, message_bytes
from traffic.flows import FlowSpec
from traffic.names import NAME_PATTERN, PORT_PATTERN, is_name
from traffic.wire import LOCAL_ACK_TIMEOUT, PFC_MAX_QUANTA, RETRY_COUNT


class RouteOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")
    switch: str = Field(pattern=NAME_PATTERN)
    prefix: str
    via: str = Field(pattern=NAME_PATTERN)


#: A link fault's target: [switch, switch] for every parallel link between the two, or
#: [switch, switch, N] for the Nth of them (1..parallel_links, in port order).
LinkRef = tuple[str, str] | tuple[str, str, int]


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at_s: float = Field(ge=0)
    link_down: LinkRef | None = None
    link_up: LinkRef | None = None
    host: str | None = Field(None, pattern=NAME_PATTERN)
    mode: Literal["storm", "slow_receiver", "rx_loss", "none"] | None = None
    tc: int = Field(3, ge=0, le=7)
    until_s: float | None = Field(None, gt=0)
    max_rx_pps: float | None = Field(None, gt=0)
    rate: float | None = Field(None, ge=0, le=1, description="rx_loss: probability that an "
                               "arriving RoCE data packet is dropped (0.01: 1%)")
    seed: int = Field(1, ge=0, description="rx_loss: seed of the loss's random generator")
    quanta: int | None = Field(None, ge=1, le=PFC_MAX_QUANTA, description=(
        "storm: the pause each PAUSE frame asks for, in quanta of 512 bit times (default "
        "65535, the longest); the pause outlasts the storm's last frame by that much"))

    @field_validator("link_down", "link_up", mode="before")
    @classmethod
    def _link_ref(cls, v: object) -> object:
        """One message for every wrong form (pydantic's would name each tuple type it tried)."""
        if v is None:
            return v
        ok = (isinstance(v, list | tuple) and len(v) in (2, 3)
              and all(is_name(x) for x in v[:2])
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
        if self.quanta is not None and self.mode != "storm":
            raise ValueError("quanta is the pause a storm's frames ask for: only with mode storm")
        if self.until_s is not None and self.until_s <= self.at_s:
            raise ValueError("until_s must be after at_s")
        return self


class EndpointOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dcqcn: bool = True
    #: traffic.dcqcn.PROFILES: paper (Zhu et al. 2015, the default) or connectx (NVIDIA's
    #: defaults), both scaled to the link; the receivers' CNP interval follows it too.
    dcqcn_profile: Literal["paper", "connectx"] | None = None
    #: Go-Back-N's retransmission timer: IB's Local ACK Timeout exponent n, the QP's
    #: ``timeout`` attribute: 4.096 us x 2^n at 40 Gbit/s, scaled to the link as DCQCN's
    #: timers are (x 4000 at 10 Mbit/s; traffic.wire.LOCAL_ACK_TIMEOUT says why 8). A
    #: timer shorter than the longest the fabric holds a packet resends packets that were never
    #: lost; a longer one makes a lost tail packet (lossy runs) cost more time. Time the NIC
    #: spends paused does not count.
    local_ack_timeout: int = Field(LOCAL_ACK_TIMEOUT, ge=1, le=31)
    #: IB's retry_cnt: timeouts in a row without progress before a QP goes to the error state
    #: and flushes its messages (7, the largest, is NCCL's NCCL_IB_RETRY_CNT).
    retry_count: int = Field(RETRY_COUNT, ge=0, le=7)
    #: The hosts' transport, set by the scenario's mode (testbed.run.modes): RoCE RC QPs, or
    #: the kernel's TCP (mode tcp, traffic.tcp_endpoint).
    transport: Literal["roce", "tcp"] = "roce"
    #: Mode tcp: the kernel's congestion control for every connection (tcp(7)
    #: TCP_CONGESTION; this kernel has reno, cubic and bbr, and no dctcp), and RFC 3168 ECN,
    #: which reacts to the switches' CE marks as DCQCN does to CNPs.
    tcp_congestion: Literal["cubic", "reno", "bbr"] = "cubic"
    tcp_ecn: bool = True

    @model_validator(mode="before")
    @classmethod
    def _no_fixed_timer(cls, data: Any) -> Any:
        if isinstance(data, dict) and "retransmit_timeout_ms" in data:
            raise ValueError("retransmit_timeout_ms is gone: the timer is IB's Local ACK "
                             "Timeout scaled to the link; set local_ack_timeout (n: 4.096 us "
                             "x 2^n at 40 Gbit/s, default 8)")
        return data

    @model_validator(mode="after")
    def _tcp_settings_need_tcp(self) -> EndpointOptions:
        fields = type(self).model_fields
        stray = [k for k in ("tcp_congestion", "tcp_ecn") if getattr(self, k) != fields[k].default]
        if stray and self.transport != "tcp":
            raise ValueError(f"{stray[0]} sets TCP's behaviour: only in mode tcp")
        return self

    @model_validator(mode="after")
    def _profile_needs_dcqcn(self) -> EndpointOptions:
        if self.dcqcn_profile is not None and not self.dcqcn:
            raise ValueError(f"dcqcn_profile {self.dcqcn_profile} has no effect with dcqcn: "
                             "false; turn dcqcn on or leave the profile out")
        return self

    def args(self) -> list[str]:
        """The endpoints' command-line arguments for these options."""
        rto = ["--local-ack-timeout", str(self.local_ack_timeout),
               "--retry-count", str(self.retry_count)]
        if self.transport == "tcp":
            return ["--transport", "tcp", "--tcp-congestion", self.tcp_congestion, "--no-dcqcn",
                    *([] if self.tcp_ecn else ["--no-tcp-ecn"])]
        if not self.dcqcn:
            return ["--no-dcqcn", *rto]
        return (["--dcqcn-profile", self.dcqcn_profile] if self.dcqcn_profile else []) + rto


class ScenarioExtras(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["roce-lossless", "roce-lossy", "tcp", "ib-credit"] | None = Field(
        None, description="How the fabric carries the flows (testbed.run.modes): "
        "roce-lossless (PFC + ECN + DCQCN), roce-lossy (no PFC), tcp (the hosts' kernel "
        "TCP, no PFC) or ib-credit (InfiniBand-style credits per hop instead of PFC); unset: "
        "as the qos and endpoints sections say.")
    duration_s: float = Field(10.0, gt=0, le=3600)
    settle_s: float = Field(2.0, ge=0, le=600)
    sample_period_s: float = Field(0.5, ge=0.05, le=60)
    endpoints: EndpointOptions = Field(default_factory=EndpointOptions)
    routes: list[RouteOverride] = Field(default_factory=list)
    flows: list[FlowSpec] = Field(default_factory=list)
    collectives: list[CollectiveSpec] = Field(
        default_factory=list, description="Collectives (all-reduce, all-to-all...) among "
        "hosts, run as flows whose steps wait on each other (traffic.collectives); parsing "
        "adds those flows to flows.")
    background: list[BackgroundSpec] = Field(
        default_factory=list, description="Best-effort background: constant-rate UDP from the "
        "hosts' kernels in a lossy class, obeying nothing (traffic.background).")
    faults: list[Fault] = Field(default_factory=list)
    capture: list[Annotated[str, Field(pattern=f"{NAME_PATTERN}|{PORT_PATTERN}")]] = Field(
        default_factory=list, description="Packet captures: a host (h1) or a switch port "
        "(leaf1:2), each written to captures/ as a pcap (testbed.run.capture).")
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
    #: the fabric fields the file set to `auto`, now holding the rates chosen for them
    auto: list[str] = field(default_factory=list)


def load_scenario(path: str | Path) -> Scenario:
    data: Any = read_yaml(path, "scenario") or {}
    if not isinstance(data, dict):
        raise ConfigError(["the top level must be a mapping"], str(path))
    return parse_scenario(data, str(path))


def parse_scenario(data: dict, source: str = "scenario") -> Scenario:
    data, wrong = apply_mode(data)
    if wrong:
        raise ConfigError(wrong, source)
    fields = auto_fields(data)
    if fields:
        return _parse_auto(data, source, fields)
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
    problems = (_flow_problems(cfg, extras, topo) + background_problems(cfg, extras, topo)
                + _fault_problems(extras, topo)
                + _route_problems(extras, topo) + _capture_problems(extras, topo))
    if not problems:
        extras, problems = _with_collectives(cfg, extras, topo)
        problems += shared_sources(extras, topo)  # the collectives' flows send too
    if problems:
        raise ConfigError(problems, source)
    return Scenario(cfg, extras, topo, source)


def collective_ranks(c: CollectiveSpec, topo: Topology) -> list[str]:
    """The collective's ranks in ring order: as written, or every host with the leaves taken
    in turn (traffic.collectives.default_ranks)."""
    if c.ranks is not None:
        return list(c.ranks)
    by_leaf: dict[str, list[str]] = {}
    for h in sorted(topo.hosts, key=lambda h: (h.leaf_index, h.position)):
        by_leaf.setdefault(h.leaf, []).append(h.name)
    return default_ranks(by_leaf)


def _with_collectives(cfg: FabricConfig, extras: ScenarioExtras,
                      topo: Topology) -> tuple[ScenarioExtras, list[str]]:
    """The scenario with its collectives' flows added to its flows (and their ranks written
    out, as scenario.json keeps them), or what is wrong with them (a host that does not exist,
    a size that does not split, a class no DSCP reaches, a name a flow already has)."""
    problems: list[str] = []
    hosts = {h.name for h in topo.hosts}
    added: list[FlowSpec] = []
    resolved: list[CollectiveSpec] = []
    for i, c in enumerate(extras.collectives):
        ranks = collective_ranks(c, topo)
        resolved.append(c.model_copy(update={"ranks": ranks}))
        unknown = [r for r in ranks if r not in hosts]
        if unknown:
            problems.append(f"collectives.{i}.ranks: unknown host {unknown[0]!r}")
            continue
        if message_bytes(c, len(ranks)) is None:
            unit = len(ranks) * c.channels
            problems.append(f"collectives.{i}.size_bytes: {c.size_bytes} does not split into "
                            f"{len(ranks)} ranks x {c.channels} channels; use a multiple of "
                            f"{unit}, e.g. {max(1, round(c.size_bytes / unit)) * unit}")
            continue
        problems += [m for m in (class_problem(cfg, f"collectives.{i}.tc", c.tc),
                                 past_end(f"collectives.{i}.start_s", c.start_s, extras))
                     if m]
        # a results folder's scenario.json holds them already: parsing it again adds nothing
        added += [f for f in flows_of(c, ranks) if f not in extras.flows]
    names = [f.name for f in [*extras.flows, *added]]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        problems.append(f"flows: the name {clash[0]!r} is given twice (a collective names its "
                        "flows <collective>-<src>-<dst>)")
    if problems:
        return extras, problems
    return extras.model_copy(update={"flows": [*extras.flows, *added],
                                     "collectives": resolved}), []


def _parse_auto(data: dict, source: str, fields: list[str]) -> Scenario:
    """A scenario whose link rates say `auto`: parsed at the default rate for its flows, then
    at the highest rate whose load fits this machine's measured budget (testbed.budget.scenario)."""
    from testbed.budget.calibration_store import load_profile

    shape = {k: v for k, v in data["fabric"].items() if k not in fields}
    first = parse_scenario({**data, "fabric": shape}, source)
    profile, reason = load_profile()
    if profile is None:
        raise ConfigError([auto_problem(fields, reason)], source)
    rates = choose_rates(first.cfg, first.topo, first.extras, fields, profile)
    if rates is None:
        raise ConfigError([f"fabric.{fields[0]}: auto found no rate from 0.1 Mbit/s up at "
                           "which this scenario's load fits this machine's budget (testbed "
                           "calibrate): fewer hosts or flows, a smaller "
                           "fidelity.cpu_budget_margin, or a rate in Mbit/s"], source)
    shape.update(zip(AUTO_FIELDS, rates, strict=True))
    sc = parse_scenario({**data, "fabric": shape}, source)
    sc.auto = fields
    return sc


def _flow_problems(cfg: FabricConfig, extras: ScenarioExtras, topo: Topology) -> list[str]:
    """Hosts that exist, a start inside the run, and classes the hosts can mark (the data's and
    the ACKs'): a class no DSCP reaches would be sent in whichever class the switches give its
    DSCP instead."""
    problems = []
    hosts = {h.name for h in topo.hosts}
    by_name = {g.name: g for g in extras.flows}
    for i, f in enumerate(extras.flows):
        for role in ("src", "dst"):
            h = getattr(f, role)
            if h not in hosts:
                problems.append(f"flows.{i}.{role}: unknown host {h!r}; hosts are "
                                f"{', '.join(sorted(hosts, key=lambda x: int(x[1:])))}")
        for g in f.after:
            w = by_name.get(g)
            if w is None or w.dst != f.src or w.qps != f.qps or w.start_s != f.start_s:
                problems.append(f"flows.{i}.after: {g!r} must be a flow into {f.src} with "
                                f"{f.qps} QPs starting with it (start_s {f.start_s})")
        problems += [m for m in (past_end(f"flows.{i}.start_s", f.start_s, extras),
                                 class_problem(cfg, f"flows.{i}.tc", f.tc),
                                 class_problem(cfg, f"flows.{i}.ack_tc", f.ack_tc)) if m]
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
    from testbed.run.capture import target_problem

    return [f"capture.{i}: {msg}" for i, t in enumerate(extras.capture)
            if (msg := target_problem(t, topo)) is not None]
