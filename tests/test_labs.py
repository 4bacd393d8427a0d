"""The classroom labs (labs/, testbed.labs): every lab is complete (sheet sections, files,
figures, links that resolve, checks that exist and accept their arguments); every check passes
a run that shows its phenomenon and fails one that does not, with its hint; and, on real
switches, every lab's reference solution passes its checker and its broken solution fails it
with the hint a student needs."""

from __future__ import annotations

import inspect
import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from testbed.cli.commands import app
from testbed.labs.catalog import SHEET_SECTIONS, Lab, all_labs, find_lab
from testbed.labs.checks import Line, grade, unknown_checks
from testbed.labs.cli import copy_starter
from testbed.labs.verdict import CHECKS
from testbed.run.scenario import load_scenario
from testbed.topology.validate import load_config
from tests.labfakes import fake_run, flow, qp_series, queue

LABS = all_labs()
IDS = [lab.name for lab in LABS]
runner = CliRunner()


def scenario_files(lab: Lab, folder: Path | None = None) -> list[Path]:
    folder = folder or lab.path
    return [folder / n for n in lab.spec.files if n.endswith(".yaml")
            and n not in ("answers.yaml", "fabric.yaml")]


# -- the catalog ----------------------------------------------------------------------------

def test_at_least_eight_labs_in_order() -> None:
    assert [lab.number for lab in LABS] == list(range(1, len(LABS) + 1))
    assert len(LABS) >= 8


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_lab_has_every_part(lab: Lab) -> None:
    for part in ("README.md", "instructor.md", "lab.yaml"):
        assert (lab.path / part).is_file(), f"{lab.name} lacks {part}"
    for name in lab.spec.files:
        assert lab.starter(name).is_file(), f"{lab.name}: starter {name} is missing"
    for variant in ("solution", "broken"):
        files = sorted(p.name for p in (lab.path / variant).iterdir())
        assert files, f"{lab.name}/{variant} is empty"
        assert set(files) <= set(lab.spec.files), f"{lab.name}/{variant}: {files}"
    pngs = list((lab.path / "figures").glob("*.png"))
    assert pngs, f"{lab.name} has no figure"
    for p in pngs:
        assert p.stat().st_size < 200_000, f"{p} is {p.stat().st_size} bytes"


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_sheet_has_the_sections_in_order(lab: Lab) -> None:
    heads = re.findall(r"^## (.+)$", lab.sheet.read_text(), re.M)
    found = [h for h in heads if h in SHEET_SECTIONS]
    assert found == list(SHEET_SECTIONS), f"{lab.name}: sections {heads}"
    text = lab.sheet.read_text()
    assert re.search(r"!\[[^\]]+\]\(figures/[^)]+\.png\)", text), "no figure in the sheet"
    assert "instructor.md" in text
    n = len(lab.spec.checks)
    assert f"`{n} of {n} passed`" in text, "the sheet must say what a full pass prints"
    head = (lab.path / "instructor.md").read_text()
    assert "## Answers" in head and "## Common mistakes" in head


def _links(text: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_every_relative_link_and_figure_resolves(lab: Lab) -> None:
    for doc in ("README.md", "instructor.md"):
        for target in _links((lab.path / doc).read_text()):
            path = (lab.path / target.split("#")[0]).resolve()
            assert path.exists(), f"{lab.name}/{doc} links to {target}, which is not there"


def test_readme_lists_every_lab() -> None:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for lab in LABS:
        assert f"labs/{lab.name}/README.md" in text, f"README.md does not list {lab.name}"


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_checks_exist_and_take_their_arguments(lab: Lab) -> None:
    assert unknown_checks(lab) == []
    for c in lab.spec.checks:
        inspect.signature(CHECKS[c.check]).bind(None, None, **c.args)


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_every_file_loads_and_every_graded_run_has_its_file(lab: Lab) -> None:
    """A student can produce every run the checks grade: its scenario is one of the starter
    files, and every starter, solution and broken file is valid as it stands."""
    names = set()
    for folder in (lab.path, lab.path / "solution", lab.path / "broken"):
        for p in folder.glob("*.yaml"):
            if p.name == "fabric.yaml":
                load_config(p)
            elif p.name not in ("answers.yaml", "lab.yaml"):
                sc = load_scenario(p)
                if folder == lab.path:
                    names.add(sc.cfg.name)
    assert {c.run for c in lab.spec.checks if c.run} <= names


# -- lab 1: answers graded against the topology --------------------------------------------

def _answers(folder: Path, **answers) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "answers.yaml").write_text(yaml.safe_dump(answers))
    return folder


