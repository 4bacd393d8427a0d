"""Checks on traffic: PFC and drops (lab 4), ECN marking (lab 2), DCQCN (lab 3), the victim
of congestion spreading (lab 5) and ECMP spreading (lab 8). Each is a pure function of the
runs' results folders; none passes a run that did not show its phenomenon."""

from __future__ import annotations

from testbed.analysis.phenomena import jain_index
from testbed.labs.evidence import RunData, marked_fraction, uplink_bytes
from testbed.labs.flows import dcqcn_state, goodput_bps
from testbed.labs.verdict import Context, Verdict, check, failed, moved, passed
from traffic.wire import DSCP_ROCE


def _retransmitted(run: RunData) -> int:
    return sum(int(q.get("retransmitted", 0)) for q in run.qps())


def _pfc_sent(run: RunData) -> int:
    return sum(int(v) for v in run.summary.get("pfc_frames_sent", {}).values())


def _queue_drops(run: RunData, tc: int) -> int:
    """Packets the switches' kernel queues of class ``tc`` dropped (the last sample of each)."""
    last: dict = {}
    for s in run.telemetry:
        if s.tc == tc:
            last[s.queue] = s.drops
    return sum(last.values())


@check("pfc_paused")
def pfc_paused(ctx: Context, run: RunData, min_frames: int = 1) -> Verdict:
    """PFC acted: the switches sent pause frames while the flows moved bytes."""
    if (bad := moved(run)) is not None:
        return bad
    if not run.lossless():
        return failed("PFC is off in this run (qos.pfc_enable is empty)",
                      "make class 3 lossless: qos: {pfc_enable: [3]}")
    n = _pfc_sent(run)
    if n < min_frames:
        return failed(f"the switches sent {n} PFC frames: nothing was congested enough",
                      "the senders must together offer more than the receiver's link carries "
                      "(an incast): add senders or turn DCQCN off (endpoints: {dcqcn: false})")
    return passed(f"the switches sent {n} PFC pause frames")


@check("lossless_no_drops")
def lossless_no_drops(ctx: Context, run: RunData) -> Verdict:
    """Zero drops in the lossless class, in a run that was congested (PFC acted) and moved
    bytes: an idle fabric is lossless trivially."""
    if (bad := moved(run)) is not None:
        return bad
    if not run.lossless():
        return failed("PFC is off in this run, so class 3 is not lossless",
                      "qos: {pfc_enable: [3]} makes the RoCE class lossless")
    if _pfc_sent(run) == 0:
        return failed("no PFC frame was sent: the run was never congested, so it shows nothing "
                      "about losslessness", "run the incast the sheet describes")
    drops = int(run.summary.get("kernel_drops_lossless", 0))
    rtx = _retransmitted(run)
    if drops or rtx:
        return failed(f"{drops} packets dropped in the lossless class, {rtx} retransmitted",
                      "the headroom did not absorb what was in flight: leave qos.pfc's xoff "
                      "and headroom at their derived defaults")
    return passed(f"0 drops and 0 retransmissions with {_pfc_sent(run)} PFC frames sent")


@check("lossy_drops")
def lossy_drops(ctx: Context, run: RunData) -> Verdict:
    """Without PFC the same incast drops packets and the senders go back N."""
    if (bad := moved(run, 0.02, each=False)) is not None:
        return bad
    if 3 in run.lossless():
        return failed(f"PFC is still on for class 3 (qos.pfc_enable {run.lossless()})",
                      "turn PFC off in this run: qos: {pfc_enable: []}")
    drops, rtx = _queue_drops(run, 3), _retransmitted(run)
    if drops and not rtx:
        return failed(f"{drops} packets dropped, none resent yet: a QP whose last packets were "
                      "all dropped hears no NAK, and waits out its Local ACK Timeout (about 4 s "
                      "at 10 Mbit/s) before it goes back N", "let the run last that long past "
                      "the flows' end (duration_s), as lossy.yaml does")
    if not drops or not rtx:
        return failed(f"{drops} packets dropped, {rtx} retransmitted: the queue never overflowed",
                      "keep the incast as it is (several senders, DCQCN off), so that the "
                      "receiver's queue overflows its buffer (qos.buffer_bytes)")
    flows = run.flow_bytes()
    least = min(flows, key=flows.__getitem__)
    starved = ""
    if len(flows) > 1 and flows[least] < 0.2 * max(flows.values()):
        starved = (f"; flow {least} got {flows[least]} bytes, under a fifth of the most any "
                   "flow got: a resend lost again waits for the retransmission timeout")
    return passed(f"{drops} packets dropped by the switches; the senders retransmitted {rtx} "
                  f"(Go-Back-N resends everything after a lost packet){starved}")


