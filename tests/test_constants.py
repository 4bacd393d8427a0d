"""One definition per fact: testbed.config.constants and traffic.wire against the P4 program's
own definitions (p4/headers.p4), the compiled P4Info's array sizes, the header layouts the agent
and the hosts pack, and what docs/RESULTS.md says of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import testbed.config.constants as C
import traffic.wire as W
from testbed.agent import tick_frame
from testbed.fabric.measure import CELLS_PER_PORT
from testbed.machine.ports import PortSpec, class_handle, gate_handle, scheduler_commands
from testbed.machine.tcstats import QdiscReader
from traffic.packets import pfc_frame

REPO = Path(__file__).resolve().parent.parent
HEADERS = (REPO / "p4" / "headers.p4").read_text()

#: p4/headers.p4's name of each fact -> its name in traffic.wire or testbed.config.constants.
P4_TO_PYTHON = {
    "ETHERTYPE_IPV4": "ETH_P_IP",
    "ETHERTYPE_MAC_CONTROL": "ETH_P_MAC_CONTROL",
    "MAC_CONTROL_PFC": "MAC_CONTROL_PFC",
    "IP_PROTO_UDP": "IP_PROTO_UDP",
    "UDP_PORT_ROCEV2": "ROCEV2_UDP_PORT",
    "ETHERTYPE_TICK": "ETH_P_TICK",
    "ETHERTYPE_KICK": "ETH_P_KICK",
    "ETHERTYPE_CREDIT": "ETH_P_CREDIT",
    "INPUT_MAC_SHIFT": "INPUT_MAC_SHIFT",
    "PFC_DST_MAC": "PFC_DST_MAC",
    "PFC_MCAST_GROUP": "PFC_MCAST_GROUP",
    "AGENT_PORT": "AGENT_PORT",
    "TICK_TIMER_ONLY": "TICK_TIMER_ONLY",
    "TICK_SENT_UNKNOWN": "TICK_SENT_UNKNOWN",
    "THRESHOLD_NEVER": "THRESHOLD_NEVER",
    "NUM_TCS": "NUM_TCS",
    "NUM_PORTS": "NUM_PORTS",
    "PORT_TC_CELLS": "PORT_TC_CELLS",
    "EMPTY_CELL": "EMPTY_CELL",
    "NUM_DROP_REASONS": "NUM_DROP_REASONS",
    "DROP_CELLS": "DROP_CELLS",
}
#: Constants only the P4 program uses (its own metadata codes and BMv2's instance types).
P4_ONLY = {"PKT_INSTANCE_TYPE_INGRESS_CLONE", "PKT_INSTANCE_TYPE_REPLICATION", "FL_PFC",
           "LOSSLESS_NONE", "LOSSLESS_PFC", "LOSSLESS_TICK", "LOSSLESS_DATA",
           "IP_PROTO_TCP"}  # the hash reads TCP ports; Python sends TCP through sockets


def p4_constants() -> dict[str, tuple[int | None, int]]:
    """Every ``const bit<W> NAME = V;`` and numeric ``#define NAME V``: name -> (W, V)."""
    out: dict[str, tuple[int | None, int]] = {}
    for width, name, value in re.findall(r"^const\s+bit<(\d+)>\s+(\w+)\s*=\s*(\w+)\s*;",
                                         HEADERS, re.M):
        out[name] = (int(width), int(value, 0))
    for name, value in re.findall(r"^#define\s+(\w+)\s+(\d\w*)\s*$", HEADERS, re.M):
        out[name] = (None, int(value, 0))
    return out


def python_value(name: str) -> int:
    """The Python definition of a fact: the wire's (traffic.wire) or the testbed's own."""
    v = getattr(W, name) if hasattr(W, name) else getattr(C, name)
    return int(v.replace(":", ""), 16) if isinstance(v, str) else v


def test_every_p4_constant_is_python_s_or_the_program_s_own() -> None:
    consts = p4_constants()
    assert "NUM_TCS" in consts and "DROP_CELLS" in consts  # the parser found them
    drops = {n for n in consts if n.startswith("DROP_") and n != "DROP_CELLS"}
    unknown = set(consts) - set(P4_TO_PYTHON) - P4_ONLY - drops
    assert not unknown, ("decide where these belong (testbed.config.constants or P4_ONLY): "
                         f"{unknown}")
    for p4_name, (width, value) in consts.items():
        if p4_name in P4_ONLY:
            continue
        py = P4_TO_PYTHON.get(p4_name, p4_name)
        assert python_value(py) == value, (p4_name, value, python_value(py))
        if width is not None:
            assert value < 1 << width, p4_name


def test_drop_reasons_are_the_programs_and_documented() -> None:
    consts = p4_constants()
    p4_reasons = {v for n, (_w, v) in consts.items()
                  if n.startswith("DROP_") and n not in ("DROP_CELLS",)}
    assert set(C.DROP_REASONS) == p4_reasons
    assert all(0 < r < C.NUM_DROP_REASONS for r in C.DROP_REASONS)
    doc = " ".join((REPO / "docs" / "RESULTS.md").read_text().split())
    listed = ", ".join(f"{r} {what}" for r, what in sorted(C.DROP_REASONS.items()))
    assert f"Drop reasons in the P4 `drops` counter: {listed}." in doc


