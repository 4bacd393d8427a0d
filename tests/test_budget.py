"""The budget: a load priced with a profile, the `auto` rate chosen from it, the profile's storage
checks, and a run over budget told (or refused, --strict) before anything is brought up.

The profile of these tests (hand-picked figures): 2 cores, nothing else busy, BMv2 200 us a
packet pass and 1% of a core idle per switch, an endpoint 100 us a frame and 0.5% idle, an
agent 200 us a wake-up at 50 wake-ups a second; margin 0.25, so 1.5 cores for the testbed.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.budget import calibration_store
from testbed.budget.calibration_store import ProfileError, read_profile, write_profile
from testbed.budget.cores import (
    BuildCost,
    Profile,
    auto_rate,
    budget_line,
    judge,
    time_scale,
)
from testbed.budget.scenario import (
    over_budget_warning,
    scenario_load,
    scenario_verdict,
    shared_lossless_ports,
)
from testbed.config.models import ConfigError
from testbed.run.scenario import load_scenario, parse_scenario
from testbed.topology.validate import parse_config

REPO = Path(__file__).resolve().parent.parent
INCAST = REPO / "scenarios" / "incast.yaml"
FRAMES = 10e6 / 8 / 66_480 * 18    # frames a second of a 10 Mbit/s link (test_load_model.py)


def profile(us_per_pass: float = 200.0, builds: tuple[str, ...] = ("default", "fast")
            ) -> Profile:
    return Profile(measured_at="2026-12-03T17:00:00+00:00", cores=2, background_cores=0.0,
                   builds={b: BuildCost(us_per_pass=us_per_pass, idle_cores=0.01)
                           for b in builds},
                   endpoint_us_per_frame=100.0, endpoint_us_per_frame_per_qp=0.0,
                   endpoint_idle_cores=0.005,
                   agent_us_per_wakeup=200.0, agent_wakeups_per_s=50.0)


@pytest.fixture
def stored(tmp_path: Path, monkeypatch) -> Path:
    """A profile folder of this test's own, named by ROCE_TESTBED_CALIBRATION."""
    folder = tmp_path / "lib"
    path = folder / "calibration.json"
    monkeypatch.setenv(calibration_store.ENV, str(path))
    return path


# -- pricing a load ---------------------------------------------------------------------------

def test_incast_priced_by_hand() -> None:
    """incast.yaml at 10 Mbit/s: 5 switches passing 3 x FRAMES, 6 hosts handling 2 x FRAMES:
    switches 5 x 0.01 + 1,015.35 x 200 us = 0.2531 cores, endpoints 6 x 0.005 + 676.9 x 100 us
    = 0.0977, agents 5 x 50 x 200 us = 0.05: 0.4008 of 1.5 cores, fits."""
    sc = load_scenario(INCAST)
    v = scenario_verdict(sc.cfg, sc.topo, sc.extras, profile())
    assert v.status == "fits"
    assert v.demand is not None and v.limit_cores == pytest.approx(1.5)
    assert v.demand.switches == pytest.approx(0.05 + 3 * FRAMES * 200e-6, rel=1e-6)
    assert v.demand.endpoints == pytest.approx(0.03 + 2 * FRAMES * 100e-6, rel=1e-6)
    assert v.demand.agents == pytest.approx(0.05)
    assert v.demand.total == pytest.approx(0.4008, abs=1e-4)
    assert v.time_scale == 4000 and time_scale(40) == 1000
    line = budget_line(v)
    assert "rate 10 Mbit/s" in line and "time scale 4,000" in line and "250 us" in line
    assert line.endswith("needs 0.40 of 1.50 cores (2 cores less 25% margin, "
                         f"{v.build} build): fits")


def test_each_further_qp_an_endpoint_holds_prices_its_frames_higher() -> None:
    """incast.yaml's h1 holds the 8 responders of its 4 senders' 2 QPs each and handles all
    FRAMES; each sender holds 2 and handles a quarter. At 10 us more a frame for each further
    QP: h1 FRAMES x (100 + 7 x 10) us, the senders 4 x FRAMES / 4 x (100 + 10) us."""
    sc = load_scenario(INCAST)
    p = profile().model_copy(update={"endpoint_us_per_frame_per_qp": 10.0})
    v = scenario_verdict(sc.cfg, sc.topo, sc.extras, p)
    assert v.load.host_qps == {"h1": 8, "h2": 0, "h3": 2, "h4": 2, "h5": 2, "h6": 2}
    assert v.demand is not None
    assert v.demand.endpoints == pytest.approx(0.03 + FRAMES * (170 + 110) * 1e-6, rel=1e-6)