def _profile(run: RunData, tc: int) -> dict | None:
    return run.config.get("qos", {}).get("ecn", {}).get(str(tc))


@check("marks_seen")
def marks_seen(ctx: Context, run: RunData, receiver: str, tc: int = 3) -> Verdict:
    """The baseline: a standing queue at the receiver's port, and some of its packets marked."""
    if (bad := moved(run)) is not None:
        return bad
    frac, sent = marked_fraction(run, receiver, tc)
    if sent == 0 or frac == 0:
        return failed(f"no packet was marked at {receiver}'s leaf port ({sent} sent)",
                      "run the baseline scenario unchanged: it has a WRED profile on class 3")
    return passed(f"{frac:.0%} of {sent} packets marked at {receiver}'s leaf port")


@check("marks_moved")
def marks_moved(ctx: Context, run: RunData, baseline: str, receiver: str, tc: int = 3,
                at_least: float = 0.85, margin: float = 0.2) -> Verdict:
    """The student's profile on class tc made the switch mark at least ``at_least`` of the
    packets, and ``margin`` more of them than the baseline's profile did."""
    base = ctx.run(baseline)
    if (bad := moved(run)) is not None:
        return bad
    mine = _profile(run, tc)
    if mine is None:
        classes = sorted(run.config.get("qos", {}).get("ecn", {}))
        return failed(f"class {tc} has no WRED profile in this run (profiles on classes "
                      f"{', '.join(classes) or 'none'})",
                      f"RoCE data is class {tc} (DSCP {DSCP_ROCE}): put your profile under "
                      f"qos.ecn.{tc}")
    if mine == _profile(base, tc):
        return failed("your profile is the baseline's", "change Kmin, Kmax or Pmax")
    f_base, _ = marked_fraction(base, receiver, tc)
    f_mine, sent = marked_fraction(run, receiver, tc)
    line = (f"{f_mine:.0%} of {sent} packets marked with Kmin {mine['kmin_bytes']}, Kmax "
            f"{mine['kmax_bytes']}, Pmax {mine['pmax']} (baseline {f_base:.0%})")
    if f_mine < at_least or f_mine < f_base + margin:
        return failed(line, f"aim for at least {at_least:.0%}: the queue stands where it stood "
                      "in the baseline, so move the curve under it: Kmax below that queue "
                      "length marks every packet, a higher Pmax marks more below Kmax")
    return passed(line)


