"""The expected results of the test plans as checks: pure functions over a run's
``summary.json`` (:class:`~testbed.results.summary.RunSummary`), each returning an
:class:`Outcome` (passed or not, the figure measured, the bound it was held to).

The plans' words (sonic-mgmt docs/testplan/: "no loss, no NAK or sequence error on the tester",
"PFC seen on queue 3", "ECN-CE seen", "CNPs", "rates within 30%", the watchdog's "storm
detected" and "restored") each become one check here. A figure the run did not write is a
failure, never a pass: unknown is not ok.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.analysis.fidelity import verdict_problem
from testbed.analysis.tester import frame_mismatches, pfc_mismatches, total_counted


@dataclass(frozen=True)
class Outcome:
    """One expected result of one run: ``ok``, what was measured and the bound it was held to,
    both in words so the report can print them as they are."""

    ok: bool
    measured: str
    bound: str


Summary = dict[str, Any]
CheckFn = Callable[[Summary], Outcome]


def _qps(summary: Summary, flows: list[str] | None = None) -> list[dict]:
    return [q for name, f in (summary.get("flows") or {}).items()
            if flows is None or name in flows for q in f.get("qps", [])]


def faithful(summary: Summary) -> Outcome:
    """The run counts only if the fidelity guard called it faithful (testbed.analysis.fidelity)."""
    problem = verdict_problem(summary.get("fidelity"))
    return Outcome(problem is None, "faithful" if problem is None else problem,
                   "every fidelity check measured and passed")


def no_lossless_drop(summary: Summary) -> Outcome:
    """"No loss" on the lossless classes: the switches' kernel gates dropped nothing there."""
    drops = summary.get("kernel_drops_lossless")
    head = (summary.get("headline") or {}).get("lossless_drops")
    if drops is None:
        return Outcome(False, "kernel_drops_lossless not written", "0 drops")
    total = drops + (head or 0) if head is not None and head != drops else drops
    return Outcome(total == 0, f"{total} lossless drops", "0 drops")


def no_resend(summary: Summary) -> Outcome:
    """"No NAK or sequence error on the tester": no NAK, no retransmission, no timeout on any QP."""
    qps = _qps(summary)
    if not qps:
        return Outcome(False, "no QP in the summary", "0 NAKs, retransmissions, timeouts")
    naks = sum(q.get("naks", 0) for q in qps)
    resent = sum(q.get("retransmitted", 0) for q in qps)
    timeouts = sum(q.get("timeouts", 0) for q in qps)
    return Outcome(naks == resent == timeouts == 0,
                   f"{naks} NAKs, {resent} retransmitted, {timeouts} timeouts",
                   "0 NAKs, retransmissions, timeouts")


def ack_timeouts(flow: str, expected: bool) -> CheckFn:
    """Case 11: the requester's Local ACK Timeout fires on a flow whose ACKs wait in the paused
    class (``expected``), and never on one whose ACKs travel in another class."""
    bound = ">= 1 timeout" if expected else "0 timeouts"

    def check(summary: Summary) -> Outcome:
        qps = _qps(summary, [flow])
        if not qps:
            return Outcome(False, f"no QP of {flow} in the summary", bound)
        n = sum(q.get("timeouts", 0) for q in qps)
        return Outcome((n > 0) is expected, f"{flow}: {n} timeouts", bound)
    return check


def delivered(summary: Summary) -> Outcome:
    """Every flow delivered bytes and no QP ran out of retries."""
    flows = summary.get("flows") or {}
    empty = [n for n, f in flows.items() if not f.get("bytes_received")]
    failed = sum(1 for q in _qps(summary) if q.get("failed"))
    ok = bool(flows) and not empty and failed == 0
    got = sum(f.get("bytes_received", 0) for f in flows.values())
    return Outcome(ok, f"{got} bytes over {len(flows)} flows; empty {empty or 'none'}; "
                       f"{failed} QPs failed", "every flow > 0 bytes, 0 failed QPs")


def pfc_seen(tc: int) -> CheckFn:
    """"PFC seen on queue ``tc``": the switches sent PFC frames pausing that class (their
    ``pfc_tx`` counters per port and class, summed)."""
    def check(summary: Summary) -> Outcome:
        by_class = summary.get("pfc_frames_by_class")
        if by_class is None:
            return Outcome(False, "pfc_frames_by_class not written", ">= 1")
        frames = by_class.get(str(tc), 0)
        return Outcome(frames >= 1, f"{frames} PFC frames for class {tc} sent by the switches",
                       ">= 1")
    return check


def no_pfc(summary: Summary) -> Outcome:
    """No PFC frame: the class is not lossless, so nothing may pause."""
    frames = sum((summary.get("pfc_frames_sent") or {}).values())
    return Outcome(frames == 0, f"{frames} PFC frames sent by the switches", "0")


