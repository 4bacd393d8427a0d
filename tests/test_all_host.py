"""benchmarks/all_host.py's pure parts: the loads, the scenario it runs, the ladder's verdict
per rate and the table."""

from __future__ import annotations

import pytest

from benchmarks import all_host
from testbed.run.scenario import parse_scenario


def test_the_permutation_sends_every_host_to_the_host_half_the_fabric_away() -> None:
    # 2x4x2: h1, h2 on leaf1 ... h7, h8 on leaf4; h_i -> h_(i+4): always another leaf
    assert all_host.pairs("permutation", 8) == [
        ("h1", "h5"), ("h2", "h6"), ("h3", "h7"), ("h4", "h8"),
        ("h5", "h1"), ("h6", "h2"), ("h7", "h3"), ("h8", "h4")]
    perm = all_host.pairs("permutation", 16)
    assert sorted(d for _s, d in perm) == sorted(s for s, _d in perm)  # each receives once
    assert len(all_host.pairs("all-to-all", 8)) == 56
    with pytest.raises(ValueError, match="unknown load"):
        all_host.pairs("ring", 8)
    assert all_host.parse_shape("2x4x4") == (2, 4, 4)
    with pytest.raises(ValueError, match="spines x leaves"):
        all_host.parse_shape("2x4")


def test_its_scenario_is_a_valid_pfc_ecn_dcqcn_run_at_the_rate() -> None:
    sc = parse_scenario(all_host.scenario((2, 4, 2), "permutation", 5.0, 6.0), "test")
    assert sc.cfg.fabric.host_link_mbps == sc.cfg.fabric.fabric_link_mbps == 5.0
    assert list(sc.cfg.qos.pfc_enable) == [3] and 3 in sc.cfg.qos.ecn
    assert sc.extras.endpoints.dcqcn
    assert len(sc.extras.flows) == 8
    assert all(f.duration_s == 6.0 and f.start_s == all_host.FLOW_START_S
               for f in sc.extras.flows)
    assert sc.cfg.switch.realtime_priority == 5  # the product's default
    rt = parse_scenario(all_host.scenario((2, 4, 2), "permutation", 5.0, 6.0, "switches-rt"),
                        "test")
    assert rt.cfg.switch.realtime_priority == 5 and rt.cfg.switch.build == "fast"


def _run(rate: float, variant: str, faithful: bool, goodput: float = 30.0) -> dict:
    return {"shape": "2x4x2", "load": "permutation", "rate": rate, "variant": variant,
            "faithful": faithful, "reasons": [] if faithful else ["BMv2 held a packet"],
            "goodput_mbps": goodput, "window_s": 6.0,
            "cpu_cores": {"bmv2": 0.8, "agents": 0.1, "endpoints": 0.4},
            "bmv2_us_per_pass": 150.0, "passes_per_s": 5000.0, "lossless_drops": 0,
            "retransmitted": 0, "budget": "fits", "figures": {}}


def test_a_rate_passes_only_when_every_one_of_its_runs_was_faithful() -> None:
    runs = [_run(3, "default", True), _run(3, "default", True), _run(3, "default", True),
            _run(5, "default", True), _run(5, "default", False),
            _run(3, "pinned", True), _run(3, "pinned", True)]
    assert all_host.best(runs, "2x4x2", "permutation", "default", 3) == 3
    # two faithful runs are not three
    assert all_host.best(runs, "2x4x2", "permutation", "pinned", 3) is None
    md = all_host.markdown({"command": "x", "machine": "m", "started": "now",
                            "args": {"runs": 3}, "runs": runs})
    assert "| 2x4x2 | permutation | default | 3 Mbit/s | 30.0 Mbit/s |" in md
    assert "| 2x4x2 | permutation | pinned | below the lowest tried |" in md
    assert "0.80 / 0.10 / 0.40" in md and "| 0.12 |" in md  # agents / BMv2
    assert "5 Mbit/s, default: flagged, 30.0 Mbit/s, 150.0 us (BMv2 held a packet)" in md