def test_array_sizes_of_the_compiled_program() -> None:
    pytest.importorskip("p4.config.v1.p4info_pb2", reason="needs the P4Runtime protobufs")
    from testbed.control.entries import load_p4info

    info = load_p4info()
    sizes = {c.preamble.name: c.size for c in info.counters}
    sizes |= {r.preamble.name: r.size for r in info.registers}
    assert C.PORT_TC_CELLS == C.NUM_PORTS * W.NUM_TCS
    assert C.DROP_CELLS == C.NUM_PORTS * C.NUM_DROP_REASONS
    for name in ("RoceIngress.drops", "RoceIngress.rx_port", "RoceEgress.tx_port",
                 "RoceIngress.rx_port_tc", "RoceEgress.tx_port_tc", "RoceIngress.pfc_rx",
                 "RoceEgress.pfc_egress.pfc_tx", "RoceIngress.lossless.ecn_marked"):
        assert sizes[name] == C.NUM_PORTS * CELLS_PER_PORT.get(name, W.NUM_TCS), name
    assert sizes["RoceIngress.drops"] == C.DROP_CELLS
    # what the agent reads and writes, one cell per (port, class)
    for name in ("drift", "held", "below_max", "occupancy_max", "pfc_ignored", "paused_until"):
        assert sizes[name] == C.PORT_TC_CELLS, name
    assert sizes["bmv2_lag_max"] == 1
    per_cell = {C.NUM_PORTS, C.PORT_TC_CELLS, C.DROP_CELLS, 1}
    odd = {n: s for n, s in sizes.items() if s not in per_cell}
    assert not odd, f"arrays of a size testbed.config.constants does not know: {odd}"


def parse_as(header: str, frame: bytes) -> dict[str, int]:
    """A frame's fields after the Ethernet header, as the P4 parser extracts ``header``."""
    body = re.search(rf"header\s+{header}\s*{{(.*?)}}", HEADERS, re.S)
    assert body, header
    bits = int.from_bytes(frame[14:], "big")
    left = 8 * len(frame[14:])
    out = {}
    for width, name in re.findall(r"bit<(\d+)>\s+(\w+)\s*;", body.group(1)):
        left -= int(width)
        out[name] = bits >> left & ((1 << int(width)) - 1)
    return out


def test_the_agents_tick_is_the_programs_tick_h() -> None:
    f = tick_frame("02:00:00:00:00:fe", 0x1A3, 5, 0xAABBCCDD, 0x01020304)
    assert f[12:14] == C.ETH_P_TICK.to_bytes(2, "big")
    assert parse_as("tick_h", f) == {"port": 0x1A3, "tc": 5, "backlog": 0xAABBCCDD,
                                     "sent": 0x01020304}
    timer = parse_as("tick_h", tick_frame("02:00:00:00:00:fe", 1, 3, C.TICK_TIMER_ONLY))
    assert timer["backlog"] == C.TICK_TIMER_ONLY
    # a count that happens to equal the sentinel is sent one byte off, never as "unknown"
    assert parse_as("tick_h", tick_frame("02:00:00:00:00:fe", 1, 3, 0, 0xFFFFFFFF))["sent"] \
        == C.TICK_SENT_UNKNOWN - 1


def test_a_tick_without_the_released_count_says_unknown() -> None:
    f = tick_frame("02:00:00:00:00:fe", 1, 3, 1000)
    assert parse_as("tick_h", f)["sent"] == C.TICK_SENT_UNKNOWN


def test_pfc_frames_are_the_programs_pfc_h() -> None:
    f = pfc_frame("02:00:00:00:00:01", {3: 1000, 6: 0})
    assert f[:6] == bytes.fromhex(W.PFC_DST_MAC.replace(":", ""))
    assert f[12:14] == W.ETH_P_MAC_CONTROL.to_bytes(2, "big")
    fields = parse_as("pfc_h", f)
    assert fields.pop("opcode") == W.MAC_CONTROL_PFC
    assert fields.pop("class_enable") == 1 << 3 | 1 << 6
    assert fields == {f"time{c}": 1000 if c == 3 else 0 for c in range(W.NUM_TCS)}


def test_gate_handles_are_one_base() -> None:
    assert [C.gate_class(C.gate_major(tc)) for tc in range(W.NUM_TCS)] == list(range(W.NUM_TCS))
    assert C.gate_class(C.gate_major(W.NUM_TCS)) is None and C.gate_class(1) is None
    assert list(QdiscReader.handle_majors) == [C.gate_major(tc) for tc in range(W.NUM_TCS)]
    spec = PortSpec("sw1", 10.0, (1000,) * W.NUM_TCS, ((26, 3),))
    lines = scheduler_commands(spec)
    for tc in range(W.NUM_TCS):
        assert gate_handle(tc) >> 16 == C.gate_major(tc)
        assert any(f"parent {class_handle(tc)} handle {C.gate_major(tc):x}: tbf" in ln
                   for ln in lines), tc
