"""Mode ib-credit on real BMv2 switches, kernel queues and RoCE endpoints: a 4:1 incast on
2x3x2 with credit flow control per hop instead of PFC, and its signature as a user checks it
in summary.json and on the wire: nothing dropped or resent, no PFC frame, the time the ports
waited for credit counted, and the credit frames (IB's flow control packets) on the links,
parsed by Scapy."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from testbed.analysis.fidelity import verdict_problem
from testbed.run.scenario import load_scenario, parse_scenario
from testbed.run.scenario_run import run_scenario
from testbed.topology.qos import credit_buffer_bytes
from tests.test_capture import need_tshark, tshark
from tests.test_deadlock import REPO, cycle_queues, senders_stop
from tests.test_endpoint_credit import FRAME
from traffic.layers import IBFlowControl
from traffic.wire import ETH_P_CREDIT

pytestmark = pytest.mark.bmv2

#: Four hosts on two leaves write to h1 at line rate, credits alone (no ECN, no DCQCN), as
#: scenarios/incast.yaml does with PFC alone.
INCAST = {
    "name": "incast-credit", "mode": "ib-credit",
    "fabric": {"spines": 2, "leaves": 3, "hosts_per_leaf": 2},
    "qos": {"ecn": {}}, "endpoints": {"dcqcn": False},
    "duration_s": 5, "settle_s": 1, "capture": ["h3", "leaf1:3"],
    "flows": [{"name": f"s{h}", "src": f"h{h}", "dst": "h1", "qps": 2, "message_bytes": 65536,
               "duration_s": 4, "start_s": 0.5} for h in (3, 4, 5, 6)],
}


def credit_packets(pcap: Path, src_prefix: str) -> list[IBFlowControl]:
    """The flow control packets of the credit frames from MACs starting with
    ``src_prefix``, as Scapy decodes them (a frame carries one a lane, padding after)."""
    out = []
    for f in rdpcap(str(pcap)):
        if Ether in f and f[Ether].type == ETH_P_CREDIT and f[Ether].src.startswith(src_prefix):
            out.append(IBFlowControl(bytes(f[Ether].payload)[:4]))
    return out


def test_an_incast_under_credits_loses_nothing_sends_no_pfc_and_waits_for_credit(
        tmp_path: Path) -> None:
    need_tshark()
    sc = parse_scenario(INCAST)
    res = run_scenario(sc, tmp_path, progress=lambda _m: None)
    assert verdict_problem(res.summary.get("fidelity")) is None, \
        verdict_problem(res.summary.get("fidelity"))
    head = res.summary["headline"]
    assert head["drops"] == 0 and head["lossless_drops"] == 0
    assert head["retransmitted"] == 0 and head["naks"] == 0
    assert head["pfc_frames"] == 0 and set(res.summary["pfc_frames_sent"].values()) == {0}
    assert head["pause_s"] > 0  # ports held frames for want of credit (PortXmitWait)
    flows = head["flows"]
    assert all(f["messages"] > 0 and f["timeouts"] == 0 for f in flows.values())
    # the bottleneck, h1's link, stays busy: credit returns as fast as it drains
    assert head["goodput_mbps"] > 8.5, head["goodput_mbps"]
    caps = res.results_dir / "captures"
    # h3's leaf grants it credit for class 3, and the limit advances as its frames drain
    to_h3 = credit_packets(caps / "h3.pcap", "02:4c")
    assert to_h3 and {p.vl for p in to_h3} == {3}
    assert len({p.fccl for p in to_h3}) > 10
    # on leaf1's first uplink, both switches speak: leaf1 grants the spine what it may
    # send toward h1, and no PFC frame crosses
    uplink = credit_packets(caps / "leaf1-p3.pcap", "02:4c")
    down = credit_packets(caps / "leaf1-p3.pcap", "02:51")
    assert len({p.fccl for p in uplink}) > 10 and down
    assert tshark(caps / "leaf1-p3.pcap", ["frame.number"], "eth.type == 0x8808") == []


def test_the_pfc_deadlock_s_cycle_does_not_lock_under_credits_here(tmp_path: Path) -> None:
    """scenarios/deadlock-watchdog-off.yaml in mode ib-credit: the same failed links, bounce
    routes and four flows, whose cyclic buffer dependency locks PFC. Here every flow completes
    and no queue stays stuck after the senders stop: each host's leaf grants it only what its
    frames' way onward drains, so the traffic waits at the hosts and the cycle's inputs never
    fill (docs/DESIGN.md, Credits)."""
    import yaml

    data = yaml.safe_load((REPO / "scenarios" / "deadlock-watchdog-off.yaml").read_text())
    data.pop("agent")  # no PFC, so no PFC watchdog
    data.update(mode="ib-credit", qos={"ecn": {}})
    res = run_scenario(parse_scenario(data), tmp_path, progress=lambda _m: None)
    assert verdict_problem(res.summary.get("fidelity")) is None, \
        verdict_problem(res.summary.get("fidelity"))
    head = res.summary["headline"]
    assert head["drops"] == 0 and head["pfc_frames"] == 0 and head["retransmitted"] == 0
    assert all(f["messages"] > 0 for f in head["flows"].values())
    # the credited class's queues are judged: none held packets and sent none after the stop
    assert res.summary["deadlock"]["deadlock"] is False, res.summary["deadlock"]
    assert res.summary["deadlock"]["stuck_after_stop"] == []


def test_a_credit_loop_deadlocks_like_a_pfc_cycle(tmp_path: Path) -> None:
    """scenarios/credit-loop.yaml: the PFC deadlock's failed links and bounce routes with two
    hosts a leaf sending into the cycle, so that every input on it receives frames for the
    next link faster than its turn at that link passes them on. Under credits it locks: after
    the senders stop, the four queues of the cycle hold frames, send nothing and wait for
    credit, each holding a full input's buffer, with no PFC frame and no drop. The same
    fabric and flows under PFC alone (credit-loop-pfc.yaml) lock too, with PFC arriving."""
    runs = {}
    for name in ("credit-loop", "credit-loop-pfc"):
        sc = load_scenario(REPO / "scenarios" / f"{name}.yaml")
        res = run_scenario(sc, tmp_path / name, progress=lambda _m: None)
        assert verdict_problem(res.summary.get("fidelity")) is None, \
            f"{name}: {verdict_problem(res.summary.get('fidelity'))}"
        runs[name] = (sc, res.summary)
    for name, (sc, summary) in runs.items():
        dl = summary["deadlock"]
        assert dl["deadlock"] is True, f"{name}: {dl}"
        assert dl["window_s"][0] >= senders_stop(summary), name
        stuck = {(q["switch"], q["port"], q["tc"]): q for q in dl["stuck_after_stop"]}
        assert cycle_queues(sc) <= set(stuck), f"{name}: {sorted(stuck)}"
        head = summary["headline"]
        assert head["drops"] == 0 and head["lossless_drops"] == 0, name
    sc, summary = runs["credit-loop"]
    head = summary["headline"]
    assert head["pfc_frames"] == 0 and set(summary["pfc_frames_sent"].values()) == {0}
    assert head["pause_s"] > 0  # ports waited for credit
    full = credit_buffer_bytes(sc.cfg.qos, sc.cfg.fabric.fabric_link_mbps) - FRAME
    for q in summary["deadlock"]["stuck_after_stop"]:
        if (q["switch"], q["port"], q["tc"]) in cycle_queues(sc):
            assert q["pfc_frames"] == 0 and q["backlog_bytes_min"] >= full, q
    assert runs["credit-loop-pfc"][1]["headline"]["pfc_frames"] > 0
