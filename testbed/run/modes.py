"""Fabric modes: one word for how the fabric keeps (or does not keep) a class lossless, set
beside the same fabric, buffers and ECMP (a scenario's ``mode:``), so that a sweep over it
compares them on one workload.

* ``roce-lossless``: PFC on the RoCE class, ECN marking and DCQCN at the hosts: RoCEv2 as
  deployed for AI training (the defaults).
* ``roce-lossy``: no PFC; ECN and DCQCN as the file says (on by default, or ``ecn: {}`` and
  ``endpoints: {dcqcn: false}`` for nothing): Go-Back-N recovers what the queues drop.
* ``tcp``: the flows (and collectives) over the hosts' kernel TCP instead of RoCE QPs
  (:mod:`traffic.tcp_endpoint`), in a lossy class (no PFC), with the kernel's congestion control
  (``endpoints.tcp_congestion``, cubic) and RFC 3168 ECN against the switches' marking.

``ib-credit`` (InfiniBand's credit flow control) is named, and refused until it exists. A mode
fills in what it implies where the file is silent, and refuses what the file says against it,
in one line naming the field.
Pure: a scenario's data in, the data to parse out.
"""

from __future__ import annotations

import copy
from typing import Any

from traffic.wire import LOCAL_ACK_TIMEOUT, RETRY_COUNT

#: The modes a scenario can run in.
MODES = ("roce-lossless", "roce-lossy", "tcp", "ib-credit")
#: Modes with a name but not built: why, for the refusal.
NOT_BUILT: dict[str, str] = {}
#: What a RoCE QP has and a TCP connection has not: refused in mode tcp.
ROCE_ONLY_ENDPOINT = {"local_ack_timeout": LOCAL_ACK_TIMEOUT, "retry_count": RETRY_COUNT,
                      "dcqcn_profile": None}  # each with the value it has when left out
ROCE_ONLY_FLOW = ("udp_sport", "ack_tc")


def apply_mode(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The scenario's data with its mode's settings filled in, and what contradicts it."""
    mode = data.get("mode")
    qos_in = data.get("qos") if isinstance(data.get("qos"), dict) else {}
    if mode != "ib-credit" and qos_in.get("credit_enable"):
        return data, [f"qos.credit_enable: {qos_in['credit_enable']} is mode ib-credit's: "
                      "write mode: ib-credit (it sets the credited classes), not the field"]
    if mode is None:
        ep = data.get("endpoints")
        if isinstance(ep, dict) and ep.get("transport") == "tcp":
            return data, ["endpoints.transport: tcp is what mode tcp sets, with what it "
                          "implies (no PFC, no DCQCN): write mode: tcp instead"]
        return data, []
    if mode in NOT_BUILT:
        built = [m for m in MODES if m not in NOT_BUILT]
        return data, [f"mode: {mode}: {NOT_BUILT[mode]}; use {' or '.join(built)}"]
    if mode not in MODES:
        return data, [f"mode: {mode!r} is not a fabric mode; use {' or '.join(MODES)}"]
    out = copy.deepcopy(data)
    qos = out.setdefault("qos", {}) if isinstance(out.get("qos", {}), dict) else None
    if qos is None:
        return data, []  # not a mapping: the config's own validation says so
    endpoints = out.get("endpoints") if isinstance(out.get("endpoints"), dict) else {}
    problems = []
    transport = "tcp" if mode == "tcp" else "roce"
    if endpoints.get("transport", transport) != transport:
        problems.append(f"endpoints.transport: {endpoints['transport']}, against mode {mode}; "
                        "the mode sets it: leave it out")
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
                            f"{mode}; leave it out (the mode turns PFC off) or use "
                            "mode roce-lossless")
        qos.setdefault("pfc_enable", [])
    if mode == "ib-credit":
        problems += _credit_problems(qos)
    if mode == "tcp":
        problems += _tcp_problems(out, endpoints)
        out["endpoints"] = {**endpoints, "transport": "tcp", "dcqcn": False}
    return out, problems


def _tcp_problems(data: dict[str, Any], endpoints: dict[str, Any]) -> list[str]:
    """What a scenario in mode tcp asks of RoCE: its NIC's DCQCN, timers and faults, its
    QPs' UDP ports and ACK classes."""
    problems = []
    if endpoints.get("dcqcn") is True:
        problems.append("endpoints.dcqcn: true, against mode tcp (TCP's own congestion "
                        "control: endpoints.tcp_congestion); leave it out")
    problems += [f"endpoints.{k}: a RoCE QP's setting; TCP has its own in mode tcp: leave it "
                 "out" for k, default in ROCE_ONLY_ENDPOINT.items()
                 if endpoints.get(k, default) != default]
    flows = data.get("flows") if isinstance(data.get("flows"), list) else []
    problems += [f"flows.{i}.{k}: a RoCE QP's setting, none in mode tcp: leave it out"
                 for i, f in enumerate(flows) if isinstance(f, dict)
                 for k in ROCE_ONLY_FLOW if f.get(k) is not None]
    faults = data.get("faults") if isinstance(data.get("faults"), list) else []
    problems += [f"faults.{i}.mode: {f['mode']} is a RoCE NIC's fault, none in mode tcp"
                 for i, f in enumerate(faults) if isinstance(f, dict)
                 and f.get("mode") not in (None, "none")]
    return problems


def _credit_problems(qos: dict[str, Any]) -> list[str]:
    """Mode ib-credit: the classes PFC would keep lossless are credited instead (the RoCE
    class, or the profile's lossless classes); a credited class is written by the mode."""
    from testbed.config.models import QOS_PROFILES

    profile = QOS_PROFILES.get(qos.get("profile"), {}) if isinstance(qos.get("profile"),
                                                                     str) else {}
    credited = list(profile.get("pfc_enable", [3]))
    # a run's record holds what the mode filled in: the same again is no contradiction
    if "credit_enable" in qos and qos["credit_enable"] != credited:
        return [f"qos.credit_enable: {qos['credit_enable']}: mode ib-credit sets it (the "
                "classes qos.pfc_enable would have made lossless): leave it out"]
    qos["credit_enable"] = credited
    return []