def _two_classes(c4_start: float) -> dict:
    return {"name": "dual", "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
            "qos": {"dscp_to_tc_map": {26: 3, 4: 4, 48: 6}, "pfc_enable": [3, 4], "ecn": {}},
            "duration_s": 6,
            "flows": [{"name": "a", "src": "h2", "dst": "h1", "duration_s": 2, "tc": 3},
                      {"name": "b", "src": "h3", "dst": "h1", "duration_s": 2, "tc": 4,
                       "start_s": c4_start},
                      {"name": "c", "src": "h4", "dst": "h3", "duration_s": 5, "tc": 4}]}


def test_a_higher_class_without_a_phantom_on_a_lossless_port_is_told_before_the_run() -> None:
    """Classes 3 and 4 both into h1 at once: both keep phantoms, and class 3's drains with what
    class 4 leaves of the port (p4/lossless.p4, drain_under): nothing to say. A flow in class
    6 instead, the class only CNPs reach, which keeps no phantom, beside class 3 on leaf1's port
    to h1: the class 3 phantom would drain under it at the full rate, and the user is told."""
    sc = parse_scenario(_two_classes(0.0))
    assert shared_lossless_ports(sc.cfg, sc.topo, sc.extras) is None
    raw = _two_classes(0.0)
    raw["flows"][1]["tc"] = 6
    sc = parse_scenario(raw)
    w = shared_lossless_ports(sc.cfg, sc.topo, sc.extras)
    assert w is not None and w.startswith("flows a (class 3) and b (class 6) cross leaf1 port ")
    assert "keeps no phantom" in w and "phantom_below" in w
    raw["flows"][1]["start_s"] = 2.0  # b starts as a ends
    sc = parse_scenario(raw)
    assert shared_lossless_ports(sc.cfg, sc.topo, sc.extras) is None
    sc = load_scenario(INCAST)
    assert shared_lossless_ports(sc.cfg, sc.topo, sc.extras) is None


def test_over_budget_names_the_field_and_the_fix() -> None:
    sc = load_scenario(INCAST)
    v = scenario_verdict(sc.cfg, sc.topo, sc.extras, profile(us_per_pass=2000))
    assert v.status == "over"
    warning = over_budget_warning(v)
    assert warning is not None and warning.startswith("fabric.host_link_mbps 10 is over")
    assert "lower fabric.host_link_mbps, or set it to auto" in warning
    assert over_budget_warning(scenario_verdict(sc.cfg, sc.topo, sc.extras, profile())) is None


def test_unknown_without_a_profile_or_a_build() -> None:
    """Unknown is never a fit: no profile, or a profile without the build the run uses."""
    sc = load_scenario(INCAST)
    load = scenario_load(sc.cfg, sc.topo, sc.extras)
    none = judge(load, None, "fast", 0.25)
    assert none.status == "unknown" and none.demand is None
    assert "budget unknown" in budget_line(none) and "fits" not in budget_line(none)
    other = judge(load, profile(builds=("default",)), "fast", 0.25)
    assert other.status == "unknown" and "testbed calibrate --build fast" in other.reason
    assert over_budget_warning(none) is None


# -- the auto rate ----------------------------------------------------------------------------

def test_auto_rate_is_the_highest_that_fits() -> None:
    """incast.yaml's cost is 0.13 cores (idle and agents) + 0.027077 cores per Mbit/s (its
    1,015.35 passes and 676.9 frames at 10 Mbit/s, priced): within 1.5 cores up to
    (1.5 - 0.13) / 0.027077 = 50.6 Mbit/s; auto rounds down to the 0.1."""
    per_mbps = (3 * FRAMES * 200e-6 + 2 * FRAMES * 100e-6) / 10
    expected = (1.5 - 0.13) / per_mbps
    assert expected == pytest.approx(50.6, abs=0.05)
    src = load_scenario(INCAST)

    def fits(r: float) -> bool:
        from testbed.budget.scenario import rated_topology, with_rates

        cfg = with_rates(src.cfg, r, r)
        return scenario_verdict(cfg, rated_topology(cfg, src.topo), src.extras,
                                profile()).status == "fits"

    assert auto_rate(fits) == 50.5
    assert auto_rate(lambda r: False) is None and auto_rate(lambda r: True) == 1000.0


