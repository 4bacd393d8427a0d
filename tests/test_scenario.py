"""Scenario files: the shipped ones load; each kind of mistake gets its own clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.config.models import ConfigError
from testbed.run.scenario import load_scenario, parse_scenario

REPO = Path(__file__).resolve().parent.parent
BASE = {"fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 1}, "duration_s": 10,
        "flows": [{"name": "a", "src": "h1", "dst": "h3", "count": 1}]}


def problems(extra: dict) -> str:
    data = {**BASE, **extra}
    with pytest.raises(ConfigError) as info:
        parse_scenario(data)
    return info.value.render()


def test_shipped_scenarios_load(tmp_path: Path, monkeypatch) -> None:
    """Every shipped scenario loads; those whose links run at `auto` (every host busy) load on a
    machine with a calibration profile, and pick a rate below the default 10 Mbit/s on a
    2-core one (test_budget.py's hand-picked profile), where their load at 10 is over budget."""
    from testbed.budget import calibration_store
    from testbed.budget.calibration_store import write_profile
    from testbed.budget.cores import BuildCost, Profile

    path = tmp_path / "lib" / "calibration.json"
    write_profile(Profile(measured_at="2026-12-03T17:00:00+00:00", cores=2, background_cores=0,
                          builds={b: BuildCost(us_per_pass=200.0, idle_cores=0.01)
                                  for b in ("default", "fast")},
                          endpoint_us_per_frame=100.0, endpoint_us_per_frame_per_qp=0.0,
                   endpoint_idle_cores=0.005,
                          agent_us_per_wakeup=200.0, agent_wakeups_per_s=50.0), path)
    monkeypatch.setenv(calibration_store.ENV, str(path))
    files = sorted((REPO / "scenarios").glob("*.yaml"))
    assert len(files) >= 5
    auto = {}
    for f in files:
        sc = load_scenario(f)
        if sc.auto:
            auto[f.stem] = sc.cfg.fabric.host_link_mbps
    assert set(auto) == {"permutation", "all-to-all"}
    assert all(0 < rate < 10 for rate in auto.values()), auto


def test_deadlock_scenario_builds_the_bounce_routes() -> None:
    sc = load_scenario(REPO / "scenarios" / "deadlock-watchdog-off.yaml")
    from testbed.topology.graph import compute_routes

    def port_to(sw: str, prefix: str) -> list[str]:
        s = sc.topo.switch(sw)
        r = next(r for r in compute_routes(sc.topo, s) if r.prefix == prefix)
        return [s.ports[nh.port].peer for nh in r.nexthops]

    assert port_to("leaf1", "10.0.3.0/24") == ["spine1"]
    assert port_to("spine1", "10.0.3.0/24") == ["leaf2"]
    assert port_to("leaf2", "10.0.3.0/24") == ["spine2"]
    assert port_to("spine2", "10.0.4.0/24") == ["leaf1"]


def test_unknown_host() -> None:
    msg = problems({"flows": [{"name": "a", "src": "h9", "dst": "h3", "count": 1}]})
    assert "flows.0.src: unknown host 'h9'" in msg


def test_link_that_does_not_exist() -> None:
    msg = problems({"faults": [{"at_s": 1, "link_down": ["leaf1", "leaf2"]}]})
    assert "faults.0.link_down: there is no link leaf1-leaf2" in msg


def test_time_past_the_end() -> None:
    msg = problems({"faults": [{"at_s": 12, "link_down": ["spine1", "leaf1"]}]})
    assert "faults.0.at_s: 12.0 is past the end (duration_s 10" in msg
    msg = problems({"flows": [{"name": "a", "src": "h1", "dst": "h3", "count": 1,
                               "start_s": 11}]})
    assert "flows.0.start_s" in msg and "past the end" in msg


def test_watchdog_time_out_of_range() -> None:
    msg = problems({"agent": {"pfc_watchdog": {"enabled": True, "detection_time_ms": 50}}})
    assert "agent.pfc_watchdog.detection_time_ms" in msg and "100" in msg
    msg = problems({"agent": {"pfc_watchdog": {"restoration_time_ms": 70000}}})
    assert "agent.pfc_watchdog.restoration_time_ms" in msg


def test_route_via_a_non_neighbour() -> None:
    msg = problems({"routes": [{"switch": "leaf1", "prefix": "10.0.3.0/24", "via": "leaf2"}]})
    assert "routes.0: leaf1 has no link to 'leaf2'" in msg


#: Bad scenarios, inline: (YAML on top of BASE, what the one-line message must say; its first
#: part is the field the line starts with).
BAD_SCENARIOS = {
    "flow in a class no DSCP reaches": (
        "qos: {dscp_to_tc_map: {24: 3, 48: 6}}\n"
        "flows: [{name: a, src: h1, dst: h3, count: 1, tc: 5}]",
        ["flows.0.tc", "no DSCP reaches class 5", "e.g. qos.dscp_to_tc_map: {40: 5}"]),
    "ACKs in a class no DSCP reaches": (
        "qos: {dscp_to_tc_map: {26: 3, 48: 6}}\n"
        "flows: [{name: a, src: h1, dst: h3, count: 1, ack_tc: 4}]",
        ["flows.0.ack_tc", "no DSCP reaches class 4", "e.g. qos.dscp_to_tc_map: {32: 4}"]),
    "default class 3 flow with class 3 unmapped": (
        "qos: {dscp_to_tc_map: {48: 6}, pfc_enable: [], ecn: {}}",
        ["flows.0.tc", "no DSCP reaches class 3", "(0, 6)"]),
    "parallel link past the last": (
        "fabric: {spines: 2, leaves: 4, hosts_per_leaf: 1, parallel_links: 2}\n"
        "faults: [{at_s: 1, link_down: [spine1, leaf1, 3]}]",
        ["faults.0.link_down", "spine1-leaf1 has 2 parallel link(s)", "1..2"]),
    "parallel link zero": (
        "faults: [{at_s: 1, link_down: [spine1, leaf1, 0]}]",
        ["faults.0.link_down", "[switch, switch, N]", "N from 1"]),
    "link of one switch": (
        "faults: [{at_s: 1, link_up: [spine1]}]", ["faults.0.link_up", "[switch, switch]"]),
    "link index not a number": (
        "faults: [{at_s: 1, link_up: [spine1, leaf1, second]}]",
        ["faults.0.link_up", "[switch, switch, N]"]),
    "index on a link that does not exist": (
        "faults: [{at_s: 1, link_down: [leaf1, leaf2, 1]}]",
        ["faults.0.link_down", "there is no link leaf1-leaf2"]),
}


@pytest.mark.parametrize("name", sorted(BAD_SCENARIOS))
def test_bad_scenario_gets_a_named_message(name: str) -> None:
    import yaml

    text, expected = BAD_SCENARIOS[name]
    msg = problems(yaml.safe_load(text))
    for part in expected:
        assert part in msg, f"{part!r} not in:\n{msg}"
    assert any(line.startswith(f"  - {expected[0]}: ") for line in msg.splitlines()), msg


def test_remapped_class_and_one_parallel_link_are_accepted() -> None:
    sc = parse_scenario({
        **BASE, "fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 1, "parallel_links": 2},
        "qos": {"dscp_to_tc_map": {24: 3, 48: 6}},
        "faults": [{"at_s": 1, "link_down": ["spine1", "leaf1", 2]},
                   {"at_s": 2, "link_up": ["leaf1", "spine1"]}]})
    assert sc.cfg.qos.tc_to_dscp()[3] == 24
    assert sc.extras.faults[0].link_down == ("spine1", "leaf1", 2)
    assert sc.extras.faults[1].link_up == ("leaf1", "spine1")


def test_every_mistake_is_listed_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario({**BASE, "flows": [{"name": "a", "src": "h9", "dst": "h3", "count": 1}],
                        "faults": [{"at_s": 30, "link_up": ["x", "y"]}]})
    assert len(info.value.problems) == 3


def test_cli_reports_mistakes_without_traceback(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("fabric: {spines: 2, leaves: 2, hosts_per_leaf: 1}\nduration_s: 5\n"
                 "flows: [{name: a, src: h1, dst: h7, count: 1}]\n")
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(f)],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2
    assert "flows.0.dst: unknown host 'h7'" in r.stderr and "Traceback" not in r.stderr
