"""The load model (testbed/budget/load_model.py) against loads worked out by hand for shipped
scenarios.

The numbers every case shares: a 64 KB RDMA WRITE at the default MTU 9000 is 16 packets of the
RoCE MTU 4096, each with 58 bytes of headers on the wire (Ethernet 14, IPv4 20, UDP 8, BTH 12,
ICRC 4) and a RETH of 16 on the first: 65,536 + 16 x 58 + 16 = 66,480 bytes, and 2 ACKs (an ACK
request every 8th packet, the 16th being also the last). A 10 Mbit/s link carries 10e6 / 8 /
66,480 = 18.803 such messages a second: 300.84 data packets and 37.61 ACKs, 338.45 frames.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.budget.load_model import Load, message_wire, path_shares, peak_load
from testbed.budget.scenario import scenario_load
from testbed.run.scenario import load_scenario, parse_scenario

REPO = Path(__file__).resolve().parent.parent
MSGS = 10e6 / 8 / 66_480          # 64 KB messages a second on a 10 Mbit/s link
FRAMES = MSGS * (16 + 2)           # their data packets and ACKs: 338.45


def shipped(name: str) -> Load:
    sc = load_scenario(REPO / "scenarios" / f"{name}.yaml")
    return scenario_load(sc.cfg, sc.topo, sc.extras)


def test_a_message_on_the_wire() -> None:
    w = message_wire(65536, 9000)
    assert (w.packets, w.wire_bytes, w.acks) == (16, 66_480, 2)
    # 1500: RoCE MTU 1024, 64 packets, 8 ACKs; a SEND has no RETH
    assert message_wire(65536, 1500, "send") == type(w)(64, 65536 + 64 * 58, 8)
    # an ACK request every 8th packet and on the last: 9 packets ask twice
    assert message_wire(9 * 4096, 9000).acks == 2
    assert message_wire(1, 9000) == type(w)(1, 1 + 58 + 16, 1)


def test_incast_four_to_one() -> None:
    """incast.yaml: h3, h4 (leaf2) and h5, h6 (leaf3) write to h1 (leaf1), 2 QPs each, 10
    Mbit/s, no DCQCN. h1's link is the bottleneck: every QP gets an eighth of it, and the
    whole link's frames pass leaf1; each sending leaf passes its two hosts' half, and ECMP
    splits all of it evenly over the two spines."""
    load = shipped("incast")
    assert load.at_s == 0.5 and load.flows == ["s3", "s4", "s5", "s6"]
    assert load.switch_pps == pytest.approx({"spine1": FRAMES / 2, "spine2": FRAMES / 2,
                                             "leaf1": FRAMES, "leaf2": FRAMES / 2,
                                             "leaf3": FRAMES / 2}, rel=1e-6)
    assert load.host_fps == pytest.approx({"h1": FRAMES, "h2": 0, "h3": FRAMES / 4,
                                           "h4": FRAMES / 4, "h5": FRAMES / 4,
                                           "h6": FRAMES / 4}, rel=1e-6)
    assert load.passes == pytest.approx(3 * FRAMES, rel=1e-6)  # 1,015 passes a second
    assert load.flow_mbps["s3"] == pytest.approx(MSGS * 65536 * 8 / 1e6 / 4, rel=1e-6)


def test_incast_with_dcqcn_counts_the_cnps() -> None:
    """incast-dcqcn.yaml: h2, h3, h4 write to h1, 2 QPs each, ECN on class 3 and DCQCN: the six
    QPs are held back by leaf1's port to h1, so h1 sends each a CNP every notification interval,
    50 us x 4000 = 0.2 s at 10 Mbit/s: 30 CNPs a second, back to the senders."""
    load = shipped("incast-dcqcn")
    assert load.host_fps["h1"] == pytest.approx(FRAMES + 30, rel=1e-6)
    assert load.host_fps["h2"] == pytest.approx(FRAMES / 3 + 10, rel=1e-6)  # h2 is on leaf1
    assert load.switch_pps["leaf1"] == pytest.approx(FRAMES + 30, rel=1e-6)
    assert load.switch_pps["leaf2"] == pytest.approx(2 * (FRAMES / 3 + 10), rel=1e-6)


def test_deadlock_control_every_link_busy() -> None:
    """deadlock-control.yaml: four flows of 8 QPs, each host sending one and receiving one, on
    2x4x1: every flow alone on its NICs, so each runs at the line rate; each leaf passes two
    flows (one out, one in) and each spine half of the four."""
    load = shipped("deadlock-control")
    assert load.switch_pps == pytest.approx({s: 2 * FRAMES for s in (
        "spine1", "spine2", "leaf1", "leaf2", "leaf3", "leaf4")}, rel=1e-6)
    assert load.host_fps == pytest.approx({h: 2 * FRAMES for h in ("h1", "h2", "h3", "h4")},
                                          rel=1e-6)


def test_the_peak_is_when_every_flow_runs() -> None:
    """dcqcn-fairness.yaml: h2, h3, h4 join a second apart; the peak is at 2.5 s, all three,
    on one leaf (the spine passes nothing). DCQCN and ECN: 3 QPs x 5 CNPs a second."""
    load = shipped("dcqcn-fairness")
    assert load.at_s == 2.5 and load.flows == ["h2-h1", "h3-h1", "h4-h1"]
    assert load.switch_pps == pytest.approx({"spine1": 0.0, "leaf1": FRAMES + 15}, rel=1e-6)


def test_a_rate_cap_and_max_min_shares() -> None:
    """A capped QP keeps its cap and the uncapped one beside it takes the rest of the link."""
    sc = parse_scenario({
        "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 3}, "duration_s": 5,
        "endpoints": {"dcqcn": False},
        "flows": [{"name": "capped", "src": "h2", "dst": "h1", "duration_s": 4,
                   "rate_cap_mbps": 2.0},
                  {"name": "free", "src": "h3", "dst": "h1", "duration_s": 4}]})
    load = peak_load(sc.topo, sc.extras.flows, 5.0, set())
    payload = 65536 / 66_480  # of the wire bytes
    assert load.flow_mbps == pytest.approx({"capped": 2 * payload, "free": 8 * payload},
                                           rel=1e-6)


def test_one_flow_alone_brings_no_cnps() -> None:
    """Held back by its own NIC, not by a switch's queue: nothing is marked, no CNP."""
    sc = parse_scenario({"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1},
                         "duration_s": 5, "flows": [{"name": "a", "src": "h1", "dst": "h2",
                                                     "duration_s": 4}]})
    load = scenario_load(sc.cfg, sc.topo, sc.extras)
    assert load.host_fps == pytest.approx({"h1": FRAMES, "h2": FRAMES}, rel=1e-6)


