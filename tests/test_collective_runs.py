"""A ring all-reduce on real BMv2 switches, kernel queues and RoCE endpoints, in each fabric mode
built so far, with the signature of each: what a user checks in summary.json's headline.

* ``roce-lossless`` (PFC + ECN + DCQCN): every operation completes, each rank moves exactly what
  the ring algorithm must (2(n-1)/n x S an operation), nothing is lost or resent, each step
  waited for the previous step's message to arrive, and busbw = algbw x 2(n-1)/n;
* ``roce-lossy`` (no PFC, no ECN, no DCQCN) on shallow buffers behind a 2:1 uplink: the queues
  drop, Go-Back-N resends, and no PFC frame is sent.

Each run must be faithful: a figure of an emulation that did not keep up is not a figure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.analysis.fidelity import verdict_problem
from testbed.results.endpoints import read_messages
from testbed.run.scenario import parse_scenario
from testbed.run.scenario_run import run_scenario
from traffic.flows import assign_qps

pytestmark = pytest.mark.bmv2

SIZE = 256 * 1024
ITERATIONS = 3


def scenario(mode: str, **more) -> dict:
    return {"name": f"ar-{mode}", "mode": mode, "duration_s": 4.5, "settle_s": 1,
            "collectives": [{"name": "ar", "op": "all_reduce", "size_bytes": SIZE,
                             "iterations": ITERATIONS, "start_s": 0.5}], **more}


def run(data: dict, tmp: Path) -> tuple:
    sc = parse_scenario(data, data["name"])
    res = run_scenario(sc, tmp, progress=lambda _m: None)
    assert verdict_problem(res.summary.get("fidelity")) is None, \
        verdict_problem(res.summary.get("fidelity"))
    return sc, res.summary, res.results_dir


def test_a_lossless_all_reduce_moves_what_the_ring_must_and_loses_nothing(tmp_path: Path
                                                                          ) -> None:
    sc, summary, run_dir = run(
        scenario("roce-lossless", fabric={"spines": 2, "leaves": 2, "hosts_per_leaf": 2}),
        tmp_path)
    head = summary["headline"]
    ar = head["collectives"]["ar"]
    n = len(ar["ranks"])
    assert n == 4 and ar["ops_completed"] == ITERATIONS
    for f in sc.extras.flows:  # each rank's link carried 2(n-1)/n x S an operation
        assert summary["flows"][f.name]["bytes_received"] == 2 * (n - 1) * SIZE // n * ITERATIONS
    assert head["lossless_drops"] == 0 and head["drops"] == 0
    assert head["retransmitted"] == 0 and head["naks"] == 0
    assert ar["busbw_mbps"] == pytest.approx(ar["algbw_mbps"] * 2 * (n - 1) / n, abs=1e-3)
    assert 0 < ar["efficiency"] <= 1 and head["efficiency"] == ar["efficiency"]
    # each step waited for the previous one: a rank posted message i no sooner than its left
    # neighbour's message i-1 could have crossed the link after that neighbour posted it
    qpns = assign_qps(sc.extras.flows)
    flows = {f.name: f for f in sc.extras.flows}
    posted = {name: {m.msg_id: m.posted_s for m in read_messages(run_dir, f.src)
                     if m.qpn == qpns[name][0].requester_qpn} for name, f in flows.items()}
    wire_s = flows["ar-h1-h3"].message_bytes * 8 / (sc.cfg.fabric.host_link_mbps * 1e6)
    for name, f in flows.items():
        left = f.after[0]
        assert len(posted[name]) == 2 * (n - 1) * ITERATIONS
        for i in range(2, len(posted[name]) + 1):
            assert posted[name][i] >= posted[left][i - 1] + wire_s, (name, i)


def test_a_lossy_all_reduce_on_shallow_buffers_drops_and_resends_without_pfc(tmp_path: Path
                                                                             ) -> None:
    _sc, summary, _run_dir = run(scenario(
        "roce-lossy", fabric={"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
        qos={"ecn": {}, "buffer_bytes": 20_000},
        endpoints={"dcqcn": False, "local_ack_timeout": 4}), tmp_path)
    head = summary["headline"]
    assert head["drops"] > 0 and head["retransmitted"] > 0
    assert head["pfc_frames"] == 0 and summary["pfc_frames_sent"] == {
        s: 0 for s in summary["pfc_frames_sent"]}
    assert head["collectives"]["ar"]["ops_completed"] >= 1