def test_auto_stays_where_the_qos_is_valid(stored: Path) -> None:
    """incast.yaml's PFC headroom grows with the rate: past about 40 Mbit/s xoff plus headroom
    outgrow its 200 KB buffer, so auto stops below that even where the CPU would afford more."""
    from testbed.budget.scenario import with_rates
    from testbed.topology.qos import check_qos

    write_profile(profile(us_per_pass=1.0))  # CPU enough for any rate
    data = _incast_data()
    data["fabric"] = {**data["fabric"], "host_link_mbps": "auto", "fabric_link_mbps": "auto"}
    sc = parse_scenario(data, "incast-auto")
    rate = sc.cfg.fabric.host_link_mbps
    assert 1 < rate < 1000 and not check_qos(sc.cfg)
    assert check_qos(with_rates(sc.cfg, rate + 0.1, rate + 0.1))  # a step more is invalid


def _incast_data() -> dict:
    import yaml

    return yaml.safe_load(INCAST.read_text())


def test_auto_in_a_scenario_takes_the_rate_and_says_so(stored: Path) -> None:
    write_profile(profile())
    data = _incast_data()
    data["fabric"] = {**data["fabric"], "host_link_mbps": "auto", "fabric_link_mbps": "auto"}
    data["qos"] = {**data["qos"], "buffer_bytes": 400_000}  # room for 50 Mbit/s headroom
    sc = parse_scenario(data, "incast-auto")
    assert sc.auto == ["host_link_mbps", "fabric_link_mbps"]
    assert sc.cfg.fabric.host_link_mbps == sc.cfg.fabric.fabric_link_mbps == 50.5
    assert all(link.rate_mbps == 50.5 for link in sc.topo.links)
    v = scenario_verdict(sc.cfg, sc.topo, sc.extras, read_profile())
    assert budget_line(v, sc.auto).startswith(
        "rate 50.5 Mbit/s (host_link_mbps auto, fabric_link_mbps auto); time scale 792 ")
    # only the fabric's links auto: the hosts keep 10 Mbit/s and the load cannot grow past
    # them (0.40 cores at any fabric rate), so the fabric's rate goes up to where its PFC
    # headroom would outgrow the buffer
    from testbed.budget.scenario import with_rates
    from testbed.topology.qos import check_qos

    data["fabric"]["host_link_mbps"] = 10
    sc = parse_scenario(data, "incast-fabric-auto")
    assert sc.auto == ["fabric_link_mbps"] and sc.cfg.fabric.host_link_mbps == 10
    fabric = sc.cfg.fabric.fabric_link_mbps
    assert fabric > 50.5 and check_qos(with_rates(sc.cfg, 10, fabric + 0.1))


def test_auto_without_a_profile_is_refused_in_one_line(stored: Path) -> None:
    data = _incast_data()
    data["fabric"] = {**data["fabric"], "host_link_mbps": "auto"}
    with pytest.raises(ConfigError) as info:
        parse_scenario(data, "incast-auto")
    assert info.value.problems == [
        f"fabric.host_link_mbps: auto chooses the rate from this machine's measured budget, "
        f"and there is none (no calibration profile at {stored}): run `sudo testbed "
        f"calibrate`, or give a rate in Mbit/s"]


def test_auto_that_nothing_fits_is_refused(stored: Path) -> None:
    write_profile(profile(us_per_pass=1e7))
    data = _incast_data()
    data["fabric"] = {**data["fabric"], "host_link_mbps": "auto"}
    with pytest.raises(ConfigError, match="auto found no rate from 0.1 Mbit/s up"):
        parse_scenario(data, "incast-auto")


def test_auto_outside_a_scenario_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"fabric": {"host_link_mbps": "auto"}})
    assert info.value.problems == [
        "fabric.host_link_mbps: auto is chosen from a scenario's flows (testbed run "
        "SCENARIO.yaml); a fabric alone needs a rate in Mbit/s"]


# -- the profile's storage --------------------------------------------------------------------

