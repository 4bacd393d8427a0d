"""The benchmarks' pure parts: the rate search, the before/after table, the agent A/B table."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from benchmarks import capacity, gate_lead


def test_search_doubles_while_it_passes_then_bisects() -> None:
    best, tried = capacity.search(lambda r: r <= 33, start=10, steps=2, ceiling=320)
    assert tried == [10, 20, 40, 30, 35]
    assert best == 30
    # a failing start bisects below it; nothing passing gives None
    assert capacity.search(lambda r: False, start=10, steps=1, ceiling=320) == (None, [10, 5.0])


def _result(shape: str, frames: str, build: str, mbps: float | None, strict: float | None,
            decided: tuple[str, ...] = capacity.CHECKS) -> dict:
    return {"shape": shape, "frames": frames, "build": build, "capacity_mbps": mbps,
            "all_checks_mbps": strict, "tried": [10, 20], "decided_on": list(decided)}


def test_the_table_puts_the_earlier_runs_capacity_on_every_check_beside_this_ones() -> None:
    shape, frames = "4:1 on 2x3x2", "4 KB frames"
    now = [_result(shape, frames, "default", 17.5, 17.5)]
    # an earlier run that decided without the drift: its capacity on every check is the
    # highest rate at which every check passed, not the rate it decided on
    before = [_result(shape, frames, "default", 30, 10,
                      tuple(c for c in capacity.CHECKS if c != "drift_p99"))]
    costs = {"default": {"full_pps": 5000, "plain_pps": 8000, "ratio": 0.625,
                         "agent_cpu_idle_cores": 0.06, "agent_cpu_incast_cores": 0.25}}
    md = capacity.markdown(now, costs, [], before)
    assert "| default build, before | default build, now |" in md
    assert f"| {shape} | {frames} | 10 Mbit/s | 17.5 Mbit/s |" in md
    assert "| 6:1 on 2x4x2 | 4 KB frames | not run | not run |" in md
    assert "| default | 5000 / 8000 (0.625) | not counted | 6.0% / 25.0% of a core | - us |" in md
    costs["default"] |= {"full_instructions": 536304, "plain_instructions": 308708}
    md = capacity.markdown(now, costs, [], before)
    assert ("| default | 5000 / 8000 (0.625) | 536,304 / 308,708 (0.576) | 6.0% / 25.0% of a "
            "core | - us |") in md
    # the median of an even count of figures is their mean: shown to the figures' 0.1 us
    trials = [{"shape": shape, "mtu": 9000, "build": "default", "rate_mbps": 10,
               "passed": True, "figures": {"endpoint_cpu_us_per_pkt": v}}
              for v in (220.7, 222.1)]
    md = capacity.markdown(now, costs, trials, before)
    assert "of a core | 221.4 us |" in md


def test_scenario_rates_counts_faithful_runs_and_spans_the_guards_figures() -> None:
    from benchmarks import scenario_rates

    def run(name: str, rate: float, ok: bool, lag: int | None) -> dict:
        return {"scenario": name, "rate_mbps": rate, "faithful": ok, "bmv2_lag_ms": lag,
                "phantom_below_kb": None, "agent_reaction_ms": None}

    md = scenario_rates.markdown([run("dl", 15.0, False, 73), run("dl", 10.0, True, None),
                                  run("dl", 15.0, False, 165), run("dl", 10.0, False, 59),
                                  run("in", 10.0, True, None)])
    rows = [ln for ln in md.splitlines() if ln.startswith("| dl") or ln.startswith("| in")]
    assert rows == ["| dl | 10 Mbit/s | 1 of 2 | 59 | - | - |",
                    "| dl | 15 Mbit/s | 0 of 2 | 73-165 | - | - |",
                    "| in | 10 Mbit/s | 1 of 1 | - | - | - |"]


def test_scenario_rates_gives_each_agent_scheduling_its_row_when_it_was_varied() -> None:
    from benchmarks import scenario_rates

    def run(rt: int, ok: bool, reaction: int | None) -> dict:
        return {"scenario": "dl", "rate_mbps": 20.0, "realtime": rt, "faithful": ok,
                "bmv2_lag_ms": None, "phantom_below_kb": None, "agent_reaction_ms": reaction}

    md = scenario_rates.markdown([run(10, True, None), run(0, False, 31), run(0, True, None),
                                  run(10, True, None)])
    assert "| scenario | link rate | agents | faithful runs |" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| dl")]
    assert rows == ["| dl | 20 Mbit/s | SCHED_FIFO 10 | 2 of 2 | - | - | - |",
                    "| dl | 20 Mbit/s | nice alone | 1 of 2 | - | - | 31 |"]


def test_agent_ab_table_gives_each_variants_medians_and_ranges() -> None:
    from benchmarks import agent_ab

    def run(label: str, p99: float, cpu: float) -> dict:
        return {"rate_mbps": 10.0, "agents": label, "pause_reaction_us_median": 200.0,
                "pause_reaction_us_p99": p99, "agent_cpu_idle_cores": 0.08,
                "agent_cpu_incast_cores": cpu}

    md = agent_ab.markdown([run("one", 3000, 0.28), run("per", 1900, 0.32),
                            run("per", 1800, 0.34), run("one", 2500, 0.30),
                            run("one", 2600, 0.29), run("per", 2000, 0.30)], ["per", "one"])
    assert md.startswith("Medians over 3 interleaved runs each")
    rows = [ln for ln in md.splitlines() if ln.startswith("| 10 Mbit/s")]
    assert rows == ["| 10 Mbit/s | per | 200 (200-200) | 1900 (1800-2000) | 8.0% | 32.0% |",
                    "| 10 Mbit/s | one | 200 (200-200) | 2600 (2500-3000) | 8.0% | 29.0% |"]


def test_bmv2_instructions_per_packet_and_table() -> None:
    """The large run's extra instructions over its extra packets; a run that forwarded no
    more is an error, not a division by zero; the table gives plain / full per build."""
    from benchmarks import bmv2_instructions as bi

    assert bi.per_packet((100, 400), (1_000_000, 4_000_000)) == 10_000
    with pytest.raises(ValueError, match="no more packets"):
        bi.per_packet((100, 100), (1, 2))
    ms = [bi.Measurement("default", "full", "off", (100, 400), (0, 0), 500_000),
          bi.Measurement("default", "plain", "off", (100, 400), (0, 0), 300_000),
          bi.Measurement("fast", "full", "off", (100, 400), (0, 0), 250_000)]
    table = bi.markdown(ms)
    assert "| default | off | 500,000 | 300,000 | 0.600 |" in table
    assert "| fast | off | 250,000 | - | - |" in table


def test_callgrind_total_reads_the_summary(tmp_path: Path) -> None:
    from benchmarks import bmv2_instructions as bi

    f = tmp_path / "cg.out"
    f.write_text("version: 1\ncreator: callgrind\nevents: Ir\nfn=main\n1 5\nsummary: 12345\n")
    assert bi.callgrind_total(f) == 12345
    f.write_text("version: 1\n")
    with pytest.raises(ValueError, match="no callgrind summary"):
        bi.callgrind_total(f)


def test_all_to_all_is_every_host_to_every_other() -> None:
    (spines, leaves, per_leaf), pairs = capacity.SHAPES["all-to-all on 2x4x2"]
    hosts = leaves * per_leaf
    assert (spines, hosts) == (2, 8)
    assert len(pairs) == len(set(pairs)) == hosts * (hosts - 1)
    assert all(s != d for s, d in pairs)
    assert {s for s, _d in pairs} == {d for _s, d in pairs} == {f"h{i}" for i in range(1, 9)}


def test_a_pause_that_sends_only_the_link_rate_and_the_leak_is_no_excess() -> None:
    """gate_lead's measure: 10 ms open at 8 Mbit/s is 10,000 bytes; a 1,000-byte leak a
    pause is what the phantom already drains."""
    assert gate_lead.excess_per_pause(4 * 11_000, 0.040, 8.0, 4, 1000) == pytest.approx(0)
    # each pause sent 1,600 bytes more (htb's bucket): that is the excess
    assert gate_lead.excess_per_pause(4 * 12_600, 0.040, 8.0, 4, 1000) == pytest.approx(1600)


def _trial(rate: float, passed: bool, fidelity_ok: bool | None, build: str = "default") -> dict:
    return {"shape": "6:1 on 2x4x2", "mtu": 1500, "build": build, "run": 0, "rate_mbps": rate,
            "passed": passed, "failed": [] if passed else ["drift_p99"],
            "figures": {"fidelity_ok": fidelity_ok}}


def test_the_table_says_which_passing_trials_the_fidelity_guard_flagged() -> None:
    """A rate passes on the incast test's checks; a passing trial the run's own fidelity guard
    flagged is named under the table, not left in the JSON alone. Failing trials are not
    counted."""
    trials = [_trial(5, True, True), _trial(5, True, False), _trial(7.5, True, False),
              _trial(7.5, True, True), _trial(10, False, False), _trial(5, True, True, "fast")]
    assert capacity.guard_flags(trials) == [
        "Passing trials the runs' own fidelity guard flagged (their summary.json says why):",
        "- 6:1 on 2x4x2, 1 KB frames, default build: 2 of 4 (at 5, 7.5 Mbit/s)"]
    md = capacity.markdown([], {}, trials)
    assert "- 6:1 on 2x4x2, 1 KB frames, default build: 2 of 4 (at 5, 7.5 Mbit/s)" in md
    quiet = [_trial(5, True, True), _trial(10, False, False)]
    assert capacity.guard_flags(quiet) == [
        "The runs' own fidelity guard flagged none of the passing trials."]


def test_capacity_pairs_counts_each_settings_passes_and_flags() -> None:
    from benchmarks import capacity_pairs

    def trial(agents: str, passed: bool, ok: bool, p99_us: int, cpu: float) -> dict:
        return {"agents": agents, "passed": passed, "failed": [] if passed else ["drift_p99"],
                "figures": {"reaction_p99_us": p99_us, "drift_p99_bytes": 21300,
                            "agents_cpu_cores": cpu, "fidelity_ok": ok}}

    md = capacity_pairs.markdown([trial("rt", True, True, 210, 0.21),
                                  trial("nice", False, False, 4690, 0.25),
                                  trial("nice", True, True, 1600, 0.2),
                                  trial("rt", True, False, 320, 0.24)], "6:1, 40 Mbit/s")
    rows = [ln for ln in md.splitlines() if ln.startswith("| rt") or ln.startswith("| nice")]
    assert rows == ["| rt | 2 of 2 | 1 of 2 | - | 0.21-0.32 | 21.3-21.3 | 21-24% |",
                    "| nice | 1 of 2 | 1 of 2 | drift_p99 | 1.60-4.69 | 21.3-21.3 | 20-25% |"]


def _floor_run(wakeups: list[float], cores: list[float], bare: dict[str, float]) -> dict:
    pairs = enumerate(zip(wakeups, cores, strict=True))
    return {"agents": [{"switch": f"s{i}", "wakeups_per_s": w, "user_cores": c * 0.75,
                        "system_cores": c * 0.25} for i, (w, c) in pairs],
            "bare": {k: {"us_per_wakeup": us} for k, us in bare.items()},
            "bare_rate_per_s": max(wakeups)}


def test_agent_floor_is_the_agents_wakeups_times_a_bare_wakeup() -> None:
    from benchmarks import agent_floor

    run = _floor_run([200, 300], [0.04, 0.06], {"Python": 50.0, "C": 20.0})
    t = agent_floor.totals(run)
    assert t["wakeups_per_s"] == 500 and t["cores"] == pytest.approx(0.10)
    assert t["us_per_wakeup"] == pytest.approx(200.0)  # 0.1 s a second over 500
    assert t["Python_floor_cores"] == pytest.approx(0.025)  # 500 x 50 us
    assert t["C_floor_cores"] == pytest.approx(0.010)
    md = agent_floor.markdown([run, _floor_run([100], [0.05], {"Python": 70.0})])
    rows = [ln for ln in md.splitlines() if ln[:4] in ("| 1 ", "| 2 ")]
    assert rows == ["| 1 | 500 | 10.0% | 200 | 50 | 2.5% | 20 | 1.0% |",
                    "| 2 | 100 | 5.0% | 500 | 70 | 0.7% | - | - |"]
    assert "| s1 | 300 | 4.5% | 1.5% |" in md  # run 1's agents, one by one
    assert "in Python that did nothing but wake would take 1.6% of a core (median)" in md


def test_the_bare_loops_read_every_datagram_they_are_sent(tmp_path: Path) -> None:
    """The bare loops the floor is measured with: each wake-up reads what came, so the loop
    counts every datagram sent, and reports its CPU and wake-ups; the C loop where a compiler
    is installed (without one the benchmark leaves its column empty, as here)."""
    from benchmarks import agent_floor

    loops = {"Python": [sys.executable, "-c", agent_floor.PY_LOOP]}
    c_loop = agent_floor.build_c_loop(tmp_path)
    assert (c_loop is None) == (shutil.which("cc") is None and shutil.which("gcc") is None)
    if c_loop is not None:
        loops["C"] = c_loop
    for kind, cmd in loops.items():
        b = agent_floor.bare_wakeup_us(cmd, 200, 1.5, 0)
        assert b["sent"] > 100, kind
        assert b["read"] == b["sent"], kind
        assert 0 < b["wakeups"] <= b["read"] + 40, kind  # one a datagram or fewer, + timeouts
        assert b["cpu_s"] > 0 and b["us_per_wakeup"] > 0, kind


def test_the_capacity_table_says_what_the_agents_ran_at() -> None:
    """Each trial's run summary says the agents' scheduling; the table says it under the
    rates, so that a rate reached with real-time agents is not read as one at nice."""
    def at(agents: str | None) -> dict:
        t = _trial(5, True, True)
        t["figures"]["agents"] = agents
        return t

    md = capacity.markdown([], {}, [at("SCHED_FIFO 10"), at("SCHED_FIFO 10")])
    assert "The switch agents ran at SCHED_FIFO 10 in every trial." in md
    mixed = [at("SCHED_FIFO 10"), at("nice -10"), at("SCHED_FIFO 10")]
    assert capacity.agents_ran_at(mixed)[0] == (
        "The switch agents ran at SCHED_FIFO 10 in 2 trials, nice -10 in 1 trial (of 3).")
    # a run saved before trials recorded it says nothing of the agents
    assert capacity.agents_ran_at([_trial(5, True, True)]) == []
    assert "switch agents ran" not in capacity.markdown([], {}, [_trial(5, True, True)])


def test_shipped_runs_every_scenario_and_each_lab_as_finished() -> None:
    """benchmarks/shipped.py's list: every scenarios/*.yaml, and each lab's scenario files in
    the solution's copy where the lab has one (what a student who finished it runs); lab 1's
    fabric and answers files are not scenarios."""
    from benchmarks.shipped import REPO, shipped_files

    files = dict(shipped_files())
    scenarios = {p.stem for p in (REPO / "scenarios").glob("*.yaml")}
    assert scenarios <= set(files) and {"permutation", "all-to-all"} <= scenarios
    assert files["04-incast-pfc/solution/lossy.yaml"] == (
        REPO / "labs" / "04-incast-pfc" / "solution" / "lossy.yaml")
    assert files["02-ecn-red/baseline.yaml"] == REPO / "labs" / "02-ecn-red" / "baseline.yaml"
    assert not any(label.startswith("01-fabric") for label in files)
    labs = {label.split("/")[0] for label in files if "/" in label}
    assert labs == {f"0{i}-{n}" for i, n in [(2, "ecn-red"), (3, "dcqcn"), (4, "incast-pfc"),
                                             (5, "congestion-spreading"), (6, "pfc-deadlock"),
                                             (7, "pfc-watchdog"), (8, "ecmp-entropy")]}