def pfc_on_switches(minimum: int) -> CheckFn:
    """"PFC propagation": pause frames sent by at least ``minimum`` switches (the congested leaf
    and the hop upstream of it)."""
    def check(summary: Summary) -> Outcome:
        sent = {s: n for s, n in (summary.get("pfc_frames_sent") or {}).items() if n > 0}
        return Outcome(len(sent) >= minimum, f"PFC from {sorted(sent) or 'no switch'}",
                       f">= {minimum} switches")
    return check


def ecn_marked(summary: Summary) -> Outcome:
    """"ECN-CE seen": the switches marked packets Congestion Experienced."""
    marked = (summary.get("headline") or {}).get("ecn_marked")
    if marked is None:
        return Outcome(False, "headline.ecn_marked not written", ">= 1")
    return Outcome(marked >= 1, f"{marked} packets marked CE", ">= 1")


def cnps_every_sender(summary: Summary) -> Outcome:
    """"CNPs": every flow's sender received congestion notifications."""
    flows = summary.get("flows") or {}
    per = {n: sum(q.get("cnps_received", 0) for q in f.get("qps", [])) for n, f in flows.items()}
    ok = bool(per) and all(v >= 1 for v in per.values())
    return Outcome(ok, ", ".join(f"{n} {v}" for n, v in per.items()) or "no flow",
                   ">= 1 CNP per sender")


def rates_within(share: float) -> CheckFn:
    """"Rates within 30%": the slowest competing flow's goodput at least ``1 - share`` of the
    fastest's (headline goodput over each flow's active time; victims left out)."""
    def check(summary: Summary) -> Outcome:
        flows = (summary.get("headline") or {}).get("flows") or {}
        rates = {n: f.get("goodput_mbps") or 0.0 for n, f in flows.items() if not f.get("victim")}
        if len(rates) < 2 or max(rates.values()) <= 0:
            return Outcome(False, f"goodputs {rates}", f"min/max >= {1 - share:g}")
        ratio = min(rates.values()) / max(rates.values())
        shown = ", ".join(f"{n} {v:.2f}" for n, v in rates.items())
        return Outcome(ratio >= 1 - share, f"min/max {ratio:.3f} (Mbit/s: {shown})",
                       f"min/max >= {1 - share:g}")
    return check


def ecmp_balanced(max_imbalance: float) -> CheckFn:
    """"Hashing and load balancing": every ECMP stage's busiest link within ``max_imbalance``
    of the stage's mean (headline.max_imbalance: max over mean utilization)."""
    def check(summary: Summary) -> Outcome:
        imb = (summary.get("headline") or {}).get("max_imbalance")
        bound = f"max/mean <= {max_imbalance:g}"
        if imb is None:
            return Outcome(False, "no ECMP stage carried data", bound)
        return Outcome(imb <= max_imbalance, f"max/mean {imb:.3f}", bound)
    return check


def _events(summary: Summary, event: str) -> list[dict]:
    return [e for e in summary.get("watchdog_events") or [] if e.get("event") == event]


def _storm_start(summary: Summary) -> float | None:
    for t in summary.get("timeline") or []:
        if ": storm (" in str(t.get("event", "")):  # testbed.run.scenario_run's words
            return float(t["t_s"])
    return None


def storm_detected_within(limit_s: float) -> CheckFn:
    """"Storm detection": a storm_detected event within ``limit_s`` of the storm's start (the
    watchdog's detection_time + polling_interval, the PFC watchdog test plan's timer check)."""
    def check(summary: Summary) -> Outcome:
        found = _events(summary, "storm_detected")
        start = _storm_start(summary)
        if not found or start is None:
            return Outcome(False, f"{len(found)} storm_detected events; storm start {start}",
                           f"detected within {limit_s:g} s")
        delay = float(found[0]["t_s"]) - start
        return Outcome(0 <= delay <= limit_s,
                       f"detected {delay:.3f} s after the storm began on {found[0]['switch']}",
                       f"within {limit_s:g} s")
    return check


def storm_restored(summary: Summary) -> Outcome:
    """"Restoration": the watchdog restored the queue once the storm stopped."""
    n = len(_events(summary, "storm_restored"))
    return Outcome(n >= 1, f"{n} storm_restored events", ">= 1")


def no_storm_event(summary: Summary) -> Outcome:
    """Watchdog off: no storm is detected (the plan's negative case)."""
    n = len(_events(summary, "storm_detected"))
    return Outcome(n == 0, f"{n} storm_detected events", "0")


# -- failover and recovery (the RoCEv2 plan's case 10) ---------------------------------------

