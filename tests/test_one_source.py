"""One source of truth: a setting the user wrote reaches every part that must obey it (the
switches' classifier, the kernel ports, the hosts, the agents), with no copy of its own."""

from __future__ import annotations

import re
import shutil
import socket
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.config.constants import THRESHOLD_NEVER
from testbed.config.models import (
    DEFAULT_LINK_MBPS,
    PFC_PORT_BITMAP_BITS,
    FabricConfig,
    PfcWatchdogConfig,
    QosConfig,
)
from testbed.topology.graph import build_topology
from testbed.topology.qos import (
    endpoint_args,
    gate_leak_bytes,
    max_frame_bytes,
    port_specs,
    queue_profiles,
    required_headroom,
    roce_frame_bytes,
    roce_mtu,
)
from testbed.topology.validate import parse_config
from traffic.endpoint import Endpoint, build_parser, config_from_args
from traffic.packets import CNP, ECN_CE, parse_roce

REPO = Path(__file__).resolve().parent.parent
HAND = ["--intf", "eth0", "--mac", "02:00:0a:00:01:01", "--ip", "10.0.1.1",
        "--next-hop-mac", "02:4c:00:01:00:01", "--control", "/nonexistent/h1.ep",
        "--out", "/nonexistent"]


# -- DSCP and CNPs ------------------------------------------------------------------------------

@pytest.mark.parametrize(("qos", "expected"), [
    ({}, {0: 0, 3: 26, 6: 48}),
    ({"dscp_to_tc_map": {24: 3, 48: 6}}, {0: 0, 3: 24, 6: 48}),
    ({"dscp_to_tc_map": {24: 3, 26: 3, 30: 3, 48: 6}}, {0: 0, 3: 26, 6: 48}),
    ({"dscp_to_tc_map": {10: 2, 12: 2}}, {0: 0, 2: 10}),       # no 16: the lowest
    ({"dscp_to_tc_map": {18: 2, 16: 2}}, {0: 0, 2: 16}),       # the class selector
    ({"dscp_to_tc_map": {24: 3, 48: 6}, "default_tc": 1,        # any unmapped DSCP reaches 1
      "pfc_enable": [3]}, {1: 8, 3: 24, 6: 48}),
])
def test_hosts_mark_each_class_with_a_dscp_that_lands_in_it(qos: dict, expected: dict) -> None:
    q = QosConfig.model_validate(qos)
    table = q.tc_to_dscp()
    assert table == expected
    for tc, dscp in table.items():  # as the switches classify it (P4 table and port filters)
        assert q.dscp_to_tc_map.get(dscp, q.default_tc) == tc


def test_cnp_class_follows_the_configured_dscp() -> None:
    q = QosConfig.model_validate({"cnp_dscp": 46, "dscp_to_tc_map": {26: 3, 46: 5}})
    assert q.cnp_tc == 5
    assert QosConfig().cnp_dscp == 48 and QosConfig().cnp_tc == 6


def quiet_endpoint(monkeypatch, tmp_path: Path, args: list[str]) -> Endpoint:
    """An Endpoint from a command line, without its sockets (no namespace or root needed)."""
    monkeypatch.setattr(Endpoint, "_open_sockets", lambda self: None)
    cfg = config_from_args(build_parser().parse_args(args))
    cfg.out_dir = tmp_path
    return Endpoint(cfg)


