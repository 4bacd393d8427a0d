"""Collectives as traffic: the flows a collective becomes, the step dependency that chains them,
nccl-tests' figures with hand-worked numbers, and the scenario's refusals. Pure."""

from __future__ import annotations

import pytest

from testbed.analysis.collectives import collective_figures, rank_steps
from testbed.config.models import ConfigError
from testbed.results.endpoints import MessageRow
from testbed.run.scenario import parse_scenario
from traffic.chain import Chain
from traffic.collectives import CollectiveSpec, bus_factor, default_ranks, flows_of, steps
from traffic.packets import RoceFrameBuilder
from traffic.qp import Requester, Responder

FABRIC = {"spines": 2, "leaves": 4, "hosts_per_leaf": 2}


def test_bus_factors_are_nccl_tests() -> None:
    """nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n; all-gather, reduce-scatter and
    all-to-all (n-1)/n."""
    assert bus_factor("all_reduce", 8) == 2 * 7 / 8 == 1.75
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == 7 / 8
    assert bus_factor("all_to_all", 4) == 0.75
    assert (steps("all_reduce", 8), steps("all_gather", 8), steps("all_to_all", 8)) == (14, 7, 1)


def test_default_ranks_cross_a_spine_at_every_hop() -> None:
    sc = parse_scenario({"fabric": FABRIC, "duration_s": 5,
                         "collectives": [{"name": "ar", "size_bytes": 1 << 20}]})
    ranks = sc.extras.collectives[0].ranks
    assert ranks == ["h1", "h3", "h5", "h7", "h2", "h4", "h6", "h8"]
    leaf = {h.name: h.leaf for h in sc.topo.hosts}
    assert all(leaf[a] != leaf[b] for a, b in zip(ranks, ranks[1:] + ranks[:1], strict=True))
    assert default_ranks({"l1": ["a", "b"], "l2": ["c"]}) == ["a", "c", "b"]


def test_an_all_reduce_moves_what_the_ring_must() -> None:
    """Each rank sends 2(n-1) messages of S/n per operation to its ring neighbour: 2(n-1)/n x S
    bytes, the all-reduce's lower bound on what a rank's link carries."""
    c = CollectiveSpec(name="ar", size_bytes=1 << 20, iterations=5, channels=2,
                       ranks=["h1", "h3", "h2", "h4"])
    flows = flows_of(c, c.ranks)
    assert [(f.src, f.dst) for f in flows] == [("h1", "h3"), ("h3", "h2"), ("h2", "h4"),
                                               ("h4", "h1")]
    for f in flows:
        assert f.qps == 2 and f.message_bytes == (1 << 20) // 8 and f.count == 5 * 6
        per_rank_per_op = f.qps * f.message_bytes * f.count / 5
        assert per_rank_per_op == 2 * 3 / 4 * (1 << 20)
    assert flows[0].after == ["ar-h4-h1"] and flows[1].after == ["ar-h1-h3"]


def test_an_all_to_all_waits_on_every_peer() -> None:
    c = CollectiveSpec(name="a2a", op="all_to_all", size_bytes=3 * 4096, iterations=2,
                       ranks=["h1", "h2", "h3"])
    flows = {f.name: f for f in flows_of(c, c.ranks)}
    assert len(flows) == 6 and all(f.count == 2 and f.message_bytes == 4096
                                   for f in flows.values())
    assert sorted(flows["a2a-h1-h2"].after) == ["a2a-h2-h1", "a2a-h3-h1"]


def _qp() -> tuple[Requester, Responder]:
    b = RoceFrameBuilder("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1",
                         49152)
    return Requester(1, 2, b), Responder(3, 4)


def test_a_chain_posts_each_step_once_its_gates_have_delivered() -> None:
    req, gate = _qp()
    other = Responder(5, 6)
    chain = Chain(req, "write", 1000, total=3, gates=[gate, other])
    assert chain.release(0.0) == 1 and len(req.pending) == 1  # step 0 at once
    assert chain.release(0.1) == 0  # nothing has arrived
    gate.stats.messages = 1
    assert chain.release(0.2) == 0  # one gate is not enough: every peer's message is needed
    other.stats.messages = 2
    assert chain.release(0.3) == 1 and chain.waiting
    gate.stats.messages = 5
    assert chain.release(0.4) == 1 and chain.posted == 3 and not chain.waiting
    assert chain.release(0.5) == 0  # never past its total