#: After the link went down, what it carries at most, and what its switch's other links into
#: the fabric carry at least, as shares of what the switch sent into the fabric before.
FAILED_LINK_MAX_SHARE = 0.01
CARRIED_ON_MIN_SHARE = 0.9
#: The link carried at least this share of its switch's traffic into the fabric before it
#: failed (a failed link with nothing on it shows no failover) and again once it came back.
LINK_USED_MIN_SHARE = 0.1


def _link_split(phase: dict, a: str, b: str) -> tuple[float, float]:
    """Over one phase (headline.link_phases), Mbit/s on a's links to b (every parallel one)
    and on a's other links into the fabric."""
    on = other = 0.0
    for name, v in phase.get("mbps", {}).items():
        src, _, dst = name.partition("->")
        if src == a:
            if dst.split("#")[0] == b:
                on += v or 0.0
            else:
                other += v or 0.0
    return on, other


def _fault_phases(summary: Summary, a: str, b: str) -> tuple[dict | None, dict | None,
                                                             dict | None]:
    """The phases before the a-b link went down, while it was down, and after it came back."""
    phases = (summary.get("headline") or {}).get("link_phases") or []

    def index(up: bool) -> int | None:
        return next((i for i, p in enumerate(phases) if p.get("up") is up
                     and p.get("link", [])[:2] in ([a, b], [b, a])), None)
    down, back = index(False), index(True)
    if not down:  # None, or the first phase (which no fault begins): not found
        return None, None, None
    return phases[down - 1], phases[down], phases[back] if back else None


def failed_over(a: str, b: str) -> CheckFn:
    """"Traffic should fail over to the next available egress link": the a-b link carried
    traffic before it went down and nothing after, and a's other links into the fabric took
    what it carried."""
    bound = (f"{a}->{b} >= {LINK_USED_MIN_SHARE:.0%} of {a}'s traffic before, <= "
             f"{FAILED_LINK_MAX_SHARE:.0%} after; {a}'s other links >= "
             f"{CARRIED_ON_MIN_SHARE:.0%} of it after")

    def check(summary: Summary) -> Outcome:
        before, down, _ = _fault_phases(summary, a, b)
        if before is None or down is None:
            return Outcome(False, f"no phase with {a}-{b} down in headline.link_phases", bound)
        on_b, other_b = _link_split(before, a, b)
        on_d, other_d = _link_split(down, a, b)
        total = on_b + other_b
        ok = (total > 0 and on_b >= LINK_USED_MIN_SHARE * total
              and on_d <= FAILED_LINK_MAX_SHARE * total and other_d >= CARRIED_ON_MIN_SHARE * total)
        return Outcome(ok, f"{a}->{b} {on_b:.2f} then {on_d:.2f} Mbit/s; {a}'s other links "
                           f"{other_b:.2f} then {other_d:.2f} Mbit/s", bound)
    return check


def moved_back(a: str, b: str) -> CheckFn:
    """"Bring up the down egress link": here traffic moves back to it, since this fabric's ECMP
    is a hash modulo the group's members (not resilient hashing), so the restored group sends
    each flow where it went before the failure; and a sends into the fabric what it sent then."""
    bound = (f"{a}->{b} >= {LINK_USED_MIN_SHARE:.0%} of {a}'s traffic again; {a}'s traffic "
             f">= {CARRIED_ON_MIN_SHARE:.0%} of before the failure")

    def check(summary: Summary) -> Outcome:
        before, _, back = _fault_phases(summary, a, b)
        if before is None or back is None:
            return Outcome(False, f"no phase after {a}-{b} came back in headline.link_phases",
                           bound)
        total = sum(_link_split(before, a, b))
        on_u, other_u = _link_split(back, a, b)
        ok = (on_u >= LINK_USED_MIN_SHARE * (on_u + other_u)
              and on_u + other_u >= CARRIED_ON_MIN_SHARE * total > 0)
        return Outcome(ok, f"{a}->{b} {on_u:.2f} Mbit/s, {a}'s other links {other_u:.2f} "
                           f"(before the failure {total:.2f} in all)", bound)
    return check


# -- the tester's counters beside the switches' (testbed.analysis.tester) -------------------

def _tester(summary: Summary) -> dict | None:
    return summary.get("tester")


def _counts_match(tc: int, compare: Callable[[dict, int], tuple[int, int, list[str]]],
                  what: str) -> CheckFn:
    """The tester's count of ``what`` in class ``tc`` equal to its host ports', host by host
    (``compare``: the two sums and each host that differs); at least one counted."""
    bound = "switch = tester on every host port (tolerance 0), >= 1 frame"

    def check(summary: Summary) -> Outcome:
        tester = _tester(summary)
        if tester is None:
            return Outcome(False, "the tester's counters were not written", bound)
        switch, seen, wrong = compare(tester, tc)
        said = f"class {tc}: switch ports {switch}, tester {seen} {what}"
        return Outcome(not wrong and switch >= 1,
                       said + (f"; {'; '.join(wrong)}" if wrong else ""), bound)
    return check


