"""Which BMv2 build a switch runs (switch.build, switch.log): the rules, without the builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.config.bmv2_build import BuildError, select
from testbed.config.models import ConfigError
from testbed.fabric.bmv2 import Bmv2Options
from testbed.topology.validate import parse_config

BOTH = {"fast": "/opt/bmv2-fast/bin/simple_switch_grpc",
        "default": "/usr/local/bin/simple_switch_grpc"}


def test_auto_takes_the_fast_build_unless_a_log_is_asked_for() -> None:
    assert select("auto", log=False, found=BOTH).build == "fast"
    assert select("auto", log=True, found=BOTH).binary == BOTH["default"]
    # only one installed: auto runs it, as long as it can do what was asked
    assert select("auto", log=False, found={"default": BOTH["default"]}).build == "default"
    assert select("auto", log=True, found={"default": BOTH["default"]}).build == "default"
    with pytest.raises(BuildError, match="switch.log: only BMv2's fast build is installed"):
        select("auto", log=True, found={"fast": BOTH["fast"]})


def test_an_explicit_build_is_the_one_that_runs_or_a_one_line_error() -> None:
    assert select("default", log=False, found=BOTH).binary == BOTH["default"]
    assert select("fast", log=False, found=BOTH).binary == BOTH["fast"]
    with pytest.raises(BuildError, match=r"switch.build: BMv2's fast build is not installed; "
                                         r"`sudo testbed provision` builds it online "
                                         r"\(half an hour\), or installs it from "
                                         r"--bmv2-fast-archive PATH or --bmv2-fast-url URL"):
        select("fast", log=False, found={"default": BOTH["default"]})
    with pytest.raises(BuildError, match="switch.build: BMv2's default build is not installed"):
        select("default", log=False, found={"fast": BOTH["fast"]})
    with pytest.raises(BuildError, match="not installed; run `testbed doctor`"):
        select("auto", log=False, found={})


def test_a_log_on_the_fast_build_is_refused_in_the_config() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"switch": {"log": True, "build": "fast"}})
    assert "switch.build is fast, a BMv2 build with no packet log" in str(err.value)
    assert parse_config({"switch": {"log": True}}).switch.build == "auto"


def test_a_switch_without_a_log_runs_with_logging_off() -> None:
    """BMv2's default log level is trace, with or without a place to log to: the default
    build then formats every packet's log messages for nothing, more than half of its
    instructions per packet (benchmarks/out/bmv2_instructions.md). Without switch.log the level
    is off; with it, debug to the console the switch's log file is copied from."""
    opts = Bmv2Options(name="s1", device_id=1, ports={1: "s1-eth1"}, binary="/bin/ss",
                       grpc_socket=Path("/tmp/s1.grpc"), log_path=Path("/tmp/s1.log"))
    cmd = opts.command()
    bm_args = cmd[:cmd.index("--")]  # the target's own options end at "--"
    assert bm_args[bm_args.index("--log-level") + 1] == "off"
    assert "--log-console" not in bm_args
    opts.log = True
    bm_args = opts.command()[:opts.command().index("--")]
    assert bm_args[bm_args.index("--log-level") + 1] == "debug"
    assert "--log-console" in bm_args


def test_a_real_time_switch_starts_under_chrt_and_a_refusal_says_what_it_runs_at() -> None:
    from testbed.fabric.bmv2 import scheduling

    opts = Bmv2Options(name="s1", device_id=1, ports={1: "s1-eth1"}, binary="/bin/ss",
                       grpc_socket=Path("/tmp/s1.grpc"), log_path=Path("/tmp/s1.log"),
                       nice=-5, realtime_priority=5)
    assert opts.command()[:6] == ["chrt", "-f", "5", "nice", "-n", "-5"]
    opts.realtime_priority = 0
    assert opts.command()[:3] == ["nice", "-n", "-5"]
    assert scheduling(5, -5, allowed=True) == ("SCHED_FIFO 5", None)
    assert scheduling(0, -5, allowed=False) == ("nice -5", None)
    ran, why = scheduling(5, -5, allowed=False)
    assert ran == "nice -5" and why is not None and why.startswith(
        "switch.realtime_priority 5 was refused by this machine: the BMv2 switches run at "
        "nice -5")


def test_switches_real_time_by_default_and_below_the_agents() -> None:
    cfg = parse_config({})
    assert (cfg.switch.realtime_priority, cfg.agent.realtime_priority) == (5, 10)
    assert parse_config({"switch": {"realtime_priority": 9}}).switch.realtime_priority == 9
    # with the agents at nice alone, the switches may take any priority
    assert parse_config({"switch": {"realtime_priority": 50},
                         "agent": {"realtime_priority": 0}}).switch.realtime_priority == 50
    with pytest.raises(ConfigError) as e:
        parse_config({"switch": {"realtime_priority": 10}})
    msg = str(e.value)
    assert "switch.realtime_priority" in msg and "is not below agent.realtime_priority 10" in msg
    assert "set switch.realtime_priority below 10 (or 0)" in msg


def test_a_switch_held_on_one_core_starts_under_taskset_and_the_cores_are_dealt_in_turn() -> None:
    from testbed.fabric.bmv2 import deal_cores

    opts = Bmv2Options(name="s1", device_id=1, ports={1: "s1-eth1"}, binary="/bin/ss",
                       grpc_socket=Path("/tmp/s1.grpc"), log_path=Path("/tmp/s1.log"),
                       realtime_priority=5, core=1)
    assert opts.command()[:6] == ["taskset", "-c", "1", "chrt", "-f", "5"]
    opts.core = None
    assert opts.command()[:3] == ["chrt", "-f", "5"]
    names = ["spine1", "spine2", "leaf1", "leaf2", "leaf3"]
    assert deal_cores(names, [1, 0]) == {"spine1": 0, "spine2": 1, "leaf1": 0, "leaf2": 1,
                                         "leaf3": 0}
    assert deal_cores(names, [3]) == dict.fromkeys(names, 3)
    assert parse_config({}).switch.one_core_each is True