def test_lab1_answers_are_graded_from_the_topology(tmp_path: Path) -> None:
    lab = find_lab(1)
    good = yaml.safe_load(lab.solution("answers.yaml").read_text())
    lines = grade(lab, _answers(tmp_path / "a", **good), tmp_path / "none")
    assert all(ln.verdict.ok for ln in lines), [ln.verdict for ln in lines]
    # the student's own fabric.yaml counts: with 3 parallel links, 4 paths is wrong
    folder = _answers(tmp_path / "b", **good)
    (folder / "fabric.yaml").write_text("fabric: {spines: 2, leaves: 3, hosts_per_leaf: 2, "
                                        "parallel_links: 3}\n")
    bad = {ln.spec.id: ln.verdict for ln in grade(lab, folder, tmp_path / "none")}
    assert not bad["paths"].ok and "parallel link" in bad["paths"].hint
    assert not bad["ports"].ok and bad["address"].ok


def test_lab1_unanswered_questions_fail(tmp_path: Path) -> None:
    lab = find_lab(1)
    folder = tmp_path / "lab"
    copy_starter(lab, folder)
    lines = grade(lab, folder, folder / "results")
    assert not any(ln.verdict.ok for ln in lines)
    assert all("not answered" in ln.verdict.reason for ln in lines)


# -- the checks on synthetic runs ------------------------------------------------------------

def _lab4(tmp: Path, **summary) -> list:
    flows = {**flow("a", "h1", "h4", 1, 1_500_000), **flow("b", "h2", "h4", 2, 1_400_000)}
    fake_run(tmp, "lab04-lossless", {"qos": {"pfc_enable": [3]}}, flows, **summary)
    return grade(find_lab(4), tmp, tmp)


def test_lossless_passes_a_congested_run_without_drops(tmp_path: Path) -> None:
    v = {ln.spec.id: ln.verdict for ln in _lab4(tmp_path, pfc_frames_sent={"leaf2": 40})}
    assert v["paused"].ok and v["lossless"].ok
    assert not v["lossy"].ok and "no run of scenario lab04-lossy" in v["lossy"].reason


def test_lossless_fails_drops_and_a_run_that_was_never_congested(tmp_path: Path) -> None:
    v = {ln.spec.id: ln.verdict for ln in _lab4(tmp_path / "a", pfc_frames_sent={"leaf2": 9},
                                                 kernel_drops_lossless=3)}
    assert not v["lossless"].ok and "3 packets dropped" in v["lossless"].reason
    v = {ln.spec.id: ln.verdict for ln in _lab4(tmp_path / "b")}
    assert not v["lossless"].ok and "never congested" in v["lossless"].reason


def test_no_check_passes_a_run_whose_flows_moved_nothing(tmp_path: Path) -> None:
    flows = {**flow("a", "h1", "h4", 1, 0), **flow("b", "h2", "h4", 2, 0)}
    fake_run(tmp_path, "lab04-lossless", {"qos": {"pfc_enable": [3]}}, flows,
             pfc_frames_sent={"leaf2": 40})
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(4), tmp_path, tmp_path)}
    assert not v["lossless"].ok and "moved almost no bytes" in v["lossless"].reason


def test_a_run_not_faithful_or_without_a_verdict_is_not_graded(tmp_path: Path) -> None:
    """A grade rests on a faithful run: a run the guard flagged, or one whose summary has no
    verdict at all, fails its questions with why and what to do, never a pass with a note."""
    v = {ln.spec.id: ln.verdict for ln in _lab4(
        tmp_path / "a", pfc_frames_sent={"leaf2": 40},
        fidelity={"ok": False, "reasons": ["BMv2 held a packet 80 ms"], "checks": []})}
    assert not v["lossless"].ok and "not graded" in v["lossless"].reason
    assert "BMv2 held a packet 80 ms" in v["lossless"].reason
    assert "sudo testbed run" in v["lossless"].hint
    v = {ln.spec.id: ln.verdict for ln in _lab4(tmp_path / "b", pfc_frames_sent={"leaf2": 40},
                                                 fidelity=None)}
    assert not v["lossless"].ok and "no fidelity verdict" in v["lossless"].reason
    v = {ln.spec.id: ln.verdict for ln in _lab4(tmp_path / "c", pfc_frames_sent={"leaf2": 40})}
    assert v["lossless"].ok, v["lossless"]


