"""The three plans' cases: each a scenario built in code, its scaling to this testbed, and its
expected results as checks (:mod:`.checks`), or the reason it does not apply here.

Sources (public, sonic-mgmt repository, docs/testplan/): the RoCEv2 test plan's eleven cases,
the PFC test plan (lossless class does not drop under congestion; a lossy class is not paused)
and the PFC watchdog test plan (storm detection, mitigation, restoration, timers). The plans
are written for 100G ports and a hardware tester; here the hosts are the tester at this
fabric's link rate, so each case states its scaling, which the report prints and writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testbed.conformance import checks as c

PLANS = ("rocev2", "pfc", "pfcwd")

#: The plan's fairness bound: "rates of rank 0 and rank 1 within 30%" (RoCEv2 plan, QP fairness).
FAIRNESS_SHARE = 0.30
#: Hashing: the busiest ECMP member at most this much over the stage's mean utilization. The plan
#: asks for traffic "distributed across the members"; 1.5 allows a 3:1 split of two members at
#: most, which a hash that ignores the UDP source port (every QP on one spine) exceeds.
MAX_ECMP_IMBALANCE = 1.5
#: The PFC watchdog of the pfcwd cases (SONiC's defaults are 200 ms detection, 200 ms
#: restoration, 100 ms polling; doubled here for a 2-core emulation's agent period).
WATCHDOG = {"enabled": True, "action": "drop", "detection_time_ms": 400,
            "restoration_time_ms": 800, "polling_interval_ms": 100}
#: detection_time + polling_interval, plus one polling interval for the agent's sample.
DETECT_LIMIT_S = (400 + 2 * 100) / 1000

Check = tuple[str, c.CheckFn]


@dataclass(frozen=True)
class Case:
    """One case of a plan: ``scenario`` (a scenario's YAML as a dict), the ``checks`` of its
    expected results, and ``scaling`` (the plan's figures against this testbed's); or, if the
    fabric lacks what it needs, ``na`` saying exactly what is missing."""

    plan: str
    id: str
    title: str
    scaling: str = ""
    scenario: dict[str, Any] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    na: str | None = None
    #: What the case needs of the fabric's shape (the ``fabric`` section it runs on): None
    #: when the shape has it, else what is missing (the case is then not applicable there).
    needs: Callable[[dict[str, Any]], str | None] | None = None

    @property
    def key(self) -> str:
        return f"{self.plan}.{self.id}"

    def unfit(self, shape: dict[str, Any]) -> str | None:
        """Why the case cannot run on ``shape`` (its fabric section), or None."""
        return self.needs(shape) if self.needs is not None else None


FABRIC = {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}


def _qos(pfc: list[int], ecn: list[int]) -> dict[str, Any]:
    """The plans' queue layout (qos.profile sonic: data in DSCP 3, CNPs in class 6 by DSCP
    48), with the lossless and ECN classes each case asks for; class 4 stays lossy unless a
    case makes it lossless (each lossless class costs the agents a tick a port)."""
    return {"profile": "sonic", "pfc_enable": pfc, "ecn": {tc: {} for tc in ecn}}

#: The plans' topologies (sonic-mgmt's RoCEv2 test plan): 1, one switch with four tester
#: ports; 2, two leaves joined by one spine, two tester ports on each. The cases' own fabric
#: (FABRIC) is the testbed's leaf-spine with two spines, so that ECMP has members to balance.
TOPOLOGIES: dict[str, dict[str, int]] = {
    "1": {"spines": 0, "leaves": 1, "hosts_per_leaf": 4},
    "2": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
}


def _upstream(shape: dict[str, Any]) -> str | None:
    """PFC propagation: a pause can spread only through a second switch."""
    if shape.get("spines", 2) == 0:
        return "needs a second switch for the pause to spread to; this fabric has one"
    return None


def _ecmp_members(shape: dict[str, Any]) -> str | None:
    """Hashing: a leaf needs two or more equal-cost uplinks to spread flows over."""
    n = shape.get("spines", 2) * shape.get("parallel_links", 1)
    return None if n >= 2 else (f"needs two or more equal-cost uplinks to balance over; "
                                f"this fabric's leaves have {n}")


def _second_spine(shape: dict[str, Any]) -> str | None:
    """Failover: leaf1 loses every link to spine1 and needs another spine to fail over to."""
    if shape.get("spines", 2) < 2 or shape.get("leaves", 2) < 2:
        return ("needs two spines and two leaves (every link between leaf1 and spine1 fails, "
                "and the traffic between the leaves takes the other spine)")
    return None


def _storm_path(shape: dict[str, Any]) -> str | None:
    """The storm cases pin leaf2's route to h1's leaf through spine1."""
    if shape.get("spines", 2) < 1 or shape.get("leaves", 2) < 2:
        return "needs two leaves and a spine (the victim's route is pinned through spine1)"
    return None


def _flow(name: str, src: str, dst: str, **kw: Any) -> dict:
    return {"name": name, "src": src, "dst": dst, "qps": kw.pop("qps", 2),
            "message_bytes": 65536, "duration_s": kw.pop("duration_s", 5),
            "start_s": kw.pop("start_s", 0.5), **kw}


def _incast(name: str, qos: dict, dcqcn: bool, **extra: Any) -> dict:
    """3:1 incast onto h1 (the plans' N:1 congestion), 6 s."""
    return {"name": name, "fabric": dict(FABRIC), "qos": qos, "endpoints": {"dcqcn": dcqcn},
            "duration_s": 6, "settle_s": 2,
            "flows": [_flow(f"{s}-h1", s, "h1") for s in ("h2", "h3", "h4")], **extra}


BASE: tuple[Check, ...] = (("faithful", c.faithful), ("delivered", c.delivered))
LOSSLESS: tuple[Check, ...] = (("no lossless drop", c.no_lossless_drop),
                               ("no NAK or sequence error", c.no_resend))
#: The tester's counters against the switches' (testbed.analysis.tester): the plans' "PFC seen
#: on queue 3 matching the tester's PFC counter", and CE and CNPs as the tester counted them.
TESTER_PFC: Check = ("PFC on class 3 matches the tester's counter", c.tester_pfc_matches(3))
TESTER_FRAMES: Check = ("frames on class 3 match the tester's counters",
                        c.tester_frames_match(3))
TESTER_ECN: tuple[Check, ...] = (("the tester's CE on class 3 within the switches' marks",
                                  c.tester_ce(3)),
                                 ("the tester's CNPs sent and received", c.tester_cnps))
INCAST_SCALING = ("plan: N:1 incast at 100G line rate; here 3:1 (h2, h3, h4 -> h1), 2 QPs each, "
                  "64 KiB WRITEs for 5 s at the fabric's host link rate")


def _failover(qos: dict[str, Any]) -> Case:
    """The RoCEv2 plan's case 10: a leaf's uplink goes down under traffic and comes back."""
    return Case(
        "rocev2", "10", "Failover and recovery",
        "plan: traffic between the leaves, one uplink of leaf 1 brought down and up again; "
        "here h1->h3 and h2->h4, 2 QPs each capped at 2 Mbit/s (so that the two flows fit "
        "one uplink), 8 s: every link between leaf1 and spine1 goes down at 2.5 s and up "
        "at 5 s. Down is administrative (the veths stay up): the fabric's routes move, "
        "made before broken, and what the old path held drains through it",
        {"name": "conf-rocev2-10", "fabric": dict(FABRIC), "qos": qos,
         "endpoints": {"dcqcn": False}, "duration_s": 8, "settle_s": 1,
         "flows": [_flow("h1-h3", "h1", "h3", duration_s=7, rate_cap_mbps=2),
                   _flow("h2-h4", "h2", "h4", duration_s=7, rate_cap_mbps=2)],
         "faults": [{"at_s": 2.5, "link_down": ["leaf1", "spine1"]},
                    {"at_s": 5, "link_up": ["leaf1", "spine1"]}]},
        (*BASE, ("no lossless drop", c.no_lossless_drop),
         ("traffic fails over to the other uplinks", c.failed_over("leaf1", "spine1")),
         ("traffic moves back when the link is up", c.moved_back("leaf1", "spine1")),
         TESTER_FRAMES), needs=_second_spine)


#: Case 9: each lossless flow's cap, and the least each must keep (90% of it: the cap counts
#: frames on the wire, goodput their payload, about 1.5% less at a 4096-byte RoCE MTU; and a
#: 9 KB best-effort frame already on the wire holds a lossless one back by up to 7 ms at
#: 10 Mbit/s, as a real port cannot preempt a frame either).
BG_LOSSLESS_MBPS = 3.0
BG_KEPT_MBPS = 0.9 * BG_LOSSLESS_MBPS
#: What the background must get of the port the two lossless flows leave (10 - 6 Mbit/s at the
#: default rate), at least: half of it.
BG_LEFT_MBPS = 2.0


def _background_case(qos: dict[str, Any]) -> Case:
    """The RoCEv2 plan's case 9: line-rate best effort beside lossless flows, into one port."""
    return Case(
        "rocev2", "9", "Lossless priority against best-effort background",
        "plan: lossless RoCE flows and line-rate best-effort background sharing an egress "
        f"port; here h3->h1 and h4->h1 (1 QP each, capped at {BG_LOSSLESS_MBPS:g} Mbit/s) "
        "and UDP from h2's kernel to h1 in class 0 (DSCP 8) at h2's line rate in 9014-byte "
        "frames, 6 s: leaf1's port to h1 is offered 16 Mbit/s of 10, and the ports' strict "
        "priority (class 3 above class 0) must give the lossless flows their rate and the "
        "background the rest",
        {"name": "conf-rocev2-9", "fabric": dict(FABRIC), "qos": qos,
         "endpoints": {"dcqcn": False}, "duration_s": 7, "settle_s": 1,
         "flows": [_flow(f"{s}-h1", s, "h1", qps=1, duration_s=6,
                         rate_cap_mbps=BG_LOSSLESS_MBPS) for s in ("h3", "h4")],
         "background": [{"name": "h2-h1-be", "src": "h2", "dst": "h1", "tc": 0,
                         "start_s": 0.5, "duration_s": 6}]},
        (*BASE, *LOSSLESS, ("no PFC: the background holds no lossless flow back", c.no_pfc),
         ("lossless flows keep their rate", c.rates_at_least(BG_KEPT_MBPS)),
         ("the background gets the rest and loses what does not fit",
          c.background_took_the_rest(BG_LEFT_MBPS)), TESTER_FRAMES))


def _rocev2() -> list[Case]:
    pfc3 = _qos([3], [])
    return [
        Case("rocev2", "1", "Basic forwarding without congestion",
             "plan: one flow per port pair under line rate; here h1->h3 and h2->h4 across the "
             "spines, 1 QP each, capped at 4 Mbit/s (40% of a 10 Mbit/s link, so that the two "
             "fit one uplink: topology 2 has one spine), 4 s",
             {"name": "conf-rocev2-1", "fabric": dict(FABRIC), "qos": pfc3,
              "endpoints": {"dcqcn": False}, "duration_s": 4, "settle_s": 1,
              "flows": [_flow("h1-h3", "h1", "h3", qps=1, duration_s=3, rate_cap_mbps=4),
                        _flow("h2-h4", "h2", "h4", qps=1, duration_s=3, rate_cap_mbps=4)]},
             (*BASE, *LOSSLESS, ("no PFC", c.no_pfc), TESTER_FRAMES)),
        Case("rocev2", "2", "Congestion control with PFC", INCAST_SCALING,
             _incast("conf-rocev2-2", pfc3, False),
             (*BASE, *LOSSLESS, ("PFC seen on class 3", c.pfc_seen(3)), TESTER_PFC,
              TESTER_FRAMES)),
        Case("rocev2", "3", "Congestion control with DCQCN", INCAST_SCALING + "; ECN, no PFC",
             _incast("conf-rocev2-3", _qos([], [3]), True),
             (*BASE, ("ECN-CE seen on class 3", c.ecn_marked),
              ("CNPs at every sender", c.cnps_every_sender), *TESTER_ECN)),
        Case("rocev2", "4", "Congestion control with PFC + ECN (storage traffic)",
             INCAST_SCALING + "; PFC and ECN on class 3, DCQCN",
             _incast("conf-rocev2-4", _qos([3], [3]), True),
             (*BASE, *LOSSLESS, ("ECN-CE seen on class 3", c.ecn_marked),
              ("CNPs at every sender", c.cnps_every_sender), *TESTER_ECN, TESTER_PFC,
              TESTER_FRAMES)),
        Case("rocev2", "5", "PFC propagation",
             "plan: pause spreads from the congested port upstream; here 3:1 incast onto h1 "
             "whose remote senders (h3, h4) come through a spine, so the leaf pauses the spine "
             "and the spine pauses leaf2",
             _incast("conf-rocev2-5", pfc3, False),
             (*BASE, *LOSSLESS, ("PFC from congested leaf and upstream", c.pfc_on_switches(2)),
              TESTER_PFC, TESTER_FRAMES), needs=_upstream),
        Case("rocev2", "6", "QP fairness with DCQCN",
             "plan: rank 0 and rank 1 QPs sharing a bottleneck, rates within 30%; here h3->h1 and "
             "h4->h1 (1 QP each) for 12 s with DCQCN alone (ECN on class 3, PFC off). With PFC "
             "as a backstop too (XOFF at 50 KB, just above Kmax's 42 KB: leaf1 paused both "
             "spines 11-19 times in 40 s) min/max varied from run to run here, 0.68-0.88 over "
             "12 s and 0.72-0.86 over the last 10 s of 40 s; DCQCN alone gave 0.84-0.97 in 4 "
             "runs of 12 s, with no drop",
             {"name": "conf-rocev2-6", "fabric": dict(FABRIC),
              "qos": _qos([], [3]), "endpoints": {"dcqcn": True},
              "duration_s": 12, "settle_s": 1,
              "flows": [_flow("h3-h1", "h3", "h1", qps=1, duration_s=11),
                        _flow("h4-h1", "h4", "h1", qps=1, duration_s=11)]},
             (*BASE, ("rates within 30%", c.rates_within(FAIRNESS_SHARE)))),
        Case("rocev2", "7", "Hashing and load balancing",
             "plan: many flows spread over ECMP members; here 16 QPs from h1 to h3 at line "
             "rate across 2 spines, 4 s: between two hosts only the UDP source port differs "
             "from QP to QP (RoCEv2's entropy, IBTA Annex A17), so the 5-tuple hash must "
             "include it to spread them",
             {"name": "conf-rocev2-7", "fabric": dict(FABRIC), "qos": pfc3,
              "endpoints": {"dcqcn": False}, "duration_s": 4, "settle_s": 1,
              "flows": [_flow("h1-h3", "h1", "h3", qps=16, duration_s=3)]},
             (*BASE, ("ECMP members balanced", c.ecmp_balanced(MAX_ECMP_IMBALANCE))),
             needs=_ecmp_members),
        Case("rocev2", "8", "Packet spray", na=(
            "needs per-packet load balancing in the switches (ECMP here hashes per flow) and "
            "an out-of-order receiver (the endpoint's Go-Back-N NAKs any gap)")),
        _background_case(pfc3),
        _failover(pfc3),
        Case("rocev2", "11", "Control-plane ACK timeouts under PFC", ACK_SCALING,
             _ack_timeouts(pfc3),
             (*BASE, ("no lossless drop", c.no_lossless_drop),
              ("ACK timeouts when ACKs share the paused class",
               c.ack_timeouts("h1-h3", True)),
              ("no ACK timeout when ACKs travel in another class",
               c.ack_timeouts("h1-h4", False)))),
    ]


def _pfc() -> list[Case]:
    return [
        Case("pfc", "dual", "Two lossless classes do not drop under congestion",
             DUAL_SCALING, _dual(_qos([3, 4], [])),
             (*BASE, *LOSSLESS, ("PFC seen on class 3", c.pfc_seen(3)),
              ("PFC seen on class 4", c.pfc_seen(4)), TESTER_PFC,
              ("PFC on class 4 matches the tester's counter", c.tester_pfc_matches(4)),
              TESTER_FRAMES, ("frames on class 4 match the tester's counters",
                              c.tester_frames_match(4)))),
        Case("pfc", "lossless", "Lossless class does not drop under congestion",
             INCAST_SCALING + "; PFC on class 3",
             _incast("conf-pfc-lossless", _qos([3], []), False),
             (*BASE, *LOSSLESS, ("PFC seen on class 3", c.pfc_seen(3)), TESTER_PFC,
              TESTER_FRAMES)),
        Case("pfc", "lossy", "Lossy class is not paused",
             INCAST_SCALING + "; class 3 lossy (PFC off)",
             _incast("conf-pfc-lossy", _qos([], []), False),
             (("faithful", c.faithful), ("no PFC on a lossy class", c.no_pfc))),
    ]


ACK_SCALING = (
    "plan: the tester pauses the requester's port on the data's class and its ACK timers "
    "fire only where ACKs share that class; here h1 sends to h3 (ACKs in class 3, the data's) "
    "and to h4 (ACKs in class 6, DSCP 48), 1 QP each capped at 2 Mbit/s, and storms PAUSE for "
    "class 3 from 2 s to 2.5 s of a 7 s run, each PAUSE for 10,000 quanta (0.51 s at 10 Mbit/s), "
    "the watchdog off; Local ACK Timeout n = 4: 66 us at DCQCN's 40G reference, 0.26 s at 10 "
    "Mbit/s, so that a QP times out a few times in the pause, within IB's 7 retries")
#: Case 11's storm: each PAUSE asks for 0.51 s at 10 Mbit/s, so the pause ends soon after it.
ACK_PAUSE_QUANTA = 10_000


def _ack_timeouts(qos: dict) -> dict:
    """RoCEv2 case 11 (ACK_SCALING): leaf1's class-3 gate toward h1 holds the ACKs of h1's
    QP to h3, and those to h4 travel in class 6."""
    return {"name": "conf-rocev2-11", "fabric": dict(FABRIC), "qos": qos,
            "endpoints": {"dcqcn": False, "local_ack_timeout": 4},
            "agent": {"pfc_watchdog": {"enabled": False}}, "duration_s": 7, "settle_s": 2,
            "flows": [_flow("h1-h3", "h1", "h3", qps=1, rate_cap_mbps=2, duration_s=6),
                      _flow("h1-h4", "h1", "h4", qps=1, rate_cap_mbps=2, duration_s=6,
                            ack_tc=6)],
            "faults": [{"at_s": 2, "host": "h1", "mode": "storm", "tc": 3, "until_s": 2.5,
                        "quanta": ACK_PAUSE_QUANTA}]}


DUAL_SCALING = (
    "plan: congestion on lossless classes 3 and 4 of one port; here both share h1's port "
    "for 7 s: h3 -> h1 in class 4 at 4 Mbit/s throughout; h4 -> h1 in class 4 at line rate "
    "from 0.5 s to 2.5 s (class 4 congested), then h2 -> h1 and h4 -> h1 in class 3 at line "
    "rate from 3 s (class 3 congested in the 6 Mbit/s class 4 leaves); 2 QPs each but h3's "
    "one. The port serves its classes in strict priority (it has no weighted scheduler), "
    "under which a congested class 4 leaves class 3 nothing, so the two congest in turn")


def _dual(qos: dict) -> dict:
    """The PFC plan's two lossless classes on one port, congested in turn (DUAL_SCALING)."""
    return {"name": "conf-pfc-dual", "fabric": dict(FABRIC), "qos": qos,
            "endpoints": {"dcqcn": False}, "duration_s": 8, "settle_s": 2,
            "flows": [_flow("h3-h1-c4", "h3", "h1", tc=4, qps=1, rate_cap_mbps=4,
                            duration_s=6.5),
                      _flow("h4-h1-c4", "h4", "h1", tc=4, duration_s=2),
                      _flow("h2-h1-c3", "h2", "h1", start_s=3, duration_s=4),
                      _flow("h4-h1-c3", "h4", "h1", start_s=3, duration_s=4)]}


def _storm(name: str, watchdog: dict) -> dict:
    return {"name": name, "fabric": dict(FABRIC), "qos": _qos([3], []),
            "agent": {"pfc_watchdog": watchdog}, "endpoints": {"dcqcn": False},
            "duration_s": 8, "settle_s": 2,
            "routes": [{"switch": "leaf2", "prefix": "10.0.1.0/24", "via": "spine1"}],
            "flows": [_flow("to-storming", "h3", "h2", qps=1, duration_s=7),
                      _flow("victim", "h4", "h1", qps=1, duration_s=7)],
            "faults": [{"at_s": 1.5, "host": "h2", "mode": "storm", "tc": 3, "until_s": 4.5}]}


STORM_SCALING = ("plan: tester storms PFC on a lossless queue; here h2 sends PAUSE for class 3 "
                 "from 1.5 s to 4.5 s of an 8 s run, watchdog 400 ms detection / 800 ms "
                 "restoration / 100 ms polling (SONiC default 200/200/100)")


def _pfcwd() -> list[Case]:
    return [
        Case("pfcwd", "storm", "Storm detection, mitigation and restoration", STORM_SCALING,
             _storm("conf-pfcwd-storm", dict(WATCHDOG)),
             (("faithful", c.faithful),
              ("storm detected within detection + polling",
               c.storm_detected_within(DETECT_LIMIT_S)),
              ("queue restored after the storm", c.storm_restored), TESTER_PFC),
             needs=_storm_path),
        Case("pfcwd", "off", "Watchdog disabled: no detection", STORM_SCALING + "; watchdog off",
             _storm("conf-pfcwd-off", {"enabled": False}),
             (("faithful", c.faithful), ("no storm detected", c.no_storm_event)),
             needs=_storm_path),
    ]


REGISTRY: dict[str, Callable[[], list[Case]]] = {"rocev2": _rocev2, "pfc": _pfc,
                                                 "pfcwd": _pfcwd}


def cases(plan: str = "all") -> list[Case]:
    """The cases of one plan, or of all, in the plans' order (fresh copies: a caller may
    change a case's scenario)."""
    names = PLANS if plan == "all" else (plan,)
    return [copy.deepcopy(k) for p in names for k in REGISTRY[p]()]


class SelectionError(ValueError):
    """A --plan or --case that names nothing: its message is the one line the CLI prints."""


def select(plan: str, ids: list[str] | None) -> list[Case]:
    """The cases to run: a plan (or all) and, optionally, case ids (``7`` or ``rocev2.7``)."""
    if plan != "all" and plan not in PLANS:
        raise SelectionError(f"--plan {plan}: no such plan; choose one of "
                             f"{', '.join(PLANS)}, all")
    pool = cases(plan)
    if not ids:
        return pool
    out = []
    for want in ids:
        hit = [k for k in pool if want in (k.id, k.key)]
        if not hit:
            raise SelectionError(f"--case {want}: no such case in plan {plan}; choose among "
                                 f"{', '.join(k.key for k in pool)}")
        out += [k for k in hit if k not in out]
    return out
