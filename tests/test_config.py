"""Config validation: a bad file gets one clear line per problem, naming field and fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from testbed.config.models import ConfigError, FabricConfig
from testbed.topology.validate import load_config

BAD_FILES = {
    "negative spines": ("fabric: {spines: -1}", ["fabric.spines", "greater than or equal to 0"]),
    "no spine for four leaves": ("fabric: {spines: 0, leaves: 4}",
                                 ["fabric: spines: 0 with 4 leaves", "use leaves: 1"]),
    "unknown top section": ("fabrik: {spines: 2}", ["fabrik: unknown field", "fabric"]),
    "unknown fabric field": ("fabric: {spine: 2}", ["fabric.spine: unknown field", "spines"]),
    "spines not a number": ("fabric: {spines: two}", ["fabric.spines", "integer"]),
    "too many leaves": ("fabric: {leaves: 300}", ["fabric.leaves", "250"]),
    "negative rate": ("fabric: {host_link_mbps: -5}", ["fabric.host_link_mbps", "greater than 0"]),
    "mtu too small": ("fabric: {mtu: 1000}", ["fabric.mtu", "1500"]),
    "unknown hash field": ("ecmp: {hash_fields: [src_ip, vlan]}", ["ecmp.hash_fields", "src_port"]),
    "empty hash fields": ("ecmp: {hash_fields: []}", ["ecmp.hash_fields", "at least 1"]),
    "hash field twice": ("ecmp: {hash_fields: [src_ip, src_ip]}", ["ecmp.hash_fields", "twice"]),
    "bad seed": ("ecmp: {seed: random}", ["ecmp.seed", "per_switch"]),
    "seed too big": ("ecmp: {seed: 70000}", ["ecmp.seed", "65535"]),
    "dscp out of range": ("qos: {dscp_to_tc_map: {70: 3}}", ["qos.dscp_to_tc_map", "0..63"]),
    "bad name": ("name: My Lab", ["name", "pattern"]),
    "too many ports": ("fabric: {hosts_per_leaf: 250, spines: 64, parallel_links: 16}",
                       ["fabric", "ports"]),
    "not a mapping": ("- spines: 2", ["the top level must be a mapping"]),
    "broken yaml": ("fabric: {spines: 2", ["line", "not valid YAML"]),
    "log size zero": ("switch: {log_max_mb: 0}", ["switch.log_max_mb"]),
    "xoff above the buffer": ("qos: {buffer_bytes: 50000, pfc: {xoff_bytes: 48000}}",
                              ["qos.pfc.xoff_bytes", "exceeds the class 3 buffer"]),
    "headroom too small": ("qos: {pfc: {headroom_bytes: 2000}}",
                           ["qos.pfc.headroom_bytes", "too small for the round trip"]),
    "pause the CNP class": ("qos: {pfc_enable: [3, 6]}", ["qos.pfc_enable", "class 6"]),
    "kmax under kmin": ("qos: {ecn: {3: {kmin_bytes: 9000, kmax_bytes: 8000}}}",
                        ["qos.ecn.3", "kmax_bytes must be above kmin_bytes"]),
    "xon above xoff": ("qos: {pfc: {xoff_bytes: 40000, xon_bytes: 50000}}",
                       ["qos.pfc.xon_bytes", "above xoff_bytes"]),
    # CNPs: the configured DSCP's class, wherever the map puts it, is never paused
    "pause the configured CNP class": (
        "qos: {cnp_dscp: 46, dscp_to_tc_map: {26: 3, 46: 5}, pfc_enable: [3, 5]}",
        ["qos.pfc_enable", "class 5 carries CNPs", "qos.cnp_dscp 46 -> class 5"]),
    "CNPs fall into a lossless default class": (
        "qos: {default_tc: 3, dscp_to_tc_map: {26: 3}}",
        ["qos.pfc_enable", "class 3 carries CNPs", "default_tc 3"]),
    "CNP dscp out of range": ("qos: {cnp_dscp: 64}", ["qos.cnp_dscp", "less than or equal to 63"]),
    # the watchdog's ports: the form, then the topology
    "watchdog port without a colon": ("agent: {pfc_watchdog: {ports: [leaf1-3]}}",
                                      ["agent.pfc_watchdog.ports", "'leaf1-3'", "leaf1:3"]),
    "watchdog port not a number": ("agent: {pfc_watchdog: {ports: ['spine1:x']}}",
                                   ["agent.pfc_watchdog.ports", "'spine1:x'", "switch:port"]),
    "watchdog ports not a list": ("agent: {pfc_watchdog: {ports: leaf1}}",
                                  ["agent.pfc_watchdog.ports", "a list of switch:port names"]),
    "watchdog on a switch that is not there": (
        "agent: {pfc_watchdog: {ports: ['spine9:1']}}",
        ["agent.pfc_watchdog.ports.0", "no switch 'spine9'", "spine1..spine2 (ports 1..4)"]),
    "watchdog on a port that is not there": (
        "agent: {pfc_watchdog: {ports: ['leaf1:2', 'leaf1:99']}}",
        ["agent.pfc_watchdog.ports.1", "leaf1 has no port 99", "1..4"]),
    # the P4 program's paused-ports bitmap, with PFC on
    "spine ports past the PFC bitmap": (
        "fabric: {leaves: 64}", ["fabric", "a spine would have 64 ports", "at most 63",
                                 "fewer leaves or parallel links"]),
    "leaf ports past the PFC bitmap": (
        "fabric: {hosts_per_leaf: 60, spines: 2, parallel_links: 2}",
        ["fabric", "a leaf would have 64 ports", "64-bit map", "fewer hosts per leaf"]),
    # thresholds at the fabric's MTU
    "headroom too small at this MTU": (
        "fabric: {mtu: 1500, host_link_mbps: 10, fabric_link_mbps: 10}\n"
        "qos: {pfc: {headroom_bytes: 20000}}",
        ["qos.pfc.headroom_bytes", "fabric.mtu 1500", "at least 28796 bytes"]),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_gets_a_named_message(tmp_path: Path, name: str) -> None:
    text, expected = BAD_FILES[name]
    path = tmp_path / "fabric.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    rendered = info.value.render()
    for part in expected:
        assert part in rendered, f"{part!r} not in:\n{rendered}"
    assert "Traceback" not in rendered
    # one line per problem: the first expected part names its field at the start of a line
    assert any(line.startswith(f"  - {expected[0]}") for line in rendered.splitlines()), rendered


def test_several_mistakes_are_all_reported(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("fabric: {spines: -1, leaves: 0}\necmp: {seed: x}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.problems) == 3


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert "nope.yaml" in info.value.render()


def test_good_file_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(textwrap.dedent("""
        name: lab
        fabric: {spines: 3, leaves: 3, hosts_per_leaf: 1, parallel_links: 2}
        ecmp: {hash_fields: [src_ip, dst_ip], seed: 7}
    """))
    cfg = load_config(path)
    assert cfg.fabric.spines == 3 and cfg.fabric.parallel_links == 2
    assert cfg.ecmp.seed == 7
    assert cfg.qos.dscp_to_tc_map == {26: 3, 48: 6}
    assert cfg.switch.log is False


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("")
    assert load_config(path) == FabricConfig()


def test_shipped_examples_are_valid() -> None:
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
    assert examples, "examples/ has no fabric files"
    for ex in examples:
        load_config(ex)