def test_lossy_run_needs_drops_and_pfc_off(tmp_path: Path) -> None:
    flows = {**flow("a", "h1", "h4", 1, 900_000, retransmitted=40)}
    drops = [queue("leaf2", 2, 2.0, drops=12, backlog_packets=40)]
    fake_run(tmp_path / "a", "lab04-lossy", {"qos": {"pfc_enable": []}}, flows,
             telemetry=drops)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(4), tmp_path, tmp_path / "a")}
    assert v["lossy"].ok, v["lossy"]
    fake_run(tmp_path / "b", "lab04-lossy", {"qos": {"pfc_enable": [3]}}, flows)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(4), tmp_path, tmp_path / "b")}
    assert not v["lossy"].ok and "pfc_enable: []" in v["lossy"].hint


def test_lossy_run_may_starve_a_flow_but_not_skip_one(tmp_path: Path) -> None:
    """Go-Back-N's timeouts can leave one flow of a lossy incast with almost nothing (seen in a
    real run: 94 KB of 4.5 MB): the run still shows drops and resends. A flow that neither
    delivered nor resent anything never ran."""
    drops = [queue("leaf2", 2, 2.0, drops=12, backlog_packets=40)]
    flows = {**flow("a", "h1", "h4", 1, 2_000_000, retransmitted=300),
             **flow("c", "h3", "h4", 3, 90_000, retransmitted=400)}
    fake_run(tmp_path / "a", "lab04-lossy", {"qos": {"pfc_enable": []}}, flows, telemetry=drops)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(4), tmp_path, tmp_path / "a")}
    assert v["lossy"].ok and "flow c got 90000 bytes" in v["lossy"].reason, v["lossy"]
    flows = {**flow("a", "h1", "h4", 1, 2_000_000, retransmitted=300),
             **flow("c", "h3", "h4", 3, 0)}
    fake_run(tmp_path / "b", "lab04-lossy", {"qos": {"pfc_enable": []}}, flows, telemetry=drops)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(4), tmp_path, tmp_path / "b")}
    assert not v["lossy"].ok and "flow(s) c moved almost no bytes" in v["lossy"].reason


def _lab2(tmp: Path, mine_ecn: dict, marked: int) -> dict:
    flows = {**flow("a", "h1", "h4", 1, 1_500_000), **flow("b", "h3", "h4", 2, 1_400_000)}
    tx = ("leaf2", "RoceEgress.tx_port_tc", 2 * 8 + 3, 1000, 4_000_000)
    fake_run(tmp, "lab02-baseline", {}, flows,
             counters=[tx, ("leaf2", "RoceIngress.lossless.ecn_marked", 19, 400, 0)])
    fake_run(tmp, "lab02-mine", {"qos": {"ecn": mine_ecn}}, flows,
             counters=[tx, ("leaf2", "RoceIngress.lossless.ecn_marked", 19, marked, 0)])
    return {ln.spec.id: ln.verdict for ln in grade(find_lab(2), tmp, tmp)}


def test_marking_check_follows_the_students_profile(tmp_path: Path) -> None:
    prof = {3: {"kmin_bytes": 4200, "kmax_bytes": 16800, "pmax": 1.0}}
    v = _lab2(tmp_path / "a", prof, 970)
    assert v["baseline"].ok and v["moved"].ok
    assert not _lab2(tmp_path / "b", prof, 500)["moved"].ok  # the curve did not move enough
    v = _lab2(tmp_path / "c", {0: prof[3]}, 0)
    assert not v["moved"].ok and "qos.ecn.3" in v["moved"].hint