def test_rates_scale_the_load() -> None:
    """At twice the rate, twice the packets (the load is linear in the links' rates)."""
    data = {"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1, "host_link_mbps": 20,
                       "fabric_link_mbps": 20},
            "duration_s": 5, "flows": [{"name": "a", "src": "h1", "dst": "h2", "duration_s": 4}]}
    sc = parse_scenario(data)
    assert scenario_load(sc.cfg, sc.topo, sc.extras).passes == pytest.approx(
        2 * 3 * FRAMES, rel=1e-6)  # leaf1, a spine (half each), leaf2


def test_bounce_routes_and_failed_links_shape_the_path() -> None:
    """deadlock-watchdog-off.yaml pins flow a (h1 -> h3) to leaf1, spine1, leaf2, spine2,
    leaf3: five switches, each passed once by every packet."""
    sc = load_scenario(REPO / "scenarios" / "deadlock-watchdog-off.yaml")
    from testbed.budget.scenario import down_at_start

    passes, _hops = path_shares(sc.topo, "h1", "h3", down_at_start(sc.topo, sc.extras.faults))
    assert passes == {"leaf1": 1.0, "spine1": 1.0, "leaf2": 1.0, "spine2": 1.0, "leaf3": 1.0}


def test_every_host_busy_the_issues_permutation() -> None:
    """Issue #32's workload: 8 hosts of 2x4x2, each writing at line rate to the host four
    away (h1 -> h5, ..., h5 -> h1: another leaf), PFC + ECN + DCQCN. No link is shared by two
    flows' full rates (each leaf's two hosts send over two spines, half each), so every flow
    runs at the line rate, no CNP: each frame crosses three switches, 8 x 3 x FRAMES = 8,123
    passes a second, against one incast's 1,015."""
    sc = parse_scenario({
        "fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 2}, "duration_s": 10,
        "qos": {"pfc_enable": [3], "ecn": {3: {}}}, "endpoints": {"dcqcn": True},
        "flows": [{"name": f"f{i}", "src": f"h{i}", "dst": f"h{(i + 3) % 8 + 1}",
                   "duration_s": 10} for i in range(1, 9)]})
    load = scenario_load(sc.cfg, sc.topo, sc.extras)
    assert load.passes == pytest.approx(8 * 3 * FRAMES, rel=1e-6)
    assert load.host_fps == pytest.approx({f"h{i}": 2 * FRAMES for i in range(1, 9)}, rel=1e-6)
    assert load.switch_pps["leaf1"] == pytest.approx(4 * FRAMES, rel=1e-6)  # 2 out, 2 in
    assert load.switch_pps["spine1"] == pytest.approx(4 * FRAMES, rel=1e-6)  # half of 8
