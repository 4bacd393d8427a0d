"""Which switch queues the P4 program keeps a phantom of, and which the switch agent resyncs.

A port serves its classes in strict priority (testbed.machine.ports: a higher class first), so
a lossless class drains with what the classes above it leave, and its phantom can only follow
that if those classes keep phantoms too (p4/lossless.p4, drain_under). Pure: read by the QoS
config's validation, the control plane's table entries, the agents' config and the pre-run
warning, so that they agree.
"""

from __future__ import annotations

from typing import Protocol

#: A queue's phantom and the three classes above it that the P4 program's shared actions bring
#: up to date (admit_shared: above, above2, above3): the most phantoms a lossless class and
#: the classes above it may have on one port for its drain to be exact.
MAX_PHANTOM_LEVELS = 4


class _Qos(Protocol):
    pfc_enable: list[int]
    ecn: dict
    dscp_to_tc_map: dict[int, int]
    cnp_dscp: int
    default_tc: int


def phantom_classes(qos: _Qos) -> frozenset[int]:
    """The classes whose queues the P4 program keeps a phantom of: those it marks (ECN) or
    pauses (PFC), and every class above the lowest lossless one that data can reach (the DSCP
    map's classes and the default class). A class that only CNPs reach is left out: CNPs are
    small and the NIC sends at most one per flow per interval (DCQCN's
    min_time_between_cnps), a few per cent of a port at most."""
    marked = set(qos.ecn) | set(qos.pfc_enable)
    if not qos.pfc_enable:
        return frozenset(marked)
    data = {tc for dscp, tc in qos.dscp_to_tc_map.items() if dscp != qos.cnp_dscp}
    lowest = min(qos.pfc_enable)
    return frozenset(marked | {tc for tc in data | {qos.default_tc} if tc > lowest})


def resynced_classes(qos: _Qos) -> list[int]:
    """The classes whose phantoms the switch agent resyncs from the kernel: the lossless ones
    and the classes with a phantom above them, whose errors would pass into theirs."""
    if not qos.pfc_enable:
        return []
    lowest = min(qos.pfc_enable)
    return sorted(tc for tc in phantom_classes(qos) if tc >= lowest)


def too_many_levels(qos: _Qos) -> str | None:
    """Why the lowest lossless class's drain cannot be exact, or None: more phantoms at or
    above it than the P4 program brings up to date."""
    levels = resynced_classes(qos)
    if len(levels) <= MAX_PHANTOM_LEVELS:
        return None
    return (f"classes {levels} keep phantoms at or above lossless class {levels[0]} on each "
            f"port, more than the {MAX_PHANTOM_LEVELS} the P4 program follows in strict "
            "priority: make fewer classes lossless, mark fewer with ECN, or map no data DSCP "
            "above them in qos.dscp_to_tc_map")