def test_dcqcn_checks(tmp_path: Path) -> None:
    flows, rows = {}, {}
    for i, (name, host, start) in enumerate((("first", "h1", 1.3), ("second", "h2", 3.5),
                                             ("third", "h3", 3.5))):
        flows.update(flow(name, host, "h4", 10 + i, 1_000_000, cnps=5))
        rate = 9e6 if name == "first" else 3.3e6
        rows[host] = qp_series(10 + i, rate, 8.0, start, rate_bps=2e6, alpha=0.5,
                               cnps_received=5)
        if name == "first":  # alone at 9 Mbit/s, then a third of the link
            later = qp_series(10, 3.3e6, 8.0, 3.5, rate_bps=2e6, cnps_received=5)
            base = int(9e6 / 8 * 2.2)
            rows[host] = [r for r in rows[host] if r["t_s"] < 3.5] + [
                {**r, "bytes": r["bytes"] + base} for r in later]
    fake_run(tmp_path, "lab03-dcqcn", {"duration_s": 7}, flows, qp_rows=rows)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(3), tmp_path, tmp_path)}
    assert all(x.ok for x in v.values()), v
    fake_run(tmp_path / "off", "lab03-dcqcn", {"duration_s": 7, "endpoints": {"dcqcn": False}},
             flows, qp_rows=rows)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(3), tmp_path, tmp_path / "off")}
    assert not v["reacted"].ok and "dcqcn: true" in v["reacted"].hint
    # DCQCN off, and PFC alone starved the third sender (as one run of the broken file did):
    # the hint is still DCQCN's, not the generic "moved almost no bytes".
    starved = {**flows, **flow("third", "h3", "h4", 12, 262_144, cnps=0)}
    rows3 = {**rows, "h3": qp_series(12, 0.5e6, 8.0, 3.5, rate_bps=10e6, cnps_received=0)}
    fake_run(tmp_path / "starved", "lab03-dcqcn",
             {"duration_s": 7, "endpoints": {"dcqcn": False}}, starved, qp_rows=rows3)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(3), tmp_path, tmp_path / "starved")}
    assert "moved almost no bytes" not in v["reacted"].reason + v["fair"].reason
    assert not v["reacted"].ok and "dcqcn: true" in v["reacted"].hint
    assert not v["fair"].ok and "DCQCN on" in v["fair"].hint


def _lab3_shares(tmp: Path, rates: dict[str, float], cnps: dict[str, int],
                 dcqcn: bool = True) -> dict:
    """Lab 3's run with the three flows at ``rates`` (bit/s) from 3.5 s on, each sender
    having received ``cnps``; the checker's verdicts by id."""
    flows, rows = {}, {}
    for i, (name, host) in enumerate((("first", "h1"), ("second", "h2"), ("third", "h3"))):
        flows.update(flow(name, host, "h4", 10 + i, 1_000_000, cnps=cnps[name]))
        rows[host] = qp_series(10 + i, rates[name], 8.0, 3.5, rate_bps=2e6, alpha=0.5,
                               cnps_received=cnps[name])
    fake_run(tmp, "lab03-dcqcn", {"duration_s": 7, "endpoints": {"dcqcn": dcqcn}}, flows,
             qp_rows=rows)
    return {ln.spec.id: ln.verdict for ln in grade(find_lab(3), tmp, tmp)}


def test_dcqcn_shares_pass_uneven_but_not_starved_nor_without_dcqcn(tmp_path: Path) -> None:
    """The fairness question grades what holds on every right run: each flow gets a real share
    (a third of an equal share) with DCQCN cutting each; Jain's index is said, not graded (a
    right run's index varies: one reference run gave 0.78 with 1.6, 2.1 and 5.2 Mbit/s). A
    starved flow, a flow that got no CNP, or DCQCN off fails with the setup hint."""
    uneven = {"first": 1.6e6, "second": 2.1e6, "third": 5.2e6}
    v = _lab3_shares(tmp_path / "a", uneven, {"first": 7, "second": 5, "third": 6})
    assert v["fair"].ok and "Jain's index 0.78" in v["fair"].reason, v["fair"]
    assert v["fair"].warning is None
    starved = {"first": 0.6e6, "second": 2.1e6, "third": 6.2e6}
    v = _lab3_shares(tmp_path / "s", starved, {"first": 7, "second": 5, "third": 6})
    assert not v["fair"].ok and "less than 33% of an equal share" in v["fair"].hint
    v = _lab3_shares(tmp_path / "b", uneven, {"first": 7, "second": 5, "third": 0})
    assert not v["fair"].ok and v["fair"].warning is None
    assert v["fair"].hint == "all flows must be sending then, to one receiver, with DCQCN on"
    v = _lab3_shares(tmp_path / "c", uneven, {"first": 7, "second": 5, "third": 6}, dcqcn=False)
    assert not v["fair"].ok and v["fair"].warning is None and "DCQCN on" in v["fair"].hint
    even = {"first": 2.5e6, "second": 2.4e6, "third": 2.6e6}
    v = _lab3_shares(tmp_path / "d", even, {"first": 4, "second": 3, "third": 3})
    assert v["fair"].ok and v["fair"].warning is None