def test_figures_from_hand_worked_messages() -> None:
    """Two ranks, all-reduce of 2 MB (1 MB a message), 2 operations of 2 steps at 10 Mbit/s:
    posts and completions chosen so that the two operations take 4 s: t = 2 s, algbw = 2 MB x
    8 / 2 s = 8.388608 Mbit/s, busbw = algbw x 2(2-1)/2 = the same, efficiency 0.8389."""
    c = CollectiveSpec(name="ar", size_bytes=2 << 20, iterations=2, ranks=["h1", "h2"])
    flows = {f.name: f for f in flows_of(c, c.ranks)}
    times = {"ar-h1-h2": [(0.0, 0.9), (1.0, 1.9), (2.0, 2.9), (3.0, 3.95)],
             "ar-h2-h1": [(0.1, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]}
    sends = {}
    for n, (name, f) in enumerate(flows.items()):
        msgs = [MessageRow(n, i + 1, "write", f.message_bytes, p, d, d - p)
                for i, (p, d) in enumerate(times[name])]
        sends[name] = rank_steps(f, msgs, [n])
    heads = {"ar-h2-h1": {"retransmitted": 3, "timeouts": 1, "cnps_received": 2}}
    fig = collective_figures(c, 10.0, sends, heads, {"h2": 0.25})
    assert fig["ops_completed"] == 2 and fig["time_per_op_s"] == 2.0
    assert fig["algbw_mbps"] == round((2 << 20) * 8 / 2.0 / 1e6, 4) == 8.3886
    assert fig["busbw_mbps"] == fig["algbw_mbps"] and fig["efficiency"] == 0.8389
    assert fig["step_median_s"] == 0.9 and fig["step_p99_s"] == 1.0
    assert fig["straggler"] == {"rank": "h2", "last_share": 1.0, "retransmitted": 3,
                                "timeouts": 1, "cnps_received": 2, "paused_s": 0.25}


def test_an_unfinished_collective_counts_whole_operations_only() -> None:
    c = CollectiveSpec(name="ar", size_bytes=2 << 20, iterations=2, ranks=["h1", "h2"])
    sends = {"ar-h1-h2": {0: (0.0, 1.0), 1: (1.0, 2.0), 2: (2.0, 3.0)},
             "ar-h2-h1": {0: (0.0, 1.0), 1: (1.0, 2.0)}}
    fig = collective_figures(c, 10.0, sends, {}, {})
    assert fig["ops_completed"] == 1 and fig["time_per_op_s"] == 2.0
    none = collective_figures(c, 10.0, {"ar-h1-h2": {0: (0.0, 1.0)}}, {}, {})
    assert none["ops_completed"] == 0 and none["efficiency"] is None


def test_rank_steps_join_a_flows_channels() -> None:
    """A step of a two-channel flow runs from its first channel's post to its last channel's
    completion; an index only one channel completed is not a step yet."""
    c = CollectiveSpec(name="ar", size_bytes=8, channels=2, ranks=["h1", "h2"])
    f = flows_of(c, c.ranks)[0]
    msgs = [MessageRow(10, 1, "write", 2, 0.0, 1.0, 1.0),
            MessageRow(11, 1, "write", 2, 0.2, 1.4, 1.2),
            MessageRow(10, 2, "write", 2, 1.0, 2.0, 1.0)]
    assert rank_steps(f, msgs, [10, 11]) == {0: (0.0, 1.4)}


@pytest.mark.parametrize(("collective", "words"), [
    ({"name": "ar", "size_bytes": 1001}, "collectives.0.size_bytes: 1001 does not split into 8 "
                                         "ranks x 1 channels; use a multiple of 8, e.g. 1000"),
    ({"name": "ar", "channels": 3}, "does not split into 8 ranks x 3 channels; use a "
                                    "multiple of 24"),
    ({"name": "ar", "ranks": ["h1", "h9"]}, "collectives.0.ranks: unknown host 'h9'"),
    ({"name": "ar", "ranks": ["h1", "h1"]}, "a host appears twice"),
    ({"name": "ar", "tc": 5}, "collectives.0.tc: no DSCP reaches class 5"),
    ({"name": "ar", "start_s": 9}, "collectives.0.start_s: 9.0 is past the end"),
    ({"name": "all-reduce-of-many"}, "collectives.0.name"),
])
def test_a_wrong_collective_is_refused_in_one_line(collective: dict, words: str) -> None:
    data = {"fabric": FABRIC, "duration_s": 5, "collectives": [collective]}
    with pytest.raises(ConfigError) as info:
        parse_scenario(data)
    assert words in info.value.render()


@pytest.mark.parametrize("mode", [None, "roce-lossless", "roce-lossy", "tcp", "ib-credit"])
@pytest.mark.parametrize("name", ["allreduce", "allreduce-incast"])
def test_a_run_s_scenario_json_parses_again_to_the_same_scenario(name: str, mode: str | None
                                                                  ) -> None:
    """A lab's check parses a run's scenario.json again: its collective's flows are not added
    twice, and what its mode filled in is not taken for a contradiction."""
    import json
    from pathlib import Path

    import yaml

    from testbed.run.scenario_run import scenario_record

    data = yaml.safe_load((Path(__file__).parent.parent / "scenarios" / f"{name}.yaml")
                          .read_text())
    data.pop("mode", None)
    if mode:
        data["mode"] = mode
    sc = parse_scenario(data)
    rec = json.loads(json.dumps(scenario_record(sc)))
    again = parse_scenario({**rec.pop("config"), **rec})
    assert again.extras == sc.extras and again.cfg == sc.cfg


def test_a_flow_named_like_a_collective_flow_is_refused() -> None:
    data = {"fabric": FABRIC, "duration_s": 5,
            "flows": [{"name": "ar-h1-h3", "src": "h1", "dst": "h3", "count": 1}],
            "collectives": [{"name": "ar"}]}
    with pytest.raises(ConfigError, match="'ar-h1-h3' is given twice"):
        parse_scenario(data)


def test_after_names_a_flow_into_the_source_starting_with_it() -> None:
    flows = [{"name": "a", "src": "h1", "dst": "h3", "count": 2, "after": ["b"]},
             {"name": "b", "src": "h3", "dst": "h2", "count": 2}]
    with pytest.raises(ConfigError, match="flows.0.after: 'b' must be a flow into h1"):
        parse_scenario({"fabric": FABRIC, "duration_s": 5, "flows": flows})
    with pytest.raises(ConfigError, match="after needs count"):
        parse_scenario({"fabric": FABRIC, "duration_s": 5, "flows": [
            {"name": "a", "src": "h1", "dst": "h3", "duration_s": 2, "after": ["b"]}]})
