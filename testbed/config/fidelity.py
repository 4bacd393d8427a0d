"""The fidelity guard's limits (``fidelity:``): when a run stops counting as a faithful
emulation. Its own module so that the config's models stay small; re-exported by
:mod:`testbed.config.models`."""

from __future__ import annotations

from pydantic import Field

from testbed.config.base import _Strict


class FidelityConfig(_Strict):
    """When a run stops counting as a faithful emulation (see testbed/analysis/fidelity.py). The PFC
    reaction budget is qos.pfc.reaction_ms and the headroom comes from qos.pfc; these are the
    limits that have no counterpart on a real switch."""

    cpu_busy_pct: float = Field(
        95.0, gt=0, le=100, description="A core counts as saturated at this busy share, "
        "sampled every 0.2 s.")
    cpu_saturated_s: float = Field(
        1.0, ge=0, description="Every core saturated for longer than this at a stretch flags "
        "the run: the switches, agents and hosts then no longer keep their own time.")
    bmv2_lag_ms: float = Field(
        50.0, gt=0, description="A switch that holds a packet longer than this (its arrival to "
        "its egress pass) flags the run. What the hold does to the buffers is judged apart "
        "(the phantom's shortfall, the buffer exceeded); this is about time: 50 ms is a quarter of "
        "the DCQCN timers at 10 Mbit/s (55 us x 4000 = 220 ms) and half the watchdog's "
        "polling interval. A real switch holds a packet for microseconds.")
    steal_note_pct: float = Field(
        5.0, ge=0, le=100, description="On a virtual machine, a share of the cores' time the "
        "hypervisor gave to others (steal, proc(5)) at or above this is said: before the "
        "flows start (measured over the bring-up) and beside the verdict (over the run). "
        "Not a check: a stolen core counts as busy, and the checks judge what it did. A "
        "real switch has no counterpart: no hypervisor shares its pipeline.")
    host_lag_pct: float = Field(
        2.0, ge=0, le=100, description="A host whose NIC stood idle for more than this share "
        "of the time it had a frame due, because its endpoint's process came late beyond what "
        "its pacers repay (5 ms), flags the run (the share is taken over at least 1 s of "
        "activity, traffic.pacing.MIN_ACTIVE_S): what it sent was set by the host's CPU (a "
        "busy core, a hypervisor's steal), not by the protocol. A real NIC's pipeline is "
        "hardware and keeps its rate.")
    cpu_budget_margin: float = Field(
        0.25, ge=0, lt=1, description="Share of the cores left for the testbed (testbed "
        "calibrate) that a run's measured load may not use: what the load model leaves out "
        "(PFC frames, the agents' work per pause, the samplers, the kernel's veths) and bursts "
        "above the mean. A run over the rest is flagged before it starts; an `auto` link rate "
        "is the highest that stays within it (docs/BUDGET.md). A real switch has no "
        "counterpart: its pipeline is hardware.")