def _by_id(lines: list) -> dict:
    return {ln.spec.id: ln.verdict for ln in lines}


def test_deadlock_check_needs_the_frozen_queues(tmp_path: Path) -> None:
    stuck = [{"switch": "spine1", "port": 2, "tc": 3, "backlog_bytes_min": 90000,
              "pfc_frames": 12, "window_s": 3.0}] * 3
    flows = flow("a", "h1", "h3", 1, 100_000)
    sc = {"fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 1}}
    fake_run(tmp_path / "a", "lab06-deadlock", sc, flows,
             deadlock={"deadlock": True, "stuck_after_stop": stuck, "window_s": [6, 9],
                       "watchdog_detections": []})
    assert _by_id(grade(find_lab(6), tmp_path, tmp_path / "a"))["frozen"].ok
    fake_run(tmp_path / "b", "lab06-deadlock", sc, flows,
             deadlock={"deadlock": False, "stuck_after_stop": [], "window_s": [6, 9],
                       "watchdog_detections": []})
    v = _by_id(grade(find_lab(6), tmp_path, tmp_path / "b"))["frozen"]
    assert not v.ok and "no deadlock" in v.reason and "cycle" in v.hint


def test_cycle_check_reads_the_routes_of_the_run(tmp_path: Path) -> None:
    """The routes of the reference solution close the cycle; the broken one's do not, and its
    reason shows each flow's path."""
    lab = find_lab(6)
    for variant, ok in (("solution", True), ("broken", False)):
        sc = yaml.safe_load((lab.path / variant / "deadlock.yaml").read_text())
        fake_run(tmp_path / variant, "lab06-deadlock", sc, flow("a", "h1", "h3", 1, 100_000))
        v = {ln.spec.id: ln.verdict for ln in grade(lab, tmp_path, tmp_path / variant)}
        assert v["cycle"].ok is ok, v["cycle"]
    assert "b: leaf2 -> spine1 -> leaf4" in v["cycle"].reason


def test_watchdog_checks(tmp_path: Path) -> None:
    from testbed.results.telemetry import EventRow

    det = {"switch": "leaf1", "port": 2, "tc": 3, "stalled_at_s": 3.0, "detected_at_s": 3.45,
           "latency_s": 0.45, "restored_at_s": 4.5}
    ev = [EventRow(3.45, "leaf1", 2, 3, "storm_detected", 0, None,
                   "action=drop backlog_packets=30"),
          EventRow(4.5, "leaf1", 2, 3, "storm_restored", 0, None, "after 1.05 s, dropped=120")]
    sc = {"fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 1},
          "agent": {"pfc_watchdog": {"enabled": True, "action": "drop"}}}
    dl = {"deadlock": False, "stuck_after_stop": [], "window_s": [6, 9],
          "watchdog_detections": [det]}
    fake_run(tmp_path / "a", "lab07-watchdog", sc, flow("a", "h1", "h3", 1, 500_000),
             events=ev, deadlock=dl)
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(7), tmp_path, tmp_path / "a")}
    assert all(x.ok for x in v.values()), v
    assert "dropped 120 packets" in v["cost"].reason
    sc["agent"]["pfc_watchdog"]["action"] = "alert"
    stuck = [{"switch": "leaf1", "port": 2, "tc": 3, "backlog_bytes_min": 1, "pfc_frames": 1,
              "window_s": 3}]
    fake_run(tmp_path / "b", "lab07-watchdog", sc, flow("a", "h1", "h3", 1, 500_000),
             deadlock={**dl, "deadlock": True, "stuck_after_stop": stuck})
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(7), tmp_path, tmp_path / "b")}
    assert not v["broken"].ok and "action: drop" in v["broken"].hint


