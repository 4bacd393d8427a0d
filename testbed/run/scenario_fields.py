"""Checks a scenario's parts share (flows, collectives, background): a start inside the run,
and a class the hosts can mark. Each returns one line naming the field and the fix, or None."""

from __future__ import annotations

from typing import Any

from testbed.config.models import FabricConfig


def past_end(field_: str, start_s: float, extras: Any) -> str | None:
    """A start at or after the run's end, in one line (None: inside the run)."""
    if start_s < extras.duration_s:
        return None
    return f"{field_}: {start_s} is past the end (duration_s {extras.duration_s})"


def class_problem(cfg: FabricConfig, field_: str, tc: int | None) -> str | None:
    """A class no DSCP reaches, with a mapping that would reach it (None: the hosts can send
    in it, or no class was given)."""
    dscps = cfg.qos.tc_to_dscp()
    if tc is None or tc in dscps:
        return None
    mapped = cfg.qos.dscp_to_tc_map
    free = tc << 3 if tc << 3 not in mapped else min(set(range(64)) - set(mapped),
                                                     default=tc << 3)
    return (f"{field_}: no DSCP reaches class {tc} (qos.dscp_to_tc_map {mapped}, "
            f"default_tc {cfg.qos.default_tc}), so the hosts cannot send in it: map one, "
            f"e.g. qos.dscp_to_tc_map: {{{free}: {tc}}}, or use a class that has one "
            f"({', '.join(map(str, sorted(dscps)))})")
