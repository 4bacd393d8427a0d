"""`sudo testbed conformance` on real BMv2, as a user runs it: every applicable case of the
three plans passes on the default fabric with every run faithful, the JUnit file says so case
by case, and the not-applicable cases are skipped with their reason, never passed. Then the
plans catch what they exist to catch: ECN marking off fails the DCQCN cases' "ECN-CE seen" and
"CNPs", the watchdog off fails storm detection, and a hash without the UDP source port
fails the hashing case."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testbed.conformance.plans import cases, select
from testbed.conformance.report import FAIL, PASS
from testbed.conformance.runner import run_cases
from testbed.results.files import CONFORMANCE_CASES_DIR, CONFORMANCE_JUNIT_FILE

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.bmv2
def test_every_applicable_case_passes_and_junit_says_which(tmp_path: Path) -> None:
    out = tmp_path / "conf"
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "conformance", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    said = r.stderr  # the testbed's lines go where all its messages go (testbed.cli.output)
    suites = ET.parse(out / CONFORMANCE_JUNIT_FILE).getroot()
    tcs = {(tc.get("classname"), tc.get("name")): tc for tc in suites.iter("testcase")}
    applicable = [k for k in cases() if k.na is None]
    na = [k for k in cases() if k.na is not None]
    assert {k.key for k in applicable} | {k.key for k in na} == {c for c, _ in tcs}
    for k in applicable:
        for name, _fn in k.checks:
            tc = tcs[(k.key, name)]
            assert tc.find("failure") is None and tc.find("skipped") is None, (k.key, name)
        run = out / CONFORMANCE_CASES_DIR / k.key
        summary = json.loads((run / "summary.json").read_text())
        assert summary["fidelity"]["ok"] is True, (k.key, summary["fidelity"])
        assert (run / "report.html").is_file()
        assert f"PASS {k.key} faithful" in said
    for k in na:  # reported, with the missing feature, and never as passed
        tc = tcs[(k.key, k.title)]
        assert tc.find("skipped") is not None and k.na in tc.find("skipped").get("message")
        assert f"N/A  {k.key}" in said


def _broken(key: str, change) -> object:
    case = select("all", [key])[0]
    change(case.scenario)
    return case


@pytest.mark.bmv2
def test_each_broken_configuration_fails_its_case(
        tmp_path: Path) -> None:
    def no_ecn(sc: dict) -> None:
        sc["qos"]["ecn"] = {}

    def no_watchdog(sc: dict) -> None:
        sc["agent"]["pfc_watchdog"] = {"enabled": False}

    def no_sport(sc: dict) -> None:
        sc["ecmp"] = {"hash_fields": ["src_ip", "dst_ip", "ip_proto", "dst_port"]}

    broken = [_broken("rocev2.4", no_ecn), _broken("pfcwd.storm", no_watchdog),
              _broken("rocev2.7", no_sport)]
    rows = run_cases(broken, tmp_path, {}, say=lambda _m: None)
    status = {(r.key, r.check): r.status for r in rows}
    # the runs themselves are sound: what fails is the fabric's behaviour, not the emulation
    assert status[("rocev2.4", "faithful")] == PASS
    assert status[("pfcwd.storm", "faithful")] == PASS
    assert status[("rocev2.4", "ECN-CE seen on class 3")] == FAIL
    assert status[("rocev2.4", "CNPs at every sender")] == FAIL
    assert status[("rocev2.4", "no lossless drop")] == PASS  # PFC still holds the class
    # the tester sees it too: no CE reached a host, no CNP was sent; its PFC still matches
    assert status[("rocev2.4", "the tester's CE on class 3 within the switches' marks")] == FAIL
    assert status[("rocev2.4", "the tester's CNPs sent and received")] == FAIL
    assert status[("rocev2.4", "PFC on class 3 matches the tester's counter")] == PASS
    assert status[("pfcwd.storm", "storm detected within detection + polling")] == FAIL
    assert status[("pfcwd.storm", "queue restored after the storm")] == FAIL
    assert status[("rocev2.7", "faithful")] == PASS
    assert status[("rocev2.7", "ECMP members balanced")] == FAIL  # every QP on one member


@pytest.mark.bmv2
def test_classes_broken_fail_their_cases(tmp_path: Path) -> None:
    """PFC off on class 4 fails the dual-lossless case: class 4 drops and resends, and never
    pauses. rocev2.9's background moved to class 5, above the lossless class in the ports'
    strict priority, starves the lossless flows. Every ACK of case 11 in the paused class
    times out both of h1's QPs. Every run is faithful: class 4 and class 5 keep phantoms,
    which class 3's drains under (p4/lossless.p4, drain_under)."""
    def pfc_on_3_only(sc: dict) -> None:
        sc["qos"]["pfc_enable"] = [3]

    def background_in_5(sc: dict) -> None:
        for bg in sc["background"]:
            bg["tc"] = 5

    def acks_in_the_paused_class(sc: dict) -> None:
        for f in sc["flows"]:
            f.pop("ack_tc", None)

    broken = [_broken("pfc.dual", pfc_on_3_only), _broken("rocev2.9", background_in_5),
              _broken("rocev2.11", acks_in_the_paused_class)]
    rows = run_cases(broken, tmp_path, {}, say=lambda _m: None)
    status = {(r.key, r.check): r.status for r in rows}
    assert status[("rocev2.11", "faithful")] == PASS
    assert status[("rocev2.11", "ACK timeouts when ACKs share the paused class")] == PASS
    assert status[("rocev2.11", "no ACK timeout when ACKs travel in another class")] == FAIL
    assert status[("pfc.dual", "faithful")] == PASS
    assert status[("pfc.dual", "PFC seen on class 4")] == FAIL
    assert status[("pfc.dual", "no NAK or sequence error")] == FAIL  # class 4's drops resent
    assert status[("pfc.dual", "no lossless drop")] == PASS  # class 3 still holds
    assert status[("pfc.dual", "PFC seen on class 3")] == PASS
    assert status[("rocev2.9", "faithful")] == PASS
    assert status[("rocev2.9", "lossless flows keep their rate")] == FAIL
    assert status[("rocev2.9", "no PFC: the background holds no lossless flow back")] == FAIL