def tester_pfc_matches(tc: int) -> CheckFn:
    """"PFC seen on queue ``tc`` matching the tester's PFC counter": for every host, the PFC
    frames of class ``tc`` its leaf port sent it equal those the host received, and those the
    host sent equal those the port received; at least one frame. Tolerance 0: both sides are
    read after the traffic stopped, and PFC frames take no queue a pause could hold."""
    return _counts_match(tc, pfc_mismatches, "PFC frames")


def tester_frames_match(tc: int) -> CheckFn:
    """The tester's frame counters against the switch's, per host port, in a lossless class:
    every data, ACK/NAK and CNP frame a host sent in class ``tc`` its leaf port received, and
    every one the port sent the host arrived. Tolerance 0: with PFC nothing is lost between
    the two counts, and both are read after the traffic stopped and the queues drained."""
    return _counts_match(tc, frame_mismatches, "frames")


def tester_ce(tc: int) -> CheckFn:
    """"ECN-CE seen" by the tester: the hosts received CE-marked packets in class ``tc``, and no
    more than the switches marked (a packet marked at two hops arrives once)."""
    bound = "1 <= tester's CE <= switches' CE marks"

    def check(summary: Summary) -> Outcome:
        tester = _tester(summary)
        if tester is None:
            return Outcome(False, "the tester's counters were not written", bound)
        got = total_counted(tester, tc, "ce_received")
        marked = (tester.get("ce_marked_by_class") or {}).get(str(tc), 0)
        return Outcome(1 <= got <= marked, f"class {tc}: tester received {got} CE-marked "
                       f"packets, switches marked {marked}", bound)
    return check


def tester_cnps(summary: Summary) -> Outcome:
    """"CNPs on queue 6": the tester's receivers sent CNPs, in the CNP class, and its senders
    received every one."""
    bound = ">= 1 CNP sent, every one received"
    tester = _tester(summary)
    if tester is None:
        return Outcome(False, "the tester's counters were not written", bound)
    classes = sorted({tc for by in (tester.get("hosts") or {}).values() for tc, c in by.items()
                      if c.get("cnps_sent") or c.get("cnps_received")})
    sent = {tc: total_counted(tester, int(tc), "cnps_sent") for tc in classes}
    got = {tc: total_counted(tester, int(tc), "cnps_received") for tc in classes}
    said = "; ".join(f"class {tc}: {sent[tc]} sent, {got[tc]} received" for tc in classes)
    return Outcome(bool(classes) and sum(sent.values()) >= 1 and sent == got,
                   said or "no CNP", bound)


def rates_at_least(mbps: float) -> CheckFn:
    """The lossless class keeps its rate beside the background: every RoCE flow's goodput
    (headline, over its active time) at least ``mbps``."""
    def check(summary: Summary) -> Outcome:
        flows = (summary.get("headline") or {}).get("flows") or {}
        rates = {n: f.get("goodput_mbps") or 0.0 for n, f in flows.items()}
        shown = ", ".join(f"{n} {v:.2f}" for n, v in rates.items()) or "no flow"
        ok = bool(rates) and min(rates.values()) >= mbps
        return Outcome(ok, f"goodput Mbit/s: {shown}", f"each >= {mbps:g} Mbit/s")
    return check


def background_took_the_rest(min_mbps: float) -> CheckFn:
    """"Best effort gets what is left": every background flow delivered at least ``min_mbps``
    (what the lossless flows leave of the port, less a margin) and lost what did not fit (it
    offered more than was left: the port was contended, and the loss fell on best effort)."""
    def check(summary: Summary) -> Outcome:
        bg = summary.get("background") or {}
        if not bg:
            return Outcome(False, "no background flow in the summary",
                           f">= {min_mbps:g} Mbit/s delivered and > 0 lost, each")
        parts, ok = [], True
        for n, b in bg.items():
            good, lost = b.get("goodput_mbps"), b.get("lost_packets")
            ok = ok and good is not None and lost is not None and good >= min_mbps and lost > 0
            parts.append(f"{n}: {good if good is not None else 'unknown'} Mbit/s delivered, "
                         f"{lost if lost is not None else 'unknown'} of "
                         f"{b.get('sent_packets', 'unknown')} frames lost")
        return Outcome(ok, "; ".join(parts),
                       f">= {min_mbps:g} Mbit/s delivered and > 0 lost, each")
    return check
