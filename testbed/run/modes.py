"""Fabric modes: one word for how the fabric keeps (or does not keep) a class lossless, set
beside the same fabric, buffers and ECMP (a scenario's ``mode:``), so that a sweep over it
compares them on one workload.

* ``roce-lossless``: PFC on the RoCE class, ECN marking and DCQCN at the hosts: RoCEv2 as
  deployed for AI training (the defaults).
* ``roce-lossy``: no PFC; ECN and DCQCN as the file says (on by default, or ``ecn: {}`` and
  ``endpoints: {dcqcn: false}`` for nothing): Go-Back-N recovers what the queues drop.

``tcp`` (the hosts' kernel TCP through the same fabric) and ``ib-credit`` (InfiniBand's credit
flow control) are named, and refused until they exist. A mode fills in what it implies where
the file is silent, and refuses what the file says against it, in one line naming the field.
Pure: a scenario's data in, the data to parse out.
"""

from __future__ import annotations

import copy
from typing import Any

#: The modes a scenario can run in.
MODES = ("roce-lossless", "roce-lossy")
#: Modes with a name but not built: why, for the refusal.
NOT_BUILT = {
    "tcp": "the hosts' kernel TCP over the fabric is not built yet",
    "ib-credit": "InfiniBand-style credit flow control is not built yet",
}


def apply_mode(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The scenario's data with its mode's settings filled in, and what contradicts it."""
    mode = data.get("mode")
    if mode is None:
        return data, []
    if mode in NOT_BUILT:
        return data, [f"mode: {mode}: {NOT_BUILT[mode]}; use {' or '.join(MODES)}"]
    if mode not in MODES:
        return data, [f"mode: {mode!r} is not a fabric mode; use {' or '.join(MODES)}"]
    out = copy.deepcopy(data)
    qos = out.setdefault("qos", {}) if isinstance(out.get("qos", {}), dict) else None
    if qos is None:
        return data, []  # not a mapping: the config's own validation says so
    endpoints = out.get("endpoints") if isinstance(out.get("endpoints"), dict) else {}
    problems = []
    if mode == "roce-lossless":
        if qos.get("pfc_enable") == []:
            problems.append("qos.pfc_enable: [] turns PFC off, against mode roce-lossless; "
                            "name the lossless classes, or use mode roce-lossy")
        if qos.get("ecn") == {}:
            problems.append("qos.ecn: {} turns ECN marking off, against mode roce-lossless "
                            "(PFC + ECN + DCQCN); leave it out or mark the lossless class")
        if endpoints.get("dcqcn") is False:
            problems.append("endpoints.dcqcn: false, against mode roce-lossless (PFC + ECN + "
                            "DCQCN); leave the mode out to run PFC alone")
    else:
        if qos.get("pfc_enable"):
            problems.append(f"qos.pfc_enable: {qos['pfc_enable']} turns PFC on, against mode "
                            "roce-lossy; leave it out (the mode turns PFC off) or use "
                            "mode roce-lossless")
        qos.setdefault("pfc_enable", [])
    return out, problems