@check("dcqcn_reacted")
def dcqcn_reacted(ctx: Context, run: RunData, flows: list[str],
                  max_rate_fraction: float = 0.6) -> Verdict:
    """Every named flow's senders got CNPs and DCQCN cut their rate below the line rate.

    DCQCN off is said before a starved flow: with PFC alone, which pauses whole ports and
    classes and not flows, one of the senders can be starved at the congested port (one run of
    lab 3's broken file left its third flow 262,144 bytes in 4.2 s), so a file that turns DCQCN
    off may starve a flow as well as leave the rates uncut; the lesson is the same, turn it on.
    The fairness question below says the same first, for the same reason."""
    if not _dcqcn_on(run):
        return failed("DCQCN is off in this run", "endpoints: {dcqcn: true}")
    if (bad := moved(run)) is not None:
        return bad
    line = run.host_rate_bps()
    for f in flows:
        st = dcqcn_state(run, f)
        if st["cnps"] == 0:
            return failed(f"flow {f}'s sender received no CNP",
                          "the switches must ECN-mark class 3 (a qos.ecn profile for class 3) "
                          "and the flows must share a bottleneck")
        if st["rate_min_bps"] is None or st["rate_min_bps"] > max_rate_fraction * line:
            return failed(f"flow {f}'s rate never fell below {max_rate_fraction:.0%} of the "
                          "line rate", "the flows must share one receiver, as the sheet says")
    states = [dcqcn_state(run, f) for f in flows]
    cnps = ", ".join(f"{f}: {s['cnps']}" for f, s in zip(flows, states, strict=True))
    low = ", ".join(f"{s['rate_min_bps'] / 1e6:.1f}" for s in states)
    return passed(f"CNPs {cnps}; lowest rate {low} Mbit/s")


@check("alone_at_line_rate")
def alone_at_line_rate(ctx: Context, run: RunData, flow: str, from_s: float, to_s: float,
                       at_least: float = 0.6) -> Verdict:
    """One flow alone on its path runs near its link's rate."""
    g = goodput_bps(run, flow, from_s, to_s)
    line = run.host_rate_bps()
    msg = f"flow {flow} alone ({from_s:g}-{to_s:g} s): {g / 1e6:.1f} Mbit/s of {line / 1e6:g}"
    if g < at_least * line:
        return failed(msg, f"flow {flow} should run alone from {from_s:g} s: start the "
                      f"others after {to_s:g} s (start_s)")
    return passed(msg)


@check("fair_share")
def fair_share(ctx: Context, run: RunData, flows: list[str], from_s: float, to_s: float,
               min_share: float = 1 / 3) -> Verdict:
    """With DCQCN on and every flow cut by CNPs, each flow gets a real share of the
    bottleneck over [from_s, to_s]: at least ``min_share`` of an equal share. Jain's index is
    said beside it, for the sheet's question, but is not what is graded: how even DCQCN's
    shares come out in a few seconds varies from run to run of the same right scenario (each
    QP's rate after the first cuts depends on when its CNPs came, at most one a QP per CNP
    interval, 200 ms at 10 Mbit/s, and the additive increase that evens shares out takes tens
    of seconds at this scale), while a starved flow means the setup is wrong."""
    if not _dcqcn_on(run):
        return failed("DCQCN is off in this run",
                      "this question is about DCQCN's shares: run it with DCQCN on")
    if (bad := moved(run)) is not None:
        return bad
    missing = [f for f in flows if f not in run.summary.get("flows", {})]
    if missing:
        return failed(f"no flow named {', '.join(missing)}", f"name the flows {', '.join(flows)}")
    rates = [goodput_bps(run, f, from_s, to_s) for f in flows]
    equal = sum(rates) / len(rates)
    each = ", ".join(f"{f} {r / 1e6:.1f}" for f, r in zip(flows, rates, strict=True))
    msg = (f"{each} Mbit/s over {from_s:g}-{to_s:g} s, Jain's index {jain_index(rates):.2f}; "
           f"the least {min(rates) / equal if equal else 0:.0%} of an equal share")
    if min(rates) == 0 or not _dcqcn_cut_each(run, flows):
        return failed(msg, "all flows must be sending then, to one receiver, with DCQCN on")
    if min(rates) < min_share * equal:
        return failed(msg, f"a flow got less than {min_share:.0%} of an equal share: the "
                      "flows must send to one receiver over the whole window")
    return passed(msg)


def _dcqcn_on(run: RunData) -> bool:
    """The run's endpoints ran DCQCN (endpoints.dcqcn, on unless the scenario says off)."""
    return bool(run.scenario.get("endpoints", {}).get("dcqcn", True))


def _dcqcn_cut_each(run: RunData, flows: list[str]) -> bool:
    """DCQCN was on and every flow's sender received CNPs."""
    return _dcqcn_on(run) and all(dcqcn_state(run, f)["cnps"] > 0 for f in flows)


