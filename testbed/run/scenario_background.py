"""A scenario's best-effort background flows (traffic.background), checked against its fabric
and its other flows: each mistake one line naming the field and the fix.

A background flow is UDP from a host's kernel, paced by its own process, beside the host's RoCE
endpoint, which paces its own frames: nothing shares the NIC's line rate between the two, as a
real NIC's scheduler would. So a host sends background or RoCE, not both, and its background
flows together stay within its line rate; otherwise the emulated link would carry more than a
real one can.
"""

from __future__ import annotations

from typing import Any

from testbed.config.models import FabricConfig
from testbed.run.scenario_fields import class_problem, past_end
from testbed.topology.graph import Topology
from traffic.background import largest_frame, offered_mbps


def background_problems(cfg: FabricConfig, extras: Any,
                         topo: Topology) -> list[str]:
    """Hosts that exist, a class the hosts can mark and that is lossy (background obeys no
    pause, so in a lossless class it would break the class's promise), frames the MTU carries."""
    problems, names = [], [b.name for b in extras.background]
    hosts = {h.name for h in topo.hosts}
    largest = largest_frame(topo.mtu)
    for i, b in enumerate(extras.background):
        problems += [f"background.{i}.{role}: unknown host {getattr(b, role)!r}"
                     for role in ("src", "dst") if getattr(b, role) not in hosts]
        if b.tc in cfg.qos.pfc_enable:
            problems.append(f"background.{i}.tc: class {b.tc} is lossless (qos.pfc_enable) and "
                            "background traffic obeys no pause; use a lossy class, e.g. 0")
        if b.frame_bytes is not None and b.frame_bytes > largest:
            problems.append(f"background.{i}.frame_bytes: {b.frame_bytes} is over the largest "
                            f"frame fabric.mtu {topo.mtu} carries ({largest}); use at most that")
        if names.count(b.name) > 1:
            problems.append(f"background.{i}.name: {b.name!r} is given twice")
        problems += [m for m in (past_end(f"background.{i}.start_s", b.start_s, extras),
                                 class_problem(cfg, f"background.{i}.tc", b.tc)) if m]
    return problems


def shared_sources(extras: Any, topo: Topology) -> list[str]:
    """A host that sends background beside RoCE flows (its collectives' included), or more
    background than its line rate: the two would not share the NIC (the module's docstring)."""
    problems = []
    roce = {f.src: f.name for f in extras.flows}
    total: dict[str, float] = {}
    for i, b in enumerate(extras.background):
        if b.src in roce:
            problems.append(f"background.{i}.src: {b.src} also sends flow {roce[b.src]!r}; its "
                            "RoCE endpoint and the kernel's UDP would each send at their own "
                            "rate, more than the link carries: send background from another "
                            "host")
        line = topo.host(b.src).rate_mbps
        total[b.src] = total.get(b.src, 0.0) + offered_mbps(b, line)
        if total[b.src] > line + 1e-9:
            problems.append(f"background.{i}.rate_mbps: {b.src}'s background comes to "
                            f"{total[b.src]:g} Mbit/s, over its {line:g} Mbit/s line rate; "
                            "lower rate_mbps (unset: the whole line rate)")
    return problems
