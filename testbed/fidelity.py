"""Was this run a faithful emulation? The fidelity guard of every run.

A lossless class that loses packets teaches the wrong lesson when the loss came from the
emulation falling behind rather than from the protocol. Each check below compares one figure a
run measured with the budget that the emulation's own guarantees rest on; a run passes when
every check does, and otherwise its summary, the CLI and the report say which failed and why.

* ``lossless_drops``: packets a lossless class dropped while PFC was on. With PFC the only loss
  a real switch allows is a headroom overflow, which the buffer sizing here is meant to rule out.
  A queue the PFC watchdog cut off with its drop action drops by design and is not counted.
* ``hidden_loss``: frames a switch's veth received that the P4 program never saw (BMv2 lost
  them in front of its pipeline: arrivals faster than it serves them).
* ``host_loss``: frames an endpoint lost at its own socket: its receive buffer overflowed
  while the process waited for a core, or the kernel refused a send. Go-Back-N then resends,
  and out-of-order packets and NAKs appear that the fabric did not cause.
* ``buffer_exceeded``: how far a lossless queue's occupancy (its kernel backlog plus what BMv2
  held for it) went past its configured buffer. Past it, a real switch with this headroom
  would have dropped; the emulation keeps a slack beyond it (``qos.pfc.emulation_slack_ms``)
  so that its own delays do not read as a protocol result, and says so here.
* ``phantom_below``: how far the program's phantom queue stood below the switch's real
  occupancy at a resync. Whatever it hides, XOFF comes late by as much, and it is taken out of
  the headroom; beyond the headroom a drop is possible.
* ``bmv2_lag``: the longest BMv2 held a lossless packet (its arrival to its egress pass). What
  such a hold does to the buffers, ``phantom_below`` and ``buffer_exceeded`` judge; but a switch
  that holds packets that long no longer keeps the protocol's time: past ``fidelity.bmv2_lag_ms``
  the hold is a sizeable part of the scaled DCQCN timers and of the watchdog's polling interval.
* ``agent_reaction``: a PFC frame's arrival in the kernel to the gate command, the other part.
* ``cpu_saturated``: the longest stretch in which every core was busy; past it, none of the
  times above can be trusted to hold.

Pure: the figures come in, a verdict goes out (:func:`assess`); reading the results folder is
:mod:`testbed.analysis`'s job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Figures:
    """What a run measured, for the checks. None: not measured (the check is not made)."""

    pfc_enabled: bool
    lossless_drops: int | None = None
    hidden_loss: int | None = None
    host_loss: int | None = None  # frames the endpoints lost at their own sockets
    phantom_below_bytes: int | None = None  # largest (occupancy - phantom) seen at a resync
    buffer_exceeded_bytes: int | None = None  # largest occupancy beyond a configured buffer
    bmv2_lag_us: int | None = None
    agent_reaction_us: int | None = None
    cpu_saturated_s: float | None = None


@dataclass(frozen=True)
class Budgets:
    """What the emulation's guarantees allow."""

    headroom_bytes: int  # the smallest lossless headroom of any port
    reaction_us: int  # qos.pfc.reaction_ms
    bmv2_lag_us: int  # fidelity.bmv2_lag_ms
    cpu_saturated_s: float  # fidelity.cpu_saturated_s


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    value: float | int
    limit: float | int
    reason: str  # said when not ok


def checks(fig: Figures, budget: Budgets) -> list[Check]:
    """Every check whose figure was measured."""
    out: list[Check] = []

    def add(name: str, value: float | int | None, limit: float | int, reason: str) -> None:
        if value is not None:
            out.append(Check(name, value <= limit, value, limit, reason.format(v=value,
                                                                           lim=limit)))

    if fig.pfc_enabled:
        add("lossless_drops", fig.lossless_drops, 0,
            "{v} packets dropped in a lossless class while PFC was on")
    add("hidden_loss", fig.hidden_loss, 0,
        "{v} frames lost in front of BMv2 (a veth received them, the P4 program never saw "
        "them): the switches could not keep up with the offered packets")
    add("host_loss", fig.host_loss, 0,
        "{v} frames lost at the hosts' own sockets (an endpoint did not keep up: its receive "
        "buffer overflowed or the kernel refused a send), as a NIC's buffers would overflow")
    if fig.pfc_enabled:
        add("buffer_exceeded", fig.buffer_exceeded_bytes, 0,
            "a lossless queue held {v} bytes beyond its buffer (xoff + headroom per ingress "
            "port): a real switch with this headroom would have dropped them; the emulation's "
            "slack (qos.pfc.emulation_slack_ms) absorbed what its own delays let in")
        add("phantom_below", fig.phantom_below_bytes, budget.headroom_bytes,
            "the P4 phantom queue stood {v} bytes below the real occupancy, more than the "
            "{lim}-byte headroom covers")
        add("bmv2_lag", fig.bmv2_lag_us, budget.bmv2_lag_us,
            "BMv2 held a lossless packet {v} us, beyond {lim} us (fidelity.bmv2_lag_ms): the "
            "switches did not keep the protocol's time")
        add("agent_reaction", fig.agent_reaction_us, budget.reaction_us,
            "a switch agent took {v} us to apply a PFC pause, beyond the {lim} us reaction "
            "time the headroom is sized for (qos.pfc.reaction_ms)")
    add("cpu_saturated", fig.cpu_saturated_s, budget.cpu_saturated_s,
        "every CPU core was busy for {v} s at a stretch (limit {lim} s, "
        "fidelity.cpu_saturated_s): timings were not the emulation's own")
    return out


def assess(fig: Figures, budget: Budgets) -> dict:
    """The summary's ``fidelity`` section: ``ok``, the reasons when not, and every check."""
    cs = checks(fig, budget)
    return {"ok": all(c.ok for c in cs),
            "reasons": [c.reason for c in cs if not c.ok],
            "checks": [asdict(c) for c in cs]}


def lines(section: dict | None) -> list[str]:
    """The fidelity section in words, for the CLI and report.md."""
    if not section:
        return []
    if section["ok"]:
        names = ", ".join(c["name"] for c in section["checks"])
        return [f"FIDELITY OK: the emulation kept up ({names})"]
    return ["FIDELITY NOT OK: this run's results are not a faithful emulation:",
            *(f"  - {r}" for r in section["reasons"])]


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
