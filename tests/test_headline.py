"""The headline figures, on a synthetic results folder whose every figure is known
(tests/synthetic_run.py says how it was made)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from testbed.analysis.headline import compute_headline, jain, percentile
from testbed.analysis.headline_series import pfc_frames
from testbed.report.headline_text import FIGURES, headline_markdown
from testbed.results.endpoints import MessageRow, QpRow
from testbed.results.telemetry import TelemetryRow
from tests.synthetic_run import summary, write_run
from traffic.endpoint_telemetry import MESSAGE_COLUMNS, QP_COLUMNS
from traffic.flows import FlowSpec


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("h") / "run")


@pytest.fixture(scope="module")
def head(run: Path) -> dict:
    return compute_headline(run, summary())


def test_records_follow_the_endpoints_columns() -> None:
    assert [f.name for f in fields(QpRow)] == [c for c, _ in QP_COLUMNS]
    assert [f.name for f in fields(MessageRow)] == [c for c, _ in MESSAGE_COLUMNS]


def test_jain_and_percentile() -> None:
    assert jain([5, 5, 5]) == pytest.approx(1.0)
    assert jain([4, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([4, 2]) == pytest.approx(0.9)
    assert jain([]) is None and jain([0, 0]) is None and jain([3]) is None
    assert percentile([0.4, 0.1, 0.3, 0.2], 0.5) == 0.2
    assert percentile([0.4, 0.1, 0.3, 0.2], 0.99) == 0.4
    assert percentile(list(range(1, 201)), 0.99) == 198
    assert percentile([], 0.5) is None


def test_per_flow_goodput_fct_and_counters(head: dict) -> None:
    a, b = head["flows"]["a"], head["flows"]["b"]
    assert a["bytes"] == 1_000_000 and a["active_s"] == pytest.approx(2.0)
    assert a["goodput_mbps"] == pytest.approx(4.0)
    assert b["goodput_mbps"] == pytest.approx(2.0)
    assert (a["messages"], a["fct_median_s"], a["fct_p99_s"]) == (4, 0.2, 0.4)
    assert b["messages"] == 0 and b["fct_median_s"] is None
    assert (a["retransmitted"], a["naks"], a["cnps_received"]) == (3, 1, 5)
    assert (a["cnps_sent"], a["ce_marked"]) == (6, 8)
    assert not a["victim"] and head["flows"]["victim"]["victim"]


def test_fabric_goodput_is_the_bytes_over_the_span_not_a_sum_of_rates() -> None:
    """A lossy incast into a 10 Mbit/s link: two flows deliver 1.2 MB each over 2 s (4.8 Mbit/s
    each), a starved third 94 KB within its first 0.1 s (7.5 Mbit/s over its own 0.1 s).
    Their goodputs add up to 17.1 Mbit/s; the fabric delivered 2.494 MB in 2 s: 9.98 Mbit/s."""
    from testbed.analysis.headline import fabric_goodput

    flows = [{"bytes": 1_200_000, "start_s": 1.0, "active_s": 2.0},
             {"bytes": 1_200_000, "start_s": 1.0, "active_s": 2.0},
             {"bytes": 94_000, "start_s": 1.0, "active_s": 0.1}]
    assert fabric_goodput(flows) == pytest.approx(9.976)
    assert fabric_goodput([{"bytes": 0, "start_s": 1.0, "active_s": None}]) == 0.0


def test_run_wide_figures(head: dict) -> None:
    assert head["goodput_mbps"] == pytest.approx(7.0)
    assert head["jain"] == pytest.approx(0.9)  # a and b; the victim is left out
    assert head["victims"]["victim"] == {"goodput_mbps": 1.0, "alone_mbps": 10.0,
                                         "slowdown": 10.0}
    assert head["victim_slowdown"] == 10.0
    assert (head["fct_median_s"], head["fct_p99_s"]) == (0.2, 0.4)
    assert head["lossless_drops"] == 2 and head["drops"] == 9
    assert head["hidden_loss"] == 3
    assert head["ecn_marked"] == 16
    assert (head["cnps"], head["retransmitted"], head["naks"]) == (6, 3, 1)
    assert head["pfc_frames"] == 49
    assert head["pause_s"] == pytest.approx(2.3)


def test_links_pfc_utilization_and_imbalance(head: dict) -> None:
    links = {lk["link"]: lk for lk in head["links"]}
    s1 = links["spine1->leaf1"]
    assert (s1["tier"], s1["pfc_frames"], s1["paused_s"]) == ("fabric", 40, 1.5)
    assert s1["utilization"] == pytest.approx(1.0)  # the window ends at t=5
    assert links["spine2->leaf1"]["utilization"] == pytest.approx(0.5)
    assert links["h3->leaf2"]["pfc_frames"] == 9 and links["h3->leaf2"]["paused_s"] == 0.8
    assert links["leaf1->h1"]["tier"] == "host"
    assert head["stages"]["leaf1 down"]["imbalance"] == pytest.approx(1.0 / 0.75, abs=1e-3)
    assert "leaf2 down" not in head["stages"]  # carried nothing
    assert head["max_imbalance"] == pytest.approx(1.3333, abs=1e-3)
    assert head["max_utilization"] == pytest.approx(1.0)


def test_lossless_drops_from_telemetry_without_the_summary_figure(run: Path) -> None:
    head = compute_headline(run, summary(with_drops=False))
    assert head["lossless_drops"] == 2  # class 3 alone: the class 0 drops are lossy


def test_markdown_has_every_figure_and_flow(head: dict) -> None:
    text = "\n".join(headline_markdown(head))
    for _key, label in FIGURES:
        assert f"| {label} |" in text
    assert "| victim | h2->h4 | 1 |" in text
    assert "| goodput (Mbit/s) | 7 |" in text


def test_pfc_frames_over_time_adds_each_switch_latest() -> None:
    def row(t: float, sw: str, pfc: int) -> TelemetryRow:
        return TelemetryRow(t, sw, 1, 3, 0, 0, 0, 0, 0, False, pfc, 0.0)

    rows = [row(1.0, "s1", 0), row(1.5, "s2", 3), row(2.0, "s1", 5), row(2.5, "s2", 4)]
    assert pfc_frames(rows, t0=1.0) == [(0.0, 0), (0.5, 3), (1.0, 8), (1.5, 9)]


def test_a_starved_duration_flow_is_active_for_its_whole_duration() -> None:
    """A flow asked to send for 3 s whose bytes stopped arriving after 0.2 s (Go-Back-N waiting
    out its timeouts) was starved, not done: its goodput is over the 3 s, not the 0.2 s. A
    flow of a message count is done when its last byte arrives."""
    from testbed.analysis.headline import flow_figures

    def resp(t: float, n: int) -> QpRow:
        return QpRow(t, 0x8000, "responder", 3, None, None, None, 0.0, n, 0, 0, 0, 0, 0, 0, 0,
                     0.0)

    rows = [resp(1.1, 50_000), resp(1.2, 94_000), resp(3.0, 94_000), resp(4.0, 94_000)]
    qps = [{"bytes_received": 94_000}]
    starved = flow_figures(FlowSpec(name="c", src="h3", dst="h4", duration_s=3.0), 1.0, qps,
                           rows, [], [])
    assert starved["active_s"] == pytest.approx(3.0)
    assert starved["goodput_mbps"] == pytest.approx(94_000 * 8 / 3.0 / 1e6, rel=1e-3)
    counted = flow_figures(FlowSpec(name="c", src="h3", dst="h4", count=2), 1.0, qps, rows,
                           [], [])
    assert counted["active_s"] == pytest.approx(0.2)


def test_link_phases_cut_the_run_at_its_link_faults() -> None:
    """leaf1's uplink to spine1 fails at 2 s and comes back at 4 s: each phase says the fault
    that began it and what every switch-to-switch link carried over it, from just after that
    reroute was done to the moment the next one began (host links left out)."""
    import json

    from testbed.analysis.headline_links import PHASE_SETTLE_S, link_phases
    from testbed.config.models import FabricConfig
    from testbed.topology.graph import build_topology

    topo = json.loads(build_topology(FabricConfig.model_validate(
        {"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1}})).to_json())
    leaf1 = next(s for s in topo["leaves"] if s["name"] == "leaf1")
    port = {p["peer"]: p["number"] for p in leaf1["ports"]}
    rate = {"spine1": (125_000, 0, 125_000), "spine2": (125_000, 250_000, 125_000),
            "h1": (250_000, 250_000, 250_000)}  # bytes a second before, while down, after

    def sent(peer: str, t: float) -> int:
        before, down, after = rate[peer]
        return int(before * min(t, 2) + down * max(0, min(t, 4) - 2) + after * max(0, t - 4))

    rows = [TelemetryRow(t / 10, "leaf1", port[peer], 3, 0, 0, 0, sent(peer, t / 10), 0, False,
                         0, 0.0) for t in range(0, 61) for peer in rate]
    timeline = [{"t_s": 0.0, "event": "start"},
                {"t_s": 2.2, "event": "link leaf1-spine1 down", "link": ["leaf1", "spine1"],
                 "up": False, "from_s": 2.0},
                {"t_s": 4.2, "event": "link leaf1-spine1 up", "link": ["leaf1", "spine1"],
                 "up": True, "from_s": 4.0},
                {"t_s": 6.0, "event": "senders stop"}]
    phases = link_phases(rows, topo, timeline, (0.0, 6.0))
    assert [(p.get("up"), p["from_s"], p["to_s"]) for p in phases] == [
        (None, 0.0, 2.0), (False, 2.2 + PHASE_SETTLE_S, 4.0), (True, 4.2 + PHASE_SETTLE_S, 6.0)]
    assert [p["mbps"] for p in phases] == [{"leaf1->spine1": 1.0, "leaf1->spine2": 1.0},
                                           {"leaf1->spine1": 0.0, "leaf1->spine2": 2.0},
                                           {"leaf1->spine1": 1.0, "leaf1->spine2": 1.0}]
    assert phases[1]["link"] == ["leaf1", "spine1"]
    assert link_phases(rows, topo, [timeline[0], timeline[-1]], (0.0, 6.0)) == []  # no fault


def test_background_figures_sum_the_flows_and_an_unknown_stays_unknown(run: Path) -> None:
    """Without background: none. With two flows: what they delivered together and lost; one
    whose receiver wrote nothing leaves both figures unknown, never 0."""
    assert compute_headline(run, summary())["background_mbps"] is None
    bg = {"a": {"goodput_mbps": 4.25, "lost_packets": 470},
          "b": {"goodput_mbps": 1.5, "lost_packets": 0}}
    head = compute_headline(run, {**summary(), "background": bg})
    assert (head["background_mbps"], head["background_lost"]) == (5.75, 470)
    bg["b"] = {"goodput_mbps": None, "lost_packets": None}
    head = compute_headline(run, {**summary(), "background": bg})
    assert (head["background_mbps"], head["background_lost"]) == (None, None)
