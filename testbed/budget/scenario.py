"""A scenario's budget: its load at its link rates against this machine's profile, the `auto`
link rates chosen from it, and the warning a run over budget prints before it starts.

The pieces: :mod:`testbed.budget.load_model` counts the packets, :mod:`testbed.budget.cores` prices
them, :mod:`testbed.budget.calibration_store` holds the profile. Here they meet a scenario's config,
flows and faults; the scenario loader calls :func:`resolve_auto`, the run command
:func:`scenario_verdict` and :func:`over_budget_warning`.
"""

from __future__ import annotations

from typing import Any

from testbed.budget.cores import Profile, Verdict, auto_rate, judge
from testbed.budget.load_model import Load, Paths, add_credit_frames, peak_load, running
from testbed.config.bmv2_build import BuildError, select
from testbed.config.models import FabricConfig
from testbed.config.phantoms import phantom_classes
from testbed.topology.graph import DownLinks, Topology, build_topology, link_ends
from testbed.topology.qos import check_qos

#: The link-rate fields that may say `auto`, in the fabric section.
AUTO_FIELDS = ("host_link_mbps", "fabric_link_mbps")
AUTO = "auto"


def auto_fields(data: Any) -> list[str]:
    """The fields of a scenario's or config's raw data that ask for `auto`."""
    shape = data.get("fabric") if isinstance(data, dict) else None
    if not isinstance(shape, dict):
        return []
    return [k for k in AUTO_FIELDS if shape.get(k) == AUTO]


def cnp_classes(cfg: FabricConfig, dcqcn: bool) -> set[int]:
    """The classes in which congestion brings CNPs: ECN-marked, with DCQCN on."""
    return set(cfg.qos.ecn) if dcqcn else set()


def down_at_start(topo: Topology, faults: list) -> DownLinks:
    """The links a scenario takes down at its start (at_s 0), whose routes its flows avoid."""
    ends: set[tuple[str, int]] = set()
    for f in faults:
        ref = getattr(f, "link_down", None)
        if ref is not None and f.at_s == 0:
            ends |= link_ends(topo, ref[0], ref[1], ref[2] if len(ref) > 2 else None)
    return frozenset(ends)


def scenario_load(cfg: FabricConfig, topo: Topology, extras: Any) -> Load:
    """The peak load of a scenario's flows (``extras``: its ScenarioExtras), with mode
    ib-credit's credit frames."""
    load = peak_load(topo, extras.flows, extras.duration_s,
                     cnp_classes(cfg, extras.endpoints.dcqcn), down_at_start(topo, extras.faults),
                     extras.background)
    if cfg.qos.credit_enable:
        add_credit_frames(load, topo, cfg.qos.credit.period_ms / 1000)
    return load


def build_name(cfg: FabricConfig) -> str:
    """The BMv2 build the switches will run: switch.build, `auto` resolved as a run resolves
    it (the fast build if installed and no log), or as written where none is installed."""
    try:
        return select(cfg.switch.build, cfg.switch.log).build
    except BuildError:
        return "default" if cfg.switch.build == "auto" else cfg.switch.build


def with_rates(cfg: FabricConfig, host: float, fabric: float) -> FabricConfig:
    """``cfg`` with these link rates (the rest as it is)."""
    shape = cfg.fabric.model_copy(update={"host_link_mbps": host, "fabric_link_mbps": fabric})
    return cfg.model_copy(update={"fabric": shape})


def rated_topology(cfg: FabricConfig, topo: Topology) -> Topology:
    """``cfg``'s topology with ``topo``'s route overrides (the scenario's pinned routes)."""
    out = build_topology(cfg)
    out.overrides = {k: dict(v) for k, v in topo.overrides.items()}
    return out


def scenario_verdict(cfg: FabricConfig, topo: Topology, extras: Any,
                     profile: Profile | None, reason: str = "") -> Verdict:
    """The scenario at its rates against the budget (``reason``: why there is no profile)."""
    v = judge(scenario_load(cfg, topo, extras), profile, build_name(cfg),
              cfg.fidelity.cpu_budget_margin)
    if profile is None and reason:
        v.reason = f"{reason}: run `sudo testbed calibrate`"
    return v