def test_a_deadlock_may_freeze_a_flow_before_its_first_byte(tmp_path: Path) -> None:
    """Seen in a real run of lab 7's broken solution at 15 Mbit/s links: the cycle froze before flow
    d delivered a byte. The flow still sent packets, so the run is graded on the deadlock (the
    hint names the action); a flow that sent nothing at all never ran."""
    sc = {"fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 1},
          "agent": {"pfc_watchdog": {"enabled": True, "action": "alert"}}}
    det = {"switch": "leaf1", "port": 2, "tc": 3, "stalled_at_s": 1.0, "detected_at_s": 1.45,
           "latency_s": 0.45, "restored_at_s": None}
    stuck = [{"switch": "leaf1", "port": 2, "tc": 3, "backlog_bytes_min": 1, "pfc_frames": 1,
              "window_s": 3}]
    dl = {"deadlock": True, "stuck_after_stop": stuck, "window_s": [6, 9],
          "watchdog_detections": [det]}
    for variant, sent in (("sent", 40), ("silent", 0)):
        flows = {**flow("a", "h1", "h3", 1, 500_000), **flow("d", "h3", "h1", 2, 0,
                                                              packets_sent=sent)}
        fake_run(tmp_path / variant, "lab07-watchdog", sc, flows, deadlock=dl)
        v = {ln.spec.id: ln.verdict for ln in grade(find_lab(7), tmp_path, tmp_path / variant)}
        if sent:
            assert v["detected"].ok, v["detected"]
            assert not v["broken"].ok and "action: drop" in v["broken"].hint, v["broken"]
        else:
            assert not v["broken"].ok and "flow(s) d moved almost no bytes" in v["broken"].reason


def test_ecmp_checks(tmp_path: Path) -> None:
    def up(b3: int, b4: int) -> list[tuple]:
        return [("leaf1", "RoceEgress.tx_port_tc", 3 * 8 + 3, 1, b3),
                ("leaf1", "RoceEgress.tx_port_tc", 4 * 8 + 3, 1, b4)]
    f = flow("bulk", "h1", "h3", 1, 3_000_000)
    no_sport = {"ecmp": {"hash_fields": ["src_ip", "dst_ip", "ip_proto", "dst_port"]}}
    fake_run(tmp_path, "lab08-polarized", no_sport, f, counters=up(3_000_000, 0))
    fake_run(tmp_path, "lab08-spread", {}, f, counters=up(1_600_000, 1_400_000))
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(8), tmp_path, tmp_path)}
    assert v["polarized"].ok and v["spread"].ok
    fake_run(tmp_path, "lab08-spread", no_sport, f, counters=up(3_000_000, 0),
             stamp="20260101-000001")  # a newer try replaces the older one
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(8), tmp_path, tmp_path)}
    assert not v["spread"].ok and "src_port" in v["spread"].hint


def test_victim_checks(tmp_path: Path) -> None:
    sc = {"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 3}}
    incast = flow("incast1", "h1", "h4", 1, 900_000, cnps=9)
    for name, rate, dcqcn in (("lab05-pfc-only", 2.5e6, False), ("lab05-dcqcn", 6e6, True)):
        fake_run(tmp_path, name, {**sc, "duration_s": 6, "endpoints": {"dcqcn": dcqcn}},
                 {**incast, **flow("victim", "h3", "h6", 7, int(rate / 8 * 5))},
                 qp_rows={"h3": qp_series(7, rate, 7.0)}, pfc_frames_sent={"spine1": 30})
    v = {ln.spec.id: ln.verdict for ln in grade(find_lab(5), tmp_path, tmp_path)}
    assert v["victim"].ok and v["helped"].ok, v


# -- the commands ----------------------------------------------------------------------------

def test_lab_list_show_start_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = runner.invoke(app, ["lab", "list"])
    assert res.exit_code == 0
    for lab in LABS:
        assert lab.spec.title in res.output
    res = runner.invoke(app, ["lab", "show", "6"])
    assert res.exit_code == 0 and "deadlock" in res.output.lower()
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["lab", "start", "1"])
    assert res.exit_code == 0 and (tmp_path / "lab-01" / "answers.yaml").exists()
    (tmp_path / "lab-01" / "answers.yaml").write_text(
        find_lab(1).solution("answers.yaml").read_text())
    assert "kept" in runner.invoke(app, ["lab", "start", "1"]).output  # never overwritten
    res = runner.invoke(app, ["lab", "check", "1"])
    assert res.exit_code == 0, res.output
    shutil.copy(find_lab(1).broken("answers.yaml"), tmp_path / "lab-01" / "answers.yaml")
    res = runner.invoke(app, ["lab", "check", "1"])
    assert res.exit_code == 1 and "FAIL" in res.output and "hint:" in res.output