def test_a_remapped_class_is_sent_with_its_dscp_and_cnps_with_theirs(monkeypatch,
                                                                      tmp_path: Path) -> None:
    """dscp_to_tc_map {24: 3}: a class-3 QP sends DSCP 24 (was 26, which the fabric put in
    default_tc), its ACKs too; CNPs go with qos.cnp_dscp and wait on the CNP class's pause."""
    cfg = parse_config({"qos": {"dscp_to_tc_map": {24: 3, 46: 5}, "cnp_dscp": 46}})
    ep = quiet_endpoint(monkeypatch, tmp_path, [*HAND, *endpoint_args(cfg)])
    sent: list[tuple[int, bytes]] = []
    monkeypatch.setattr(ep, "_send_ctrl", lambda tc, frame, now: sent.append((tc, frame)))
    try:
        req = ep.create_qp(1, "requester", "10.0.1.1", 2, tc=3)
        resp = ep.create_qp(2, "responder", "10.0.1.1", 1, tc=3)
        req.requester.post("write", 100, 0.0)
        p = parse_roce(req.requester.next_frame(0.0)[0])
        assert p is not None
        p.ecn = ECN_CE
        ep._deliver(resp, p, 1.0)
    finally:
        ep._qp_csv.close()
        ep._msg_csv.close()
    assert req.requester.builder.dscp == 24
    (ack_tc, ack), (cnp_tc, cnp) = sent
    assert (ack_tc, ack[15] >> 2) == (3, 24)
    assert parse_roce(cnp).opcode == CNP and (cnp_tc, cnp[15] >> 2) == (5, 46)
    with pytest.raises(ValueError, match="class 4 has no DSCP"):
        ep.create_qp(3, "requester", "10.0.1.1", 4, tc=4)


def test_fabric_starts_each_endpoint_with_the_fabric_settings(tmp_path: Path) -> None:
    """The command line the endpoint pool builds, read by the endpoint's own parser."""
    from testbed.fabric.endpoints import EndpointPool

    cfg = parse_config({"fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "mtu": 1500},
                        "qos": {"dscp_to_tc_map": {24: 3, 48: 6}}})
    got: dict[str, object] = {}
    listeners = []
    run = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: unix socket paths

    def popen(cmd, **_kw):
        a = build_parser().parse_args(cmd[3:])
        got[a.ip] = config_from_args(a)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(a.control))
        s.listen(1)
        listeners.append(s)
        return SimpleNamespace(pid=0)

    state = SimpleNamespace(add_process=lambda *_: None, files=[], save=lambda: None)
    pool = EndpointPool(cfg, build_topology(cfg), run, tmp_path, state, t0=0.0)
    net = SimpleNamespace(get=lambda _name: SimpleNamespace(popen=popen))
    try:
        clients = pool.start(net, ["--no-dcqcn"])
        for c in clients.values():
            c.close()
    finally:
        for s in listeners:
            s.close()
        shutil.rmtree(run, ignore_errors=True)
    assert set(got) == {"10.0.1.1", "10.0.2.1"}
    for ep_cfg in got.values():
        assert ep_cfg.tc_to_dscp == {0: 0, 3: 24, 6: 48}
        assert ep_cfg.mtu == 1024  # a 1500-byte interface: was 4096, which never fit
        assert (ep_cfg.cnp_dscp, ep_cfg.cnp_tc) == (48, 6)
        assert ep_cfg.dcqcn_enabled is False  # the caller's arguments still apply


# -- MTU ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mtu", "expected"), [
    (9000, 4096), (4156, 4096), (4155, 2048), (2108, 2048), (2107, 1024), (1500, 1024)])
def test_roce_mtu_is_the_largest_that_fits_the_interface(mtu: int, expected: int) -> None:
    assert roce_mtu(mtu) == expected
    # the largest data frame (with RETH) fits: at most MTU + the Ethernet header on the wire
    assert roce_frame_bytes(mtu) <= max_frame_bytes(mtu)


def test_headroom_and_thresholds_follow_the_mtu() -> None:
    q = QosConfig()
    # the default MTU keeps the numbers the fabric always had
    assert roce_frame_bytes() == 4170 and gate_leak_bytes() == 9014
    assert required_headroom(q, 10.0) == 42354
    small = required_headroom(q, 10.0, mtu=1500)
    assert small == 2 * 1098 + 25_000 + 1600  # two 1 KB RoCE frames, a 1600 B tbf burst
    assert queue_profiles(q, 10.0, mtu=1500)[3].xoff == 42000 + 2 * 1098
    small = required_headroom(q, DEFAULT_LINK_MBPS, mtu=1500)  # at the fabric's own rate
    cfg = parse_config({"fabric": {"mtu": 1500}, "qos": {"pfc": {"headroom_bytes": small}}})
    assert cfg.qos.pfc.headroom_bytes == small  # enough at this MTU (not at 9000)


