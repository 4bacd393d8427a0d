"""Mode ib-credit without root: what the mode sets and refuses, the buffers it derives, the
credit a port advertises and the grants its agent gives the gates (testbed.agent.credit)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.agent.credit import CreditLane, CreditMixin
from testbed.config.models import ConfigError, FabricConfig, QosConfig
from testbed.run.modes import apply_mode
from testbed.run.scenario import parse_scenario
from testbed.topology.qos import credit_buffer_bytes, endpoint_args, queue_profiles
from traffic.credits import advertised, credit_left

FABRIC = {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}
FRAME = 4170  # the largest RoCE frame at path MTU 4096


def scenario(**more) -> dict:
    return {"fabric": FABRIC, "duration_s": 3, "mode": "ib-credit",
            "flows": [{"name": "f", "src": "h1", "dst": "h3", "count": 1}], **more}


def test_the_mode_credits_the_classes_pfc_would_have_kept_and_turns_pfc_off() -> None:
    cfg = parse_scenario(scenario()).cfg
    assert cfg.qos.credit_enable == [3] and cfg.qos.pfc_enable == []
    sonic = parse_scenario(scenario(qos={"profile": "sonic"})).cfg
    assert sonic.qos.credit_enable == [3, 4] and sonic.qos.pfc_enable == []
    # the hosts are told which classes wait for credit
    assert endpoint_args(cfg)[-2:] == ["--credit-classes", "3"]


@pytest.mark.parametrize(("data", "words"), [
    ({"qos": {"pfc_enable": [3]}}, "qos.pfc_enable: [3] turns PFC on, against mode ib-credit"),
    ({"qos": {"credit_enable": [4]}}, "qos.credit_enable: [4]: mode ib-credit sets it"),
    ({"qos": {"credit": {"buffer_bytes": 200_000}}}, "buffer_bytes"),
])
def test_settings_against_the_mode_are_refused_in_one_line(data: dict, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(scenario(**data))
    assert words in info.value.render()


def test_credits_outside_the_mode_are_refused() -> None:
    _data, problems = apply_mode({"mode": "roce-lossy", "qos": {"credit_enable": [3]}})
    assert problems == ["qos.credit_enable: [3] is mode ib-credit's: write mode: ib-credit "
                        "(it sets the credited classes), not the field"]
    with pytest.raises(ValueError, match="both paused by PFC and credited"):
        QosConfig(pfc_enable=[3], credit_enable=[3])


def test_an_input_s_buffer_is_pfc_s_share_of_one_ingress_port_at_most_2048_blocks() -> None:
    q = FabricConfig(qos={"credit_enable": [3], "pfc_enable": []}).qos
    for rate in (10, 20):
        prof = queue_profiles(q, rate)[3]
        assert credit_buffer_bytes(q, rate) == prof.xoff + prof.headroom
    assert credit_buffer_bytes(q, 10) == 92_694  # 50,340 + 42,354
    assert credit_buffer_bytes(q, 40) == 131_072  # 167,694 capped: 2,048 blocks of 64
    own = FabricConfig(qos={"credit_enable": [3], "pfc_enable": [],
                            "credit": {"buffer_bytes": 40_000}}).qos
    assert credit_buffer_bytes(own, 40) == 40_000


def test_the_limit_and_the_credit_left_count_blocks_of_running_byte_totals() -> None:
    assert advertised(0, 92_694) == 1448  # 92,694 // 64
    assert credit_left(0, 1448) == 92_672
    # 4,200 bytes sent: 65 blocks and 40 bytes of the 66th
    assert credit_left(4200, 1448) == 92_672 - 4200
    # the 12-bit counters wrap: 3 x 4,096 blocks later the same credit is left
    wrap = 3 * 4096 * 64
    assert credit_left(wrap + 4200, advertised(wrap, 92_694)) == 92_672 - 4200
    assert credit_left(10_000, None) == 0  # nothing heard: nothing granted
    assert credit_left(200_000, advertised(0, 92_694)) == 0  # the limit is behind


class Gates:
    def __init__(self) -> None:
        self.grants: list[tuple[int, int]] = []

    def grant(self, tc: int, burst: int) -> None:
        self.grants.append((tc, burst))


def agent() -> tuple[CreditMixin, SimpleNamespace]:
    a = CreditMixin()
    a.cfg = SimpleNamespace(credit_frame=FRAME)
    a.stats = {"credit_rx": 0, "credit_grants": 0}
    a.lanes = {(2, 3): CreditLane()}
    a.credit_said, a.credit_heard = {}, set()
    pr = SimpleNamespace(cfg=SimpleNamespace(number=2), gates=Gates())
    return a, pr


def test_a_limit_heard_is_granted_once_and_credit_under_a_frame_waits() -> None:
    a, pr = agent()
    lane = a.lanes[2, 3]
    a._grant(pr, 3, lane, sent=0, backlog=8000, now=1.0)  # nothing heard yet: waiting
    assert pr.gates.grants == [] and lane.wait.waiting
    a.on_credit(pr, [SimpleNamespace(vl=3, fccl=advertised(0, 20_000))])
    a._grant(pr, 3, lane, sent=0, backlog=8000, now=1.5)
    assert pr.gates.grants == [(3, 19_968)] and not lane.wait.waiting  # 312 blocks
    assert lane.wait.total(2.0) == pytest.approx(0.5)
    a._grant(pr, 3, lane, sent=4 * FRAME, backlog=8000, now=2.0)  # the same limit: the gate
    assert len(pr.gates.grants) == 1  # counts it down itself; 3,288 left < a frame: waiting
    assert lane.wait.waiting and lane.wait.stalls == 2
    a.on_credit(pr, [SimpleNamespace(vl=3, fccl=advertised(4 * FRAME, 20_000))])
    a._grant(pr, 3, lane, sent=4 * FRAME, backlog=8000, now=2.5)
    # 16,680 bytes sent (260 blocks and 40 bytes); the limit (16,680 + 20,000) // 64 = 573
    assert pr.gates.grants[-1] == (3, (573 - 260) * 64 - 40) == (3, 19_992)


def test_the_budget_prices_the_credit_frames() -> None:
    """Every port's frames a credit period, twice at a switch (its own and its neighbour's),
    once at a host: on 2x2x2 at 10 ms, a leaf (4 ports: 2 hosts, 2 spines) 800 passes a
    second more."""
    from testbed.budget.scenario import scenario_load

    plain = parse_scenario({**scenario(), "mode": "roce-lossless"})
    credit = parse_scenario(scenario())
    a = scenario_load(plain.cfg, plain.topo, plain.extras)
    b = scenario_load(credit.cfg, credit.topo, credit.extras)
    assert b.switch_pps["leaf1"] - a.switch_pps["leaf1"] == pytest.approx(800)
    assert b.host_fps["h1"] - a.host_fps["h1"] == pytest.approx(100)


def test_the_budget_prices_the_agents_credit_ticks() -> None:
    """Every agent runs a credit tick every period, traffic or not: 100 more wake-ups a second
    a switch at 10 ms, each priced as a calibrated wake-up."""
    from testbed.budget.cores import Profile, demand
    from testbed.budget.scenario import scenario_load

    profile = Profile.model_validate({
        "version": 2, "measured_at": "2026-12-07T00:00:00+00:00", "cpu_model": "test",
        "cores": 2, "background_cores": 0.0,
        "builds": {"fast": {"us_per_pass": 120.0, "idle_cores": 0.0, "binary": "x"}},
        "endpoint_us_per_frame": 50.0, "endpoint_us_per_frame_per_qp": 2.0,
        "endpoint_idle_cores": 0.0, "agent_us_per_wakeup": 400.0,
        "agent_wakeups_per_s": 20.0})
    plain = parse_scenario({**scenario(), "mode": "roce-lossless"})
    credit = parse_scenario(scenario())
    a = scenario_load(plain.cfg, plain.topo, plain.extras)
    b = scenario_load(credit.cfg, credit.topo, credit.extras)
    assert (a.agent_ticks_per_s, b.agent_ticks_per_s) == (0.0, pytest.approx(100))
    # 4 switches x 20 wake-ups x 400 us, and then 4 x 120 x 400 us
    assert demand(a, profile, "fast").agents == pytest.approx(0.032)
    assert demand(b, profile, "fast").agents == pytest.approx(0.192)