def test_start_under_sudo_gives_the_files_to_the_student(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    owned: dict[str, tuple[int, int]] = {}
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "chown", lambda p, u, g: owned.__setitem__(Path(p).name, (u, g)))
    monkeypatch.setenv("SUDO_UID", "4242")
    monkeypatch.setenv("SUDO_GID", "4343")
    res = runner.invoke(app, ["lab", "start", "6", str(tmp_path / "mine")])
    assert res.exit_code == 0, res.output
    assert owned == {"mine": (4242, 4343), "deadlock.yaml": (4242, 4343)}


def test_unknown_lab_is_one_line(tmp_path: Path) -> None:
    res = runner.invoke(app, ["lab", "show", "99"])
    assert res.exit_code == 2 and "there is no lab 99" in res.output
    assert "Traceback" not in res.output


def test_lab1_broken_answers_fail_with_their_hints(tmp_path: Path) -> None:
    lab = find_lab(1)
    folder = tmp_path / "lab"
    copy_starter(lab, folder)
    shutil.copy(lab.broken("answers.yaml"), folder / "answers.yaml")
    v = {ln.spec.id: ln.verdict for ln in grade(lab, folder, folder / "results")}
    assert not v["paths"].ok and "parallel link" in v["paths"].hint
    assert not v["ports"].ok and "hosts first" in v["ports"].hint
    assert v["address"].ok and v["entropy"].ok


# -- end to end: each lab's reference and broken solutions on real switches ------------------

#: lab -> (the question its broken solution fails, words the hint must hold)
BROKEN = {2: ("moved", "qos.ecn.3"), 3: ("reacted", "dcqcn: true"),
          4: ("lossy", "pfc_enable: []"), 5: ("helped", "ECN-mark"), 6: ("frozen", "cycle"),
          7: ("broken", "action: drop"), 8: ("spread", "src_port")}


def _do_lab(lab: Lab, variant: str, folder: Path, reuse: Path | None = None) -> list[Line]:
    """Start the lab in ``folder``, put the variant's files in, run what they change once (the
    other runs are copied from ``reuse``), and grade the folder as `testbed lab check` does."""
    from testbed.run.scenario_run import run_scenario

    copy_starter(lab, folder)
    changed = sorted(p.name for p in (lab.path / variant).iterdir())
    for name in sorted(p.name for p in (lab.path / "solution").iterdir()):
        shutil.copy(lab.solution(name), folder / name)
    for name in changed:
        shutil.copy(lab.path / variant / name, folder / name)
    results = folder / "results"
    if reuse is not None:
        shutil.copytree(reuse, results)
    for p in scenario_files(lab, folder):
        if reuse is None or p.name in changed:
            run_scenario(load_scenario(p), results, progress=lambda _m: None)
    return grade(lab, folder, results)


def _lines(lines: list) -> str:
    return "\n".join(f"{ln.spec.id}: {ln.verdict}" for ln in lines)


@pytest.mark.bmv2
@pytest.mark.parametrize("number", [
    pytest.param(n, id=f"lab{n}") for n in sorted(BROKEN)])
def test_reference_passes_and_broken_fails_with_its_hint(number: int, tmp_path: Path) -> None:
    lab = find_lab(number)
    good = _do_lab(lab, "solution", tmp_path / "solution")
    assert all(ln.verdict.ok for ln in good), _lines(good)
    question, hint = BROKEN[number]
    bad = _do_lab(lab, "broken", tmp_path / "broken", reuse=tmp_path / "solution" / "results")
    v = {ln.spec.id: ln.verdict for ln in bad}
    assert not v[question].ok, _lines(bad)
    assert hint in v[question].hint, _lines(bad)
