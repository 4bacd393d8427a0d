"""The CPU budget: what this machine's cores afford, from its measured profile, against what a
scenario's load (:mod:`testbed.budget.load_model`) costs them (issue #32, "Every host busy").

Every process of a fabric shares the machine's cores: BMv2 pays for each packet pass, an
endpoint for each frame it sends or receives, an agent for each wake-up. ``testbed calibrate``
measures each once (:mod:`testbed.run.calibrate`); here a load is priced with them:

    cores needed = sum over switches (BMv2 idle + passes/s x CPU a pass)
                 + sum over hosts (endpoint idle + frames/s x CPU a frame at its QPs)
                 + agents x wake-ups/s x CPU a wake-up (and in mode ib-credit, a credit tick
                   every period each)

where an endpoint's CPU a frame is the calibrated single QP's plus a measured increment for
each further QP it holds (its requesters and responders: every QP adds its own timers, pacing
and DCQCN state to the endpoint's loop; measured it is small, docs/BUDGET.md). The run fits
when that is within the cores left for the testbed less a margin
(``fidelity.cpu_budget_margin``). Without a profile the budget is unknown, and unknown is not
a fit. Pure logic: no file is read here (:mod:`testbed.budget.calibration_store` reads the profile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from testbed.budget.load_model import Load
from traffic.dcqcn import REFERENCE_LINK_BPS

#: The profile's layout; a profile of another version is not read (calibrate again).
PROFILE_VERSION = 2
#: The rates `auto` may choose, as FabricShape allows them (Mbit/s), and its step.
AUTO_MIN_MBPS, AUTO_MAX_MBPS, AUTO_STEP_MBPS = 0.1, 1000.0, 0.1


class BuildCost(BaseModel):
    """What one BMv2 build costs with our program, per switch process."""

    model_config = ConfigDict(extra="forbid")
    us_per_pass: float = Field(gt=0, description="CPU (us) a packet pass costs BMv2")
    idle_cores: float = Field(ge=0, description="CPU a switch takes with no traffic")
    binary: str = ""


class Profile(BaseModel):
    """This machine's measured costs (what ``testbed calibrate`` writes)."""

    model_config = ConfigDict(extra="forbid")
    version: int = PROFILE_VERSION
    measured_at: str
    cpu_model: str = ""
    cores: int = Field(ge=1, description="cores this process may run on")
    background_cores: float = Field(ge=0, description="cores busy with other work meanwhile")
    builds: dict[str, BuildCost] = Field(description="per BMv2 build: default, fast")
    endpoint_us_per_frame: float = Field(gt=0, description="CPU (us) a frame costs an "
                                         "endpoint holding one QP")
    endpoint_us_per_frame_per_qp: float = Field(ge=0, description=(
        "what each further QP an endpoint holds adds to its CPU (us) a frame"))
    endpoint_idle_cores: float = Field(ge=0)
    agent_us_per_wakeup: float = Field(gt=0)
    agent_wakeups_per_s: float = Field(ge=0)

    @property
    def cores_available(self) -> float:
        """The cores left for the testbed: the machine's, less what other work used while
        calibrating (at least half a core: a profile is never read as no machine at all)."""
        return max(self.cores - self.background_cores, 0.5)


def time_scale(host_mbps: float) -> float:
    """How many times slower than a 40 Gbit/s fabric this one runs: every timer (DCQCN's, the
    Local ACK Timeout, the CNP interval) is multiplied by it (traffic/dcqcn.py). A real second
    of the run is 1/scale seconds of the fabric it stands for."""
    return REFERENCE_LINK_BPS / (host_mbps * 1e6)


@dataclass(frozen=True)
class Demand:
    """A load's cost in cores, part by part."""

    switches: float
    endpoints: float
    agents: float

    @property
    def total(self) -> float:
        return self.switches + self.endpoints + self.agents


def demand(load: Load, profile: Profile, build: str) -> Demand:
    """The cores ``load`` needs on the machine of ``profile``, its switches running ``build``
    (KeyError: that build was not calibrated)."""
    cost = profile.builds[build]
    n_sw, n_hosts = len(load.switch_pps), len(load.host_fps)
    return Demand(
        switches=n_sw * cost.idle_cores + load.passes * cost.us_per_pass * 1e-6,
        endpoints=n_hosts * profile.endpoint_idle_cores
        + sum(fps * endpoint_us_per_frame(profile, load.host_qps.get(h, 1))
              for h, fps in load.host_fps.items()) * 1e-6,
        agents=n_sw * (profile.agent_wakeups_per_s + load.agent_ticks_per_s)
        * profile.agent_us_per_wakeup * 1e-6)