@check("victim_slowed")
def victim_slowed(ctx: Context, run: RunData, victim: str, from_s: float, to_s: float,
                  at_most: float = 0.5) -> Verdict:
    """Congestion spreading: the victim, which shares no congested link, is slowed to well
    below its own line rate by pauses, as PFC spreads from the incast."""
    if (bad := moved(run, 0.02)) is not None:
        return bad
    if _pfc_sent(run) == 0:
        return failed("no PFC frame was sent: nothing spread", "keep PFC on and DCQCN off")
    g, line = goodput_bps(run, victim, from_s, to_s), run.host_rate_bps()
    msg = f"victim {g / 1e6:.1f} Mbit/s of its {line / 1e6:g} Mbit/s link"
    if g > at_most * line:
        return failed(msg, "the victim must share a paused queue with the incast: pin its "
                      "route through the same spine (routes:)")
    return passed(msg)


@check("victim_helped")
def victim_helped(ctx: Context, run: RunData, baseline: str, victim: str, from_s: float,
                  to_s: float, factor: float = 1.4) -> Verdict:
    """DCQCN slows the incast senders at the source, PFC pauses less, and the victim gets
    ``factor`` times its goodput in the PFC-only run."""
    base = ctx.run(baseline)
    if (bad := moved(run, 0.02)) is not None:
        return bad
    g_base = goodput_bps(base, victim, from_s, to_s)
    g = goodput_bps(run, victim, from_s, to_s)
    cnps = sum(int(q.get("cnps_received", 0)) for q in run.qps())
    msg = (f"victim {g / 1e6:.1f} Mbit/s with DCQCN, {g_base / 1e6:.1f} without; "
           f"{cnps} CNPs received")
    if not run.scenario.get("endpoints", {}).get("dcqcn", True):
        return failed(msg, "DCQCN is off in this run: endpoints: {dcqcn: true}")
    if cnps == 0:
        return failed(msg, "no CNP reached the senders: the switches must ECN-mark class 3 "
                      "(qos.ecn needs a profile for class 3)")
    if g < factor * g_base:
        return failed(msg, f"expected at least {factor:g}x: DCQCN must act before PFC does "
                      "(Kmax below XOFF, the default)")
    return passed(msg)


@check("ecmp_one_path")
def ecmp_one_path(ctx: Context, run: RunData, leaf: str, tc: int = 3,
                  at_least: float = 0.9) -> Verdict:
    """Polarization: the leaf sent (nearly) all of the flow's bytes up one uplink."""
    if (bad := moved(run)) is not None:
        return bad
    up = uplink_bytes(run, leaf, tc)
    total = sum(up.values())
    share = max(up.values()) / total if total else 0.0
    msg = f"{leaf}'s uplinks carried " + ", ".join(f"port {p}: {b}" for p, b in up.items())
    if share < at_least:
        return failed(msg, "run the polarized scenario unchanged")
    return passed(msg + f" bytes: {share:.0%} on one")


@check("ecmp_spread")
def ecmp_spread(ctx: Context, run: RunData, leaf: str, tc: int = 3,
                min_share: float = 0.15) -> Verdict:
    """The QPs spread: every uplink of the leaf carried at least ``min_share`` of the bytes."""
    if (bad := moved(run)) is not None:
        return bad
    up = uplink_bytes(run, leaf, tc)
    total = sum(up.values()) or 1
    msg = f"{leaf}'s uplinks carried " + ", ".join(f"port {p}: {b / total:.0%}"
                                                  for p, b in up.items())
    if min(up.values(), default=0) < min_share * total:
        fields = run.config.get("ecmp", {}).get("hash_fields", [])
        hint = ("the hash must cover the one field that differs between QPs: the UDP source "
                "port (ecmp.hash_fields needs src_port)" if "src_port" not in fields else
                "with few QPs the hash may still put them on one path: use 8 QPs or more")
        return failed(msg, hint)
    return passed(msg)