def test_switch_and_kernel_thresholds_use_the_fabric_mtu() -> None:
    """The P4 queue profiles and the kernel buffers both come from the fabric's MTU."""
    from testbed.control.entries import lossless_entries

    cfg = parse_config({"fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "mtu": 1500}})
    topo = build_topology(cfg)

    class Recorder:
        def action(self, name: str, **params: int) -> tuple:
            return name, params

        def entry(self, _table: str, keys: dict, action: tuple) -> tuple:
            return keys, action

        def __getattr__(self, _name: str):
            return lambda *_a, **_k: None

    xoffs = {params["xoff"] for _keys, (name, params) in
             (e for e in lossless_entries(Recorder(), topo.leaves[0], cfg) if e)
             if name.endswith(".admit") and params["xoff"] != THRESHOLD_NEVER}
    rate = cfg.fabric.host_link_mbps  # the default, the same on the fabric links
    assert xoffs == {queue_profiles(cfg.qos, rate, mtu=1500)[3].xoff}
    assert xoffs != {queue_profiles(cfg.qos, rate)[3].xoff}

    specs = port_specs(cfg, topo, "leaf1")
    assert {s.max_frame for s in specs} == {1514}
    # the kernel holds the lossless buffer plus the emulation's slack (2 ports: fan-in 1)
    lossless = queue_profiles(cfg.qos, rate, fan_in=1, mtu=1500)[3].kernel_limit
    assert {s.buffers[3] for s in specs} == {lossless}


# -- the P4 program's limits and the agent's defaults -----------------------------------------

def test_the_paused_ports_bitmap_width_is_the_p4_programs() -> None:
    p4 = (REPO / "p4" / "lossless.p4").read_text() + (REPO / "p4" / "headers.p4").read_text()
    assert re.search(rf"register<bit<{PFC_PORT_BITMAP_BITS}>>\(PORT_TC_CELLS\) paused_by;", p4)
    assert re.search(rf"bit<{PFC_PORT_BITMAP_BITS}>\s+pfc_ports;", p4)


def test_pfc_port_limit_is_at_the_last_bit() -> None:
    parse_config({"fabric": {"spines": 2, "hosts_per_leaf": 61}})  # 63 ports: bit 63
    parse_config({"fabric": {"leaves": 70}, "qos": {"pfc_enable": [], "ecn": {}}})  # lossy


def test_agent_watchdog_action_default_is_the_configs() -> None:
    """The agent's watchdog is PfcWatchdog.from_agent(its config's watchdog, ...); the agent
    itself is tested in tests/test_pfcwd.py."""
    from testbed.agent.pfcwd import PfcWatchdog

    assert PfcWatchdog.from_agent({"enabled": True}, [1], [3]).action == \
        PfcWatchdogConfig().action == "drop"
    assert PfcWatchdog.from_agent({"enabled": True, "action": "alert"}, [1], [3]).action == \
        "alert"


def test_fabric_config_models_check_rules_across_sections() -> None:
    """Rules across fields hold for configs built in code too, not only for files."""
    with pytest.raises(ValueError, match="carries CNPs"):
        FabricConfig.model_validate({"qos": {"default_tc": 3, "dscp_to_tc_map": {26: 3}}})
    with pytest.raises(ValueError, match="at most 63"):
        FabricConfig.model_validate({"fabric": {"leaves": 64}})


def test_the_agent_settings_reach_each_switch_agent(tmp_path: Path) -> None:
    """agent.tick_period_ms, sample_period_ms, resync_period_ms, nice and realtime_priority, as
    each agent's config file carries them (the agent reads nothing else)."""
    import json

    from testbed.agent.config import AgentConfig
    from testbed.fabric.agents import AgentPool
    from testbed.machine.state import RunState

    cfg = FabricConfig.model_validate({"agent": {"tick_period_ms": 5, "sample_period_ms": 200,
                                                 "resync_period_ms": 20, "nice": -5,
                                                 "realtime_priority": 7}})
    pool = AgentPool(cfg, build_topology(cfg), tmp_path, tmp_path, RunState("t"), 0.0)
    path = tmp_path / "leaf1.agent.json"
    path.write_text(json.dumps(pool.config("leaf1")))
    agent = AgentConfig.load(path)
    assert (agent.tick_period_s, agent.sample_period_s, agent.resync_period_s, agent.nice,
            agent.realtime_priority) == (0.005, 0.2, 0.02, -5, 7)