def endpoint_us_per_frame(profile: Profile, qps: int) -> float:
    """CPU (us) a frame costs an endpoint holding ``qps`` QPs: linear in the QPs from the
    calibration's two points (one QP, and ``testbed.run.calibrate.WIDE_QPS``); beyond the
    second it is extrapolated, which all-to-all among 8 hosts (14 QPs a host) needs."""
    return profile.endpoint_us_per_frame + profile.endpoint_us_per_frame_per_qp * max(qps - 1, 0)


Status = Literal["fits", "over", "unknown"]


@dataclass
class Verdict:
    """A run's load against the budget, as printed before it starts and kept in summary.json."""

    host_mbps: float
    fabric_mbps: float
    load: Load
    margin: float
    build: str
    status: Status
    demand: Demand | None = None
    limit_cores: float | None = None
    cores: int | None = None
    reason: str = ""

    @property
    def time_scale(self) -> float:
        return time_scale(self.host_mbps)

    def to_dict(self) -> dict:
        """summary.json's ``budget``."""
        d = self.demand
        return {"status": self.status, "host_link_mbps": self.host_mbps,
                "fabric_link_mbps": self.fabric_mbps, "time_scale": round(self.time_scale, 1),
                "build": self.build, "margin": self.margin, "reason": self.reason,
                "load": {"at_s": self.load.at_s, "flows": self.load.flows,
                         "switch_pps": _rounded(self.load.switch_pps),
                         "host_fps": _rounded(self.load.host_fps),
                         "passes_per_s": round(self.load.passes, 1),
                         "frames_per_s": round(self.load.frames, 1)},
                "cores_needed": None if d is None else {
                    "switches": round(d.switches, 3), "endpoints": round(d.endpoints, 3),
                    "agents": round(d.agents, 3), "total": round(d.total, 3)},
                "cores_limit": None if self.limit_cores is None else round(self.limit_cores, 3),
                "cores": self.cores}


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in d.items()}


def judge(load: Load, profile: Profile | None, build: str, margin: float) -> Verdict:
    """``load`` against the budget: fits, over, or unknown (no profile, or not for ``build``)."""
    v = Verdict(load.host_mbps, load.fabric_mbps, load, margin, build, "unknown")
    if profile is None:
        v.reason = "no calibration profile on this machine: run `sudo testbed calibrate`"
        return v
    if build not in profile.builds:
        v.reason = (f"the {build} BMv2 build was not calibrated: run `sudo testbed calibrate "
                    f"--build {build}`")
        return v
    v.demand = demand(load, profile, build)
    v.limit_cores = profile.cores_available * (1 - margin)
    v.cores = profile.cores
    v.status = "fits" if v.demand.total <= v.limit_cores else "over"
    return v


def auto_rate(fits: Callable[[float], bool]) -> float | None:
    """The highest rate (Mbit/s, a multiple of AUTO_STEP_MBPS) at which ``fits(rate)``, or
    None if not even AUTO_MIN_MBPS does. The load grows with the rate (more capacity carries
    more packets), so the rates that fit are those below one bound: bisection."""
    lo, hi = round(AUTO_MIN_MBPS / AUTO_STEP_MBPS), round(AUTO_MAX_MBPS / AUTO_STEP_MBPS)
    if not fits(lo * AUTO_STEP_MBPS):
        return None
    if fits(hi * AUTO_STEP_MBPS):
        return hi * AUTO_STEP_MBPS
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        if fits(mid * AUTO_STEP_MBPS):
            lo = mid
        else:
            hi = mid
    return round(lo * AUTO_STEP_MBPS, 1)


def _rate(mbps: float) -> str:
    return f"{mbps:g} Mbit/s"


def budget_line(v: Verdict, auto: list[str] | None = None) -> str:
    """One line: the rate (``auto``: the fields whose rate was chosen), the time scale, the
    load and what it costs against the budget."""
    rates = (_rate(v.host_mbps) if v.host_mbps == v.fabric_mbps
             else f"hosts {_rate(v.host_mbps)}, fabric {_rate(v.fabric_mbps)}")
    if auto:
        rates += f" ({', '.join(f'{f} auto' for f in auto)})"
    scale = v.time_scale
    head = (f"rate {rates}; time scale {scale:,.0f} (a real second is "
            f"{1e6 / scale:,.3g} us at 40 Gbit/s); peak load {v.load.passes:,.0f} packet "
            f"passes/s, {v.load.frames:,.0f} endpoint frames/s")
    if v.demand is None or v.limit_cores is None:
        return f"{head}; budget unknown: {v.reason}"
    return (f"{head}; needs {v.demand.total:.2f} of {v.limit_cores:.2f} cores ({v.cores} "
            f"cores less {v.margin:.0%} margin, {v.build} build): {v.status}")
