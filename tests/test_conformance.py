"""testbed.conformance: the plans' checks on hand-made summaries, the JUnit and Markdown
writers (the XML parsed back), not-applicable cases, selection and the CLI's one-line errors.
Pure: nothing here starts a fabric."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli.commands import app
from testbed.config.base import ConfigError
from testbed.conformance import checks as c
from testbed.conformance.plans import SelectionError, cases, select
from testbed.conformance.report import FAIL, NA, PASS, ResultRow, exit_status, junit_xml, markdown
from testbed.conformance.runner import evaluate, not_applicable, read_fabric, with_fabric
from testbed.run.scenario import parse_scenario

FAITHFUL = {"ok": True, "reasons": [], "unknown": [], "checks": [{"name": "host_loss"}]}


def qp(**kw) -> dict:
    return {"qpn": 4096, "bytes_acked": 1000, "bytes_received": 1000, "packets_sent": 10,
            "retransmitted": 0, "naks": 0, "timeouts": 0, "cnps_received": 0, "failed": False,
            "complete": True, **kw}


def summary(**kw) -> dict:
    """A clean incast with PFC: every flow delivered, nothing resent, PFC from two switches."""
    base = {"flows": {f"{s}-h1": {"src": s, "dst": "h1", "qps": [qp()], "bytes_received": 1000}
                      for s in ("h2", "h3", "h4")},
            "pfc_frames_sent": {"leaf1": 40, "spine1": 3, "leaf2": 0},
            "pfc_frames_by_class": {"3": 43},
            # the tester's PFC and frame counters matching the leaves' host ports
            # (testbed.analysis.tester): 10 data frames from each sender, 30 to h1
            "tester": {"hosts": {**{h: {"3": {"pfc_received": 10, "data_sent": 10}}
                                    for h in ("h2", "h3", "h4")},
                                 "h1": {"3": {"data_received": 30}}},
                       "ports": {**{h: {"3": {"pfc_sent": 10, "pfc_received": 0,
                                              "frames_received": 10}}
                                    for h in ("h2", "h3", "h4")},
                                 "h1": {"3": {"frames_sent": 30}}},
                       "ce_marked_by_class": {}},
            "kernel_drops_lossless": 0, "fidelity": FAITHFUL, "watchdog_events": [],
            "timeline": [{"t_s": 0.0, "event": "start"}],
            "headline": {"lossless_drops": 0, "ecn_marked": 0, "max_imbalance": 1.1,
                         "flows": {"a": {"goodput_mbps": 10.0, "victim": False},
                                   "b": {"goodput_mbps": 8.0, "victim": False},
                                   "victim": {"goodput_mbps": 1.0, "victim": True}}}}
    base.update(kw)
    return base


def test_a_clean_lossless_run_passes_the_lossless_checks() -> None:
    s = summary()
    for fn in (c.faithful, c.no_lossless_drop, c.no_resend, c.delivered, c.pfc_seen(3),
               c.tester_pfc_matches(3), c.pfc_on_switches(2), c.rates_within(0.3),
               c.ecmp_balanced(1.5)):
        assert fn(s).ok, fn(s)


def test_loss_naks_and_timeouts_fail_their_checks_with_the_figure() -> None:
    s = summary(kernel_drops_lossless=3)
    o = c.no_lossless_drop(s)
    assert not o.ok and o.measured == "3 lossless drops" and o.bound == "0 drops"
    s = summary()
    s["flows"]["h2-h1"]["qps"][0]["naks"] = 2
    o = c.no_resend(s)
    assert not o.ok and "2 NAKs" in o.measured


def test_a_missing_figure_fails_never_passes() -> None:
    assert not c.no_lossless_drop({}).ok
    assert not c.ecn_marked({}).ok
    assert not c.no_resend({}).ok
    assert not c.delivered({}).ok
    assert not c.faithful({}).ok
    assert not c.rates_within(0.3)({}).ok
    assert not c.ecmp_balanced(1.5)({"headline": {"max_imbalance": None}}).ok
    assert not c.storm_detected_within(0.6)({}).ok


def test_a_flagged_run_fails_faithful() -> None:
    o = c.faithful(summary(fidelity={"ok": False, "reasons": ["cpu busy"], "checks": []}))
    assert not o.ok and "cpu busy" in o.measured


def test_pfc_and_ecn_checks() -> None:
    assert not c.pfc_seen(3)(summary(pfc_frames_by_class={})).ok
    o = c.pfc_seen(4)(summary())  # class 3 paused, class 4 not
    assert not o.ok and o.measured == "0 PFC frames for class 4 sent by the switches"
    assert c.pfc_seen(4)(summary(pfc_frames_by_class={"3": 5, "4": 2})).ok
    assert not c.pfc_seen(3)({}).ok  # not written: unknown, never a pass
    assert c.no_pfc(summary(pfc_frames_sent={"leaf1": 0})).ok
    assert not c.no_pfc(summary()).ok
    assert not c.pfc_on_switches(2)(summary(pfc_frames_sent={"leaf1": 9, "spine1": 0})).ok
    s = summary()
    s["headline"]["ecn_marked"] = 0
    assert not c.ecn_marked(s).ok
    s["headline"]["ecn_marked"] = 5
    assert c.ecn_marked(s).ok


def test_every_sender_needs_cnps() -> None:
    s = summary()
    for f in s["flows"].values():
        f["qps"][0]["cnps_received"] = 4
    assert c.cnps_every_sender(s).ok
    s["flows"]["h3-h1"]["qps"][0]["cnps_received"] = 0
    o = c.cnps_every_sender(s)
    assert not o.ok and "h3-h1 0" in o.measured


def test_fairness_is_the_plans_30_percent_and_leaves_victims_out() -> None:
    assert c.rates_within(0.3)(summary()).ok  # 8/10, the victim's 1 ignored
    s = summary()
    s["headline"]["flows"]["b"]["goodput_mbps"] = 6.9
    o = c.rates_within(0.3)(s)
    assert not o.ok and o.bound == "min/max >= 0.7"


def test_hashing_fails_a_polarized_stage() -> None:
    s = summary()
    s["headline"]["max_imbalance"] = 2.0  # every QP on one of two spines
    assert not c.ecmp_balanced(1.5)(s).ok


def _failover_summary(down: dict[str, float], back: dict[str, float]) -> dict:
    """leaf1's uplinks before spine1's went down (3 Mbit/s each), while down, and after."""
    def phase(mbps: dict[str, float], **fault) -> dict:
        return {**fault, "from_s": 0.0, "to_s": 1.0,
                "mbps": {**mbps, "spine1->leaf2": 9.0, "leaf2->spine1": 0.01}}
    link = {"link": ["leaf1", "spine1"]}
    s = summary()
    s["headline"]["link_phases"] = [
        phase({"leaf1->spine1": 3.0, "leaf1->spine2": 3.0}),
        phase(down, **link, up=False), phase(back, **link, up=True)]
    return s


def test_failover_needs_the_link_used_then_empty_then_used_again() -> None:
    moved = {"leaf1->spine1": 0.0, "leaf1->spine2": 6.0}
    back = {"leaf1->spine1": 3.0, "leaf1->spine2": 3.0}
    good = _failover_summary(moved, back)
    assert c.failed_over("leaf1", "spine1")(good).ok and c.moved_back("leaf1", "spine1")(good).ok
    out = c.failed_over("leaf1", "spine1")(good)
    assert out.measured == ("leaf1->spine1 3.00 then 0.00 Mbit/s; leaf1's other links 3.00 "
                            "then 6.00 Mbit/s")
    # the failed link still carrying, or the others not taking its share: not a failover
    for down in ({"leaf1->spine1": 0.5, "leaf1->spine2": 5.5},
                 {"leaf1->spine1": 0.0, "leaf1->spine2": 3.0}):
        assert not c.failed_over("leaf1", "spine1")(_failover_summary(down, back)).ok
    # a link that never carried anything shows no failover
    idle = _failover_summary(moved, back)
    idle["headline"]["link_phases"][0]["mbps"] = {"leaf1->spine1": 0.0, "leaf1->spine2": 6.0}
    assert not c.failed_over("leaf1", "spine1")(idle).ok
    # the traffic staying away after the link came back, or lost on the way
    for after in ({"leaf1->spine1": 0.0, "leaf1->spine2": 6.0},
                  {"leaf1->spine1": 1.0, "leaf1->spine2": 1.0}):
        assert not c.moved_back("leaf1", "spine1")(_failover_summary(moved, after)).ok
    # a run without the phases (no link fault, an older summary) fails, never passes
    assert not c.failed_over("leaf1", "spine1")(summary()).ok
    assert not c.moved_back("leaf1", "spine1")(summary()).ok


def _storm_summary(detected_at: float | None, restored: bool) -> dict:
    events = []
    if detected_at is not None:
        events.append({"t_s": detected_at, "switch": "leaf1", "port": 2, "tc": 3,
                       "event": "storm_detected"})
    if restored:
        events.append({"t_s": 6.0, "switch": "leaf1", "port": 2, "tc": 3,
                       "event": "storm_restored"})
    return summary(watchdog_events=events,
                   timeline=[{"t_s": 0.0, "event": "start"},
                             {"t_s": 1.5, "event": "h2: storm (class 3)"},
                             {"t_s": 4.5, "event": "h2: fault ends"}])


def test_watchdog_checks_time_detection_from_the_storms_start() -> None:
    assert c.storm_detected_within(0.6)(_storm_summary(1.9, True)).ok
    late = c.storm_detected_within(0.6)(_storm_summary(2.5, True))
    assert not late.ok and "1.000 s after" in late.measured
    assert c.storm_restored(_storm_summary(1.9, True)).ok
    assert not c.storm_restored(_storm_summary(1.9, False)).ok
    assert not c.storm_detected_within(0.6)(_storm_summary(None, False)).ok
    assert c.no_storm_event(_storm_summary(None, False)).ok
    assert not c.no_storm_event(_storm_summary(1.9, False)).ok


def test_every_applicable_case_is_a_valid_scenario_with_checks() -> None:
    for k in cases():
        if k.na is None:
            parse_scenario(k.scenario, k.key)
            assert k.checks and k.scaling, k.key
            assert any(name == "faithful" for name, _ in k.checks), k.key
        else:
            assert not k.checks and (k.na.startswith("needs") or "no case" in k.na)


def test_the_rocev2_plan_has_its_eleven_cases_and_packet_spray_is_na() -> None:
    ids = [k.id for k in cases("rocev2")]
    assert ids == [str(i) for i in range(1, 12)]
    spray = select("rocev2", ["8"])[0]
    assert spray.na and "per-packet" in spray.na


def test_ack_timeout_checks_hold_each_flow_to_its_own_bound() -> None:
    """Case 11: timeouts where the ACKs share the paused class, none where they do not; a flow
    the run did not write fails both ways."""
    sm = summary(flows={"h1-h3": {"qps": [qp(timeouts=3)]}, "h1-h4": {"qps": [qp()]}})
    assert c.ack_timeouts("h1-h3", True)(sm).ok and c.ack_timeouts("h1-h4", False)(sm).ok
    assert not c.ack_timeouts("h1-h4", True)(sm).ok
    assert not c.ack_timeouts("h1-h3", False)(sm).ok
    out = c.ack_timeouts("h9-h1", False)(sm)
    assert not out.ok and "no QP of h9-h1" in out.measured


def test_cnps_in_a_lossless_class_are_refused_before_case_11_runs() -> None:
    """A broken configuration of case 11, CNPs mapped to a lossless class, never runs: the
    scenario is refused at qos.pfc_enable with the fix."""
    case = select("rocev2", ["11"])[0]
    sc = copy.deepcopy(case.scenario)
    sc["qos"]["pfc_enable"] = [3, 6]
    with pytest.raises(ConfigError) as info:
        parse_scenario(sc, case.key)
    text = info.value.render()
    assert "qos.pfc_enable" in text and "carries CNPs" in text and "map cnp_dscp" in text


def test_selection_errors_name_the_choices() -> None:
    with pytest.raises(SelectionError, match="--plan nope: no such plan"):
        select("nope", None)
    with pytest.raises(SelectionError, match="--case 42: no such case in plan pfc"):
        select("pfc", ["42"])
    assert [k.key for k in select("all", ["rocev2.2", "storm"])] == ["rocev2.2", "pfcwd.storm"]


def _rows() -> list[ResultRow]:
    case = select("rocev2", ["2"])[0]
    rows = evaluate(case, summary(kernel_drops_lossless=2), "cases/rocev2.2")
    return rows + [not_applicable(select("rocev2", ["8"])[0], "needs spray")]


def test_evaluate_gives_one_row_per_expected_result() -> None:
    rows = _rows()
    case = select("rocev2", ["2"])[0]
    assert [r.check for r in rows[:-1]] == [name for name, _ in case.checks]
    status = {r.check: r.status for r in rows}
    assert status["no lossless drop"] == FAIL and status["PFC seen on class 3"] == PASS
    assert rows[-1].status == NA


def test_junit_parses_back_one_testcase_per_result() -> None:
    rows = _rows()
    root = ET.fromstring(junit_xml(rows))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "rocev2"
    tcs = suite.findall("testcase")
    assert len(tcs) == len(rows)
    assert suite.get("failures") == "1" and suite.get("skipped") == "1"
    failed = [t for t in tcs if t.find("failure") is not None]
    assert [t.get("name") for t in failed] == ["no lossless drop"]
    assert failed[0].find("failure").get("message") == "2 lossless drops (bound 0 drops)"
    skipped = [t for t in tcs if t.find("skipped") is not None]
    assert skipped[0].get("classname") == "rocev2.8"
    props = {p.get("name"): p.get("value") for p in tcs[0].iter("property")}
    assert props["run_dir"] == "cases/rocev2.2" and props["bound"]


def test_markdown_has_every_row_and_the_scaling() -> None:
    md = markdown(_rows(), {"rocev2.2": "3:1 at 10 Mbit/s"}, "2x2x2")
    assert "1 failed, 1 cases not applicable" in md
    assert "| rocev2.8 Packet spray | - | n/a | needs spray | - |" in md
    assert "- **rocev2.2**: 3:1 at 10 Mbit/s" in md


def test_exit_status_needs_every_applicable_result_passed() -> None:
    rows = _rows()
    assert exit_status(rows) == 1
    passed = [r for r in rows if r.status == PASS]
    assert exit_status(passed) == 0
    assert exit_status(passed + [rows[-1]]) == 0  # N/A does not fail a plan...
    assert exit_status([rows[-1]]) == 1  # ...nor pass it alone


def test_fabric_file_lays_its_sections_over_the_case(tmp_path: Path) -> None:
    f = tmp_path / "f.yaml"
    f.write_text("fabric: {leaves: 4}\n")
    case = select("rocev2", ["2"])[0]
    before = copy.deepcopy(case.scenario)
    sc = with_fabric(case, read_fabric(f))
    assert sc["fabric"] == {"spines": 2, "leaves": 4, "hosts_per_leaf": 2}
    assert case.scenario == before
    parse_scenario(sc, case.key)
    f.write_text("qos: {pfc_enable: []}\n")
    with pytest.raises(ConfigError, match="qos: a case sets this itself"):
        read_fabric(f)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    run = CliRunner().invoke
    for args, want in ((["--plan", "x"], "--plan x: no such plan"),
                       (["--case", "99"], "--case 99: no such case"),
                       (["--fabric", str(tmp_path / "none.yaml")], "no such file")):
        res = run(app, ["conformance", *args])
        assert res.exit_code == 2, res.output
        assert want in res.output and "Traceback" not in res.output


def test_cli_lists_cases_with_na_reasons() -> None:
    res = CliRunner().invoke(app, ["conformance", "--plan", "rocev2", "--list"])
    assert res.exit_code == 0
    assert "rocev2.8 Packet spray: N/A (needs per-packet" in " ".join(res.output.split())


def test_the_plans_topologies_leave_out_only_the_cases_they_cannot_carry() -> None:
    """Topology 1 (one switch) has no upstream for PFC to spread to, no ECMP and no spine for
    the storm cases' pinned route; topology 2 (one spine) has no second uplink to balance
    over or to fail over to. Every other case fits, and its scenario parses on the topology's
    shape."""
    from testbed.conformance.plans import TOPOLOGIES

    def unfit(topo: str) -> set[str]:
        out = set()
        for k in select("all", None):
            if k.na is None:
                sc = with_fabric(k, {"fabric": TOPOLOGIES[topo]})
                if k.unfit(sc["fabric"]) is None:
                    parse_scenario(sc, k.key)  # it runs there: hosts and routes exist
                else:
                    out.add(k.key)
        return out

    assert unfit("1") == {"rocev2.5", "rocev2.7", "rocev2.10", "pfcwd.storm", "pfcwd.off"}
    assert unfit("2") == {"rocev2.7", "rocev2.10"}
    assert all(k.unfit(k.scenario["fabric"]) is None for k in select("all", None) if k.na is None)


def test_cli_topology_lists_what_does_not_fit_and_refuses_two_shapes(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["conformance", "--topology", "2", "--list"])
    assert res.exit_code == 0
    assert ("rocev2.7 Hashing and load balancing: N/A (on this fabric: needs two or more "
            "equal-cost uplinks") in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["conformance", "--topology", "3", "--list"])
    assert res.exit_code == 2 and "--topology 3: no such topology; choose 1 or 2" in res.output
    f = tmp_path / "f.yaml"
    f.write_text("fabric: {leaves: 4}\n")
    res = CliRunner().invoke(app, ["conformance", "--topology", "1", "--fabric", str(f),
                                   "--list"])
    assert res.exit_code == 2 and "both set the fabric's shape" in res.output
    assert "Traceback" not in res.output


def test_a_single_switch_needs_one_leaf() -> None:
    from testbed.config.models import FabricShape

    assert FabricShape(spines=0, leaves=1, hosts_per_leaf=4).leaf_ports == 4
    with pytest.raises(ValueError, match="spines: 0 with 2 leaves leaves them unconnected"):
        FabricShape(spines=0, leaves=2)
