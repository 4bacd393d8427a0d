"""Was this run a faithful emulation? The fidelity guard of every run.

A lossless class that loses packets teaches the wrong lesson when the loss came from the
emulation falling behind rather than from the protocol. Each check below compares one figure a
run measured with the budget that the emulation's own guarantees rest on; a run passes when
every check does, and otherwise its summary, the CLI and the report say which failed and why.

* ``lossless_drops``: packets a lossless class dropped while PFC was on, or a credited class
  in mode ib-credit, which never sends what the next hop has no room for. With PFC the only
  loss a real switch allows is a headroom overflow, which the buffer sizing here is meant to
  rule out.
  What the PFC watchdog's drop action discarded is by design and counted apart
  (``watchdog_drops``, in the verdict): every other drop of a lossless class, before a
  detection or after it, counts.
* ``pipeline_drops``: packets the P4 program itself discarded (no route, TTL, a bad checksum,
  a parse error; PFC frames the switch consumes are not a loss): the pipeline lost them.
* ``hidden_loss``: frames a switch's veth received that the P4 program never saw (BMv2 lost
  them in front of its pipeline: arrivals faster than it serves them).
* ``host_loss``: frames an endpoint lost at its own socket: its receive buffer overflowed
  while the process waited for a core, or the kernel refused a send. Go-Back-N then resends,
  and out-of-order packets and NAKs appear that the fabric did not cause.
* ``buffer_exceeded``: how far a lossless queue's occupancy (its kernel backlog plus what BMv2
  held for it) went past its configured buffer. Past it, a real switch with this headroom
  would have dropped; the emulation keeps a slack beyond it (``qos.pfc.emulation_slack_ms``)
  so that its own delays do not read as a protocol result, and says so here.
* ``credit_overrun`` (mode ib-credit): how far an input's occupancy in the kernel (its FIFOs
  at every output of the switch) went past its credit buffer (``qos.credit.buffer_bytes``). An
  IB port never sends what the next hop's buffer has no room for; past it, the port before
  sent beyond its credit, which here happens only when a grant races the frames leaving its
  gate (testbed.agent.credit). What BMv2 held of the input is not in the kernel's count, so
  an overrun hidden inside BMv2 goes unseen.
* ``phantom_below``: how far the program's phantom queue stood below the switch's real
  occupancy at a resync. Whatever it hides, XOFF comes late by as much, and it is taken out of
  the headroom; beyond the headroom a drop is possible.
* ``bmv2_lag``: the longest BMv2 held a lossless packet (its arrival to its egress pass). What
  such a hold does to the buffers, ``phantom_below`` and ``buffer_exceeded`` judge; but a switch
  that holds packets that long no longer keeps the protocol's time: past ``fidelity.bmv2_lag_ms``
  the hold is a sizeable part of the scaled DCQCN timers and of the watchdog's polling interval.
  In mode ib-credit it applies when every credited class is ECN-marked: the program times the
  packets of the queues it keeps a phantom of, and keeps one of a class only to mark or pause.
* ``bmv2_stall``: the longest BMv2 took to answer its agent's register reads (asked every
  sample, busy or idle), from the ask to the kernel's arrival stamp on the replies. A switch
  that stalls holds nothing inside it to time: what arrives waits in front of it, in its
  ports' sockets, where ``bmv2_lag`` cannot see it, so the stall itself is measured, against
  the same ``fidelity.bmv2_lag_ms``. It applies in mode ib-credit too, where a stalled switch
  holds credited frames and their credit's return.
* ``agent_stall``: the longest a switch agent's loop came late: to read an answer of BMv2
  after it came, or to wake at the time it had set (stopped, blocked, or without a core). The
  loop also applies PFC frames, ticks the resyncs, polls the watchdog and sends the credits:
  an agent that stalls that long keeps none of their times, against the same
  ``fidelity.bmv2_lag_ms``. The two used to be one figure (ask to read), which blamed every
  switch at once when the agents' own loops stood still (their file writes waiting for the
  file system's journal: ``traffic.spool``).
* ``agent_reaction``: a PFC frame's arrival in the kernel to the gate command, the other part:
  an XOFF's (a late pause overfills the headroom) and an XON's (a late resume idles the link).
* ``host_lag``: the largest share of a host's active time (it had a frame due) in which its
  NIC stood idle because the endpoint's process came late, beyond the slack its pacers repay
  (:mod:`traffic.pacing`; over at least a second of activity): what a host sent then was set
  by its CPU (a busy core, a hypervisor's steal), not by the protocol, and a collective's
  efficiency or a flow's goodput comes out low with every switch-side check passed. A RoCE
  endpoint's own figure: in mode ``tcp`` the kernel sends, and the check does not apply.
* ``cpu_saturated``: the longest stretch in which every core was busy; past it, none of the
  times above can be trusted to hold.

Beside the checks, the verdict says how much of the cores' time the hypervisor gave to others
(*steal*, on a virtual machine): not a check of its own (a core stolen from counts as busy, and
what the theft did to the fabric the checks above judge), but when it is large the reason a
run failed is the machine's host rather than the fabric's own load, which a reader should know
before blaming the scenario.

A check whose figure was not measured (the counters could not be read, an endpoint did not
answer, an agent wrote no telemetry) is ``unknown``, and an unknown is not ok: a run is
faithful only when every check that applies was measured and passed. The verdict names each
missing figure and why it is missing.

Pure: the figures come in, a verdict goes out (:func:`assess`); reading the results folder is
:mod:`testbed.analysis.deadlock`'s job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

#: The checks that apply only while PFC is on, and only in mode ib-credit; the others apply
#: to every run (:func:`applies`).
LOSSLESS_ONLY = ("lossless_drops", "buffer_exceeded", "phantom_below", "bmv2_lag",
                 "bmv2_stall", "agent_stall", "agent_reaction")
CREDIT_ONLY = ("credit_overrun",)
#: Of the lossless checks, those that apply in mode ib-credit too: its classes lose nothing
#: either, and a switch that stalls holds credited frames as it holds PFC's. The others read
#: PFC's phantoms, pauses and XOFFs, but bmv2_lag, which applies where the program times the
#: credited classes' packets (``Figures.credit_timed``). A stalled agent sends no credit.
CREDITED_TOO = ("lossless_drops", "bmv2_stall", "agent_stall")


@dataclass(frozen=True)
class Figures:
    """What a run measured, for the checks. None: not measured, and ``unmeasured`` says why
    (keyed by the check's name); the check is then unknown, which is not ok."""

    pfc_enabled: bool
    #: mode ib-credit: classes under credit flow control, which must lose nothing too
    #: (which of the lossless checks apply to them: :data:`CREDITED_TOO`)
    credit_enabled: bool = False
    #: mode ib-credit, every credited class ECN-marked: the program times their packets in
    #: BMv2 (a phantom queue each), so bmv2_lag applies
    credit_timed: bool = False
    lossless_drops: int | None = None  # lossless-class drops that were not the watchdog's
    pipeline_drops: int | None = None
    hidden_loss: int | None = None
    host_loss: int | None = None  # frames the endpoints lost at their own sockets
    phantom_below_bytes: int | None = None  # largest (occupancy - phantom) seen at a resync
    buffer_exceeded_bytes: int | None = None  # largest occupancy beyond a configured buffer
    credit_overrun_bytes: int | None = None  # largest input occupancy beyond its credit buffer
    bmv2_lag_us: int | None = None
    bmv2_stall_us: int | None = None  # the longest a switch took to answer its agent
    agent_stall_us: int | None = None  # the longest an answer waited for its agent to read it
    agent_reaction_us: int | None = None
    host_lag_pct: float | None = None  # the most line-rate time a host lost to its lateness
    host_lag_host: str | None = None  # which host that was
    host_lag_longest_ms: float | None = None  # and the longest it came late to a frame
    #: The endpoints pace their own frames (RoCE); False in mode tcp: host_lag does not apply.
    hosts_pace: bool = True
    cpu_saturated_s: float | None = None
    #: The cores' time the hypervisor gave to others over the run, and at most in one sample
    #: (percent; None: not recorded). Not a check: said beside the verdict.
    steal_pct: float | None = None
    steal_peak_pct: float | None = None
    #: Packets the PFC watchdog's drop action discarded: by design, so no check of its own,
    #: but said in the verdict beside the drops that do count.
    watchdog_drops: int | None = None
    unmeasured: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Budgets:
    """What the emulation's guarantees allow."""

    headroom_bytes: int  # the smallest lossless headroom of any port
    reaction_us: int  # qos.pfc.reaction_ms
    bmv2_lag_us: int  # fidelity.bmv2_lag_ms
    cpu_saturated_s: float  # fidelity.cpu_saturated_s
    steal_note_pct: float  # fidelity.steal_note_pct
    host_lag_pct: float = 2.0  # fidelity.host_lag_pct


Status = Literal["ok", "failed", "unknown"]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool  # measured and within its limit
    value: float | int | None  # None: not measured
    limit: float | int
    reason: str  # said when not ok
    status: Status = "ok"


def applies(name: str, fig: Figures) -> bool:
    """Whether check ``name`` judges a run with these figures' mode and hosts."""
    if name == "host_lag":
        return fig.hosts_pace
    if name in CREDIT_ONLY:
        return fig.credit_enabled
    if name not in LOSSLESS_ONLY or fig.pfc_enabled:
        return True
    return fig.credit_enabled and (name in CREDITED_TOO or (
        name == "bmv2_lag" and fig.credit_timed))


def checks(fig: Figures, budget: Budgets) -> list[Check]:
    """Every check that applies to the run (the lossless ones while PFC is on), measured or
    not: one not measured is ``unknown``."""
    out: list[Check] = []

    def add(name: str, value: float | int | None, limit: float | int, reason: str) -> None:
        if not applies(name, fig):
            return
        if value is None:
            why = fig.unmeasured.get(name, "not measured")
            out.append(Check(name, False, None, limit, f"{name} unknown: {why}", "unknown"))
            return
        ok = value <= limit
        out.append(Check(name, ok, value, limit, reason.format(v=value, lim=limit),
                         "ok" if ok else "failed"))

    add("lossless_drops", fig.lossless_drops, 0,
        "{v} packets dropped in a lossless class while PFC (or mode ib-credit's credit) was "
        "on (not by the PFC watchdog's drop action)")
    add("pipeline_drops", fig.pipeline_drops, 0,
        "{v} packets discarded by the P4 program itself (no route, TTL, checksum or parse "
        "error): see the drop reasons in p4_counters.csv")
    add("hidden_loss", fig.hidden_loss, 0,
        "{v} frames lost in front of BMv2 (a veth received them, the P4 program never saw "
        "them): the switches could not keep up with the offered packets")
    add("host_loss", fig.host_loss, 0,
        "{v} frames lost at the hosts' own sockets (an endpoint did not keep up: its receive "
        "buffer overflowed or the kernel refused a send), as a NIC's buffers would overflow")
    add("buffer_exceeded", fig.buffer_exceeded_bytes, 0,
        "a lossless queue held {v} bytes beyond its buffer (xoff + headroom per ingress "
        "port): a real switch with this headroom would have dropped them; the emulation's "
        "slack (qos.pfc.emulation_slack_ms) absorbed what its own delays let in")
    add("credit_overrun", fig.credit_overrun_bytes, 0,
        "an input held {v} bytes beyond its credit buffer (qos.credit.buffer_bytes) in the "
        "kernel: the port before it sent past its credit, which an IB port never does (a "
        "grant raced the frames leaving its gate)")
    add("phantom_below", fig.phantom_below_bytes, budget.headroom_bytes,
        "the P4 phantom queue stood {v} bytes below the real occupancy, more than the "
        "{lim}-byte headroom covers")
    add("bmv2_lag", fig.bmv2_lag_us, budget.bmv2_lag_us,
        "BMv2 held a lossless packet {v} us, beyond {lim} us (fidelity.bmv2_lag_ms): the "
        "switches did not keep the protocol's time")
    add("bmv2_stall", fig.bmv2_stall_us, budget.bmv2_lag_us,
        "a switch took {v} us to answer its agent, beyond {lim} us (fidelity.bmv2_lag_ms): "
        "BMv2 stalled, and what arrived meanwhile waited in front of it")
    add("agent_stall", fig.agent_stall_us, budget.bmv2_lag_us,
        "a switch agent's loop came {v} us late, beyond {lim} us (fidelity.bmv2_lag_ms): "
        "it stalled, and its PFC frames, resyncs, watchdog polls and timers waited as long")
    add("agent_reaction", fig.agent_reaction_us, budget.reaction_us,
        "a switch agent took {v} us to apply a PFC frame (pause or resume), beyond the {lim} "
        "us reaction "
        "time the headroom is sized for (qos.pfc.reaction_ms)")
    add("host_lag", fig.host_lag_pct, budget.host_lag_pct, _host_lag_reason(fig))
    add("cpu_saturated", fig.cpu_saturated_s, budget.cpu_saturated_s,
        "every CPU core was busy for {v} s at a stretch (limit {lim} s, "
        "fidelity.cpu_saturated_s): timings were not the emulation's own")
    return out


def _host_lag_reason(fig: Figures) -> str:
    """host_lag's reason, with what tells a busy machine from a stolen one: which host, its
    longest wait, and the steal over the run (a hypervisor's theft stalls a process whatever
    the fabric's load; the fabric's own load shows no steal)."""
    who = f"{fig.host_lag_host}'s" if fig.host_lag_host else "a host's"
    longest = ("" if fig.host_lag_longest_ms is None
               else f" (its longest wait {fig.host_lag_longest_ms:.0f} ms)")
    if fig.steal_pct is None:
        steal = "steal was not recorded"
    else:
        peak = "" if fig.steal_peak_pct is None else f", up to {fig.steal_peak_pct:.0f}%"
        steal = f"steal took {fig.steal_pct:.1f}% of the cores over the run{peak}"
    return (who + " NIC stood idle {v}% of the time it had a frame due" + longest + ", its "
            "endpoint's process late beyond what its pacers repay (limit {lim}%, "
            "fidelity.host_lag_pct): the host's CPU, not the protocol, set what it sent; "
            + steal)


def assess(fig: Figures, budget: Budgets) -> dict:
    """The summary's ``fidelity`` section: ``ok`` (every check measured and passed), the
    reasons when not, the checks not measured, and every check."""
    cs = checks(fig, budget)
    return {"ok": all(c.ok for c in cs),  # never empty: host_loss and the others always apply
            "reasons": [c.reason for c in cs if not c.ok],
            "unknown": [c.name for c in cs if c.status == "unknown"],
            "watchdog_drops": fig.watchdog_drops,
            "steal": {"mean_pct": fig.steal_pct, "peak_pct": fig.steal_peak_pct,
                      "note": steal_note(fig.steal_pct, fig.steal_peak_pct,
                                         budget.steal_note_pct)},
            "checks": [asdict(c) for c in cs]}


def steal_note(mean_pct: float | None, peak_pct: float | None, limit_pct: float,
               when: str = "over the run") -> str | None:
    """What steal took, in words, when it reached ``limit_pct`` (fidelity.steal_note_pct)."""
    if mean_pct is None or mean_pct < limit_pct:
        return None
    peak = f", up to {peak_pct:.0f}% in one sample" if peak_pct is not None else ""
    return (f"the hypervisor gave {mean_pct:.0f}% of this machine's CPU time to others "
            f"{when} (steal{peak}): the fabric had that much less than its budget assumes, "
            "and a contended host, not the scenario, may be why a check failed")


def unmade(why: str) -> dict:
    """The verdict of a run whose figures could not be gathered at all (its telemetry summary
    failed): not ok, with why."""
    return {"ok": False, "reasons": [f"the fidelity guard could not judge this run: {why}"],
            "unknown": ["all"], "watchdog_drops": None, "checks": []}


def verdict_problem(section: dict | None) -> str | None:
    """Why a run's results do not count as a faithful emulation (None: they do): its summary
    has no verdict, or the verdict is not ok. One reading for every consumer (labs, tests,
    benchmarks, docs)."""
    if not section:
        return "the run has no fidelity verdict (its telemetry summary was not written)"
    if not section.get("ok"):
        return "; ".join(section.get("reasons") or ["the fidelity verdict is not ok"])
    return None


def lines(section: dict | None) -> list[str]:
    """The fidelity section in words, for the CLI and report.md."""
    if not section:
        return [f"FIDELITY UNKNOWN: {verdict_problem(section)}"]
    note = (section.get("steal") or {}).get("note")
    notes = [f"  note: {note}"] if note else []
    if section["ok"]:
        names = ", ".join(c["name"] for c in section["checks"])
        wd = section.get("watchdog_drops")
        extra = f"; the PFC watchdog's drop action discarded {wd} packets" if wd else ""
        return [f"FIDELITY OK: the emulation kept up ({names}){extra}", *notes]
    failed = any(c.get("status", "failed") == "failed" for c in section["checks"]
                 if not c["ok"]) or not section["checks"]
    head = ("FIDELITY NOT OK: this run's results are not a faithful emulation:" if failed else
            "FIDELITY UNKNOWN: not every check was measured, so this run does not count as "
            "faithful:")
    return [head, *(f"  - {r}" for r in section["reasons"]), *notes]


def longest_run(samples: list[tuple[float, float]], threshold: float) -> float:
    """The longest stretch of consecutive (t, value) samples with value >= threshold, in
    seconds from the first such sample to the last (a single sample counts as zero)."""
    best = 0.0
    start: float | None = None
    for t, v in samples:
        if v >= threshold:
            start = t if start is None else start
            best = max(best, t - start)
        else:
            start = None
    return round(best, 3)