def choose_rates(cfg: FabricConfig, topo: Topology, extras: Any, fields: list[str],
                 profile: Profile) -> tuple[float, float] | None:
    """The (host, fabric) rates for the `auto` ``fields``: the highest rate at which the load
    fits the budget and the QoS derived from the rate is valid (the headroom grows with it and
    must stay within the buffer: :func:`testbed.topology.qos.check_qos`), the same for both when
    both say auto; None if none does."""
    host, fabric = cfg.fabric.host_link_mbps, cfg.fabric.fabric_link_mbps

    def rates(r: float) -> tuple[float, float]:
        return (r if "host_link_mbps" in fields else host,
                r if "fabric_link_mbps" in fields else fabric)

    def fits(r: float) -> bool:
        c = with_rates(cfg, *rates(r))
        return not check_qos(c) and scenario_verdict(
            c, rated_topology(c, topo), extras, profile).status == "fits"

    r = auto_rate(fits)
    return None if r is None else rates(r)


def auto_problem(fields: list[str], reason: str) -> str:
    """The one line refusing `auto` without a profile."""
    return (f"fabric.{fields[0]}: auto chooses the rate from this machine's measured budget, "
            f"and there is none ({reason}): run `sudo testbed calibrate`, or give a rate in "
            f"Mbit/s")


def over_budget_warning(v: Verdict) -> str | None:
    """One line for a run over budget: the field to change and the fix; None if it fits."""
    if v.status != "over" or v.demand is None or v.limit_cores is None:
        return None
    field = ("fabric.host_link_mbps" if v.host_mbps >= v.fabric_mbps
             else "fabric.fabric_link_mbps")
    value = v.host_mbps if field.endswith("host_link_mbps") else v.fabric_mbps
    return (f"{field} {value:g} is over this machine's budget: the load needs "
            f"{v.demand.total:.2f} cores, {v.limit_cores:.2f} are there after the margin "
            f"(fidelity.cpu_budget_margin {v.margin:g}); the run may be flagged unfaithful. "
            f"Fix: lower {field}, or set it to auto")


def shared_lossless_ports(cfg: FabricConfig, topo: Topology, extras: Any) -> str | None:
    """A warning before the run, or None: a flow in a lossless class that crosses a switch port
    at once with a flow (or a background flow) of a higher class that keeps no P4 phantom. The
    port serves a higher class first (strict priority), and a lossless class's phantom drains
    with what the phantoms above it leave (p4/lossless.p4, drain_under); a class above with no
    phantom is not subtracted, so the lossless phantom falls below the real queue and the run
    is flagged (phantom_below). Every class data reaches has one (phantom_classes) but the
    class only CNPs use: a flow sent in it is the case. Pure."""
    lossless = set(cfg.qos.pfc_enable)
    phantoms = phantom_classes(cfg.qos)
    guarded = [f for f in extras.flows if f.tc in lossless]
    others = [b for b in (*extras.flows, *extras.background) if b.tc not in phantoms]
    if not guarded or not any(b.tc > min(f.tc for f in guarded) for b in others):
        return None
    paths = Paths(topo, down_at_start(topo, extras.faults))
    hosts = {h.name for h in topo.hosts}
    for a in guarded:
        for b in others:
            # both send at once when both run as the later of the two starts
            t, end = max(a.start_s, b.start_s), extras.duration_s
            if b.tc <= a.tc or not (running([a], t, end) and running([b], t, end)):
                continue
            shared = sorted(h for h in set(paths(a.src, a.dst)[1]) & set(paths(b.src, b.dst)[1])
                            if h[0] not in hosts)  # a switch's egress port, not a host's NIC
            if shared:
                node, port = shared[0]
                kind = "flows" if b in extras.flows else "flow and background"
                return (f"{kind} {a.name} (class {a.tc}) and {b.name} (class {b.tc}) cross "
                        f"{node} port {port} at once: class {b.tc} is above lossless class "
                        f"{a.tc} in the port's strict priority and keeps no phantom (it is the "
                        f"CNPs' class), so the class {a.tc} phantom drains at the full port rate "
                        f"whatever class {b.tc} takes, and the run will be flagged "
                        "(phantom_below; docs/DESIGN.md)")
    return None