def test_profile_written_root_only_and_read_back(stored: Path) -> None:
    old = os.umask(0o077)  # the modes are the profile's own, whatever the umask
    try:
        write_profile(profile())
    finally:
        os.umask(old)
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(stored.stat().st_mode) == 0o644
    assert read_profile() == profile()
    assert [p.name for p in stored.parent.iterdir()] == ["calibration.json"]  # no temp left


def test_no_profile_is_none_and_a_bad_one_is_refused(stored: Path) -> None:
    assert read_profile() is None
    stored.parent.mkdir(mode=0o755)
    stored.write_text("{not json")
    os.chmod(stored, 0o644)
    with pytest.raises(ProfileError, match="not a calibration profile"):
        read_profile()
    stored.write_text(json.dumps({**profile().model_dump(mode="json"), "version": 0}))
    with pytest.raises(ProfileError, match="version 0"):
        read_profile()


def test_a_folder_or_file_others_can_write_is_refused(stored: Path) -> None:
    write_profile(profile())
    os.chmod(stored, 0o666)
    with pytest.raises(ProfileError, match="writable by group or others"):
        read_profile()
    with pytest.raises(ProfileError, match="writable by group or others"):
        write_profile(profile())
    os.chmod(stored, 0o644)
    os.chmod(stored.parent, 0o777)
    with pytest.raises(ProfileError, match="the folder is writable"):
        read_profile()
    with pytest.raises(ProfileError, match="the folder is writable"):
        write_profile(profile())


def test_a_symlink_is_never_followed(stored: Path, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    write_profile(profile(), real)
    stored.parent.mkdir(mode=0o755)
    stored.symlink_to(real)
    with pytest.raises(ProfileError, match="cannot be opened safely"):
        read_profile()
    with pytest.raises(ProfileError, match="symbolic link"):
        write_profile(profile())
    stored.unlink()
    stored.parent.rmdir()
    stored.parent.symlink_to(tmp_path)  # the folder itself a link
    with pytest.raises(ProfileError, match="not a plain folder"):
        read_profile()


def test_another_users_profile_is_refused(stored: Path, monkeypatch) -> None:
    """As if written by someone else: the owners trusted are root and the user running."""
    write_profile(profile())
    monkeypatch.setattr(calibration_store, "_owners", lambda: {4242})
    with pytest.raises(ProfileError, match=f"belongs to uid {os.geteuid()}, not root"):
        read_profile()
    assert calibration_store.load_profile()[0] is None  # a run takes it as no profile


# -- testbed run, before anything starts --------------------------------------------------------

def test_over_budget_is_told_before_the_run_and_refused_with_strict(stored: Path, monkeypatch,
                                                                    tmp_path: Path) -> None:
    """No switch comes up: the run itself is replaced by one that records being reached."""
    from testbed.cli.commands import app
    from testbed.run import scenario_run

    reached = []

    def no_run(*a, **kw):
        reached.append(kw.get("verdict"))
        raise scenario_run.RunFailed("stopped by the test before any switch")

    monkeypatch.setattr(scenario_run, "run_scenario", no_run)
    # pytest's SIGTERM
    monkeypatch.setattr("testbed.run.lifecycle.interrupt_on_sigterm", lambda: None)
    write_profile(profile(us_per_pass=2000))
    args = ["run", str(INCAST), "--results", str(tmp_path / "results")]
    r = CliRunner().invoke(app, [*args, "--strict"], env={"COLUMNS": "300"})
    assert r.exit_code == 2 and reached == []
    out = " ".join(r.output.split())
    assert "budget: rate 10 Mbit/s; time scale 4,000" in out
    assert ("fabric.host_link_mbps 10 is over this machine's budget" in out
            and "--strict refuses to run" in out)
    r = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    out = " ".join(r.output.split())
    assert r.exit_code != 0 and "warning: fabric.host_link_mbps 10 is over" in out
    if os.geteuid() == 0:  # as root it got as far as the run, with the verdict it printed
        assert len(reached) == 1 and reached[0].status == "over"
    else:  # else it stops at "needs root", after the warning
        assert reached == [] and "run it with sudo" in out


def test_strict_refuses_an_unknown_budget(stored: Path, tmp_path: Path) -> None:
    from testbed.cli.commands import app

    r = CliRunner().invoke(app, ["run", str(INCAST), "--results", str(tmp_path), "--strict"],
                           env={"COLUMNS": "300"})
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "budget unknown" in out
    assert "the budget is unknown (no calibration profile at" in out and "--strict" in out