@pytest.mark.bmv2
@pytest.mark.parametrize(("topology", "runs", "not_there"), [
    ("1", ["rocev2.2", "pfc.lossless"], "rocev2.5"),  # one switch: nowhere for PFC to spread
    ("2", ["rocev2.1", "rocev2.5"], "rocev2.7"),  # one spine: both flows share it; no ECMP
])
def test_the_plans_topologies_run_the_cases_that_fit(tmp_path: Path, topology: str,
                                                     runs: list[str], not_there: str) -> None:
    """`testbed conformance --topology 1|2`: a representative subset passes on the plans' own
    topologies with every run faithful, and a case the shape cannot carry is N/A with why."""
    out = tmp_path / "conf"
    picks = [a for k in (*runs, not_there) for a in ("--case", k)]
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "conformance", "--topology",
                        topology, *picks, "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    suites = ET.parse(out / CONFORMANCE_JUNIT_FILE).getroot()
    tcs = list(suites.iter("testcase"))
    for key in runs:
        mine = [tc for tc in tcs if tc.get("classname") == key]
        assert mine and all(tc.find("failure") is None and tc.find("skipped") is None
                            for tc in mine), key
        summary = json.loads((out / CONFORMANCE_CASES_DIR / key / "summary.json").read_text())
        topo = json.loads((out / CONFORMANCE_CASES_DIR / key / "topology.json").read_text())
        assert summary["fidelity"]["ok"] is True, (key, summary["fidelity"])
        assert (len(topo["spines"]), len(topo["leaves"]), len(topo["hosts"])) == \
            {"1": (0, 1, 4), "2": (1, 2, 4)}[topology]  # the run was on the plans' shape
    skipped = [tc for tc in tcs if tc.get("classname") == not_there]
    assert len(skipped) == 1 and "on this fabric: needs" in skipped[0].find("skipped").get(
        "message")
