"""The rx_loss fault and the DCQCN profile option, from the scenario file to the endpoint's
state (pure: no sockets)."""

from __future__ import annotations

import pytest

from testbed.config.models import ConfigError
from testbed.run.scenario import parse_scenario
from traffic.dcqcn import DcqcnParams
from traffic.endpoint_config import build_parser, config_from_args
from traffic.endpoint_pfc import PfcPort
from traffic.endpoint_telemetry import EndpointStats

BASE = {"fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1}, "duration_s": 5,
        "flows": [{"name": "a", "src": "h1", "dst": "h2", "count": 1}]}


class Nic(PfcPort):
    """The endpoint's PFC and fault part alone."""

    def __init__(self) -> None:
        self.stats = EndpointStats()
        self._init_pfc()


def losses(rate: float, seed: int, n: int = 20000) -> list[bool]:
    nic = Nic()
    nic.set_fault("rx_loss", rate=rate, seed=seed)
    out = [nic._lost_on_arrival() for _ in range(n)]
    assert nic.stats.rx_loss_dropped == sum(out)
    return out


def test_rx_loss_drops_at_its_rate_and_repeats_with_its_seed() -> None:
    one = losses(0.01, seed=1)
    assert 150 <= sum(one) <= 250  # 1% of 20000, within a few standard deviations
    assert losses(0.01, seed=1) == one
    assert losses(0.01, seed=2) != one
    assert sum(losses(0.0, seed=1)) == 0
    assert sum(losses(1.0, seed=1)) == 20000


def test_rx_loss_refuses_a_rate_outside_0_to_1() -> None:
    with pytest.raises(ValueError, match="rate from 0 to 1"):
        Nic().set_fault("rx_loss", rate=1.5)


def test_scenario_rx_loss_fault_needs_a_rate() -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario({**BASE, "faults": [{"at_s": 0, "host": "h2", "mode": "rx_loss"}]})
    assert "faults.0: rx_loss needs rate" in info.value.render()
    sc = parse_scenario({**BASE, "faults": [{"at_s": 0, "host": "h2", "mode": "rx_loss",
                                             "rate": 0.05, "seed": 7}]})
    assert (sc.extras.faults[0].rate, sc.extras.faults[0].seed) == (0.05, 7)


#: The endpoints' timer arguments of a scenario that sets none: the defaults.
TIMER = ["--local-ack-timeout", "8", "--retry-count", "7"]


def test_dcqcn_profile_reaches_the_endpoints_arguments() -> None:
    sc = parse_scenario({**BASE, "endpoints": {"dcqcn_profile": "connectx"}})
    args = sc.extras.endpoints.args()
    assert args == ["--dcqcn-profile", "connectx", *TIMER]
    cfg = config_from_args(build_parser().parse_args(
        ["--intf", "h1-eth0", "--mac", "02:00:00:00:00:01", "--ip", "10.0.1.1",
         "--next-hop-mac", "02:00:00:00:00:02", "--control", "/tmp/x.ep", "--out", "/tmp/x",
         *args]))
    assert cfg.dcqcn_profile == "connectx"
    assert DcqcnParams.scaled(cfg.line_rate_bps, cfg.dcqcn_profile).clamp_target is False
    assert parse_scenario(BASE).extras.endpoints.args() == [*TIMER]
    assert parse_scenario({**BASE, "endpoints": {"dcqcn": False}}).extras.endpoints.args() \
        == ["--no-dcqcn", *TIMER]


def test_local_ack_timeout_reaches_every_qp_scaled_to_the_link() -> None:
    """endpoints.local_ack_timeout is IB's exponent n: 4.096 us x 2^n at 40 Gbit/s, times
    4000 at 10 Mbit/s (as DCQCN's timers), and half that at 20 Mbit/s; retry_count goes along."""
    sc = parse_scenario({**BASE, "endpoints": {"local_ack_timeout": 9, "retry_count": 3}})
    base = ["--intf", "h1-eth0", "--mac", "02:00:00:00:00:01", "--ip", "10.0.1.1",
            "--next-hop-mac", "02:00:00:00:00:02", "--control", "/tmp/x.ep", "--out", "/tmp/x"]
    cfg = config_from_args(build_parser().parse_args([*base, *sc.extras.endpoints.args()]))
    assert cfg.rto_s == pytest.approx(4.096e-6 * 512 * 4000)  # 8.4 s
    assert cfg.retry_count == 3
    fast = config_from_args(build_parser().parse_args(
        [*base, "--line-rate-mbps", "20", *sc.extras.endpoints.args()]))
    assert fast.rto_s == pytest.approx(cfg.rto_s / 2)
    default = config_from_args(build_parser().parse_args(base))
    assert default.rto_s == pytest.approx(4.096e-6 * 256 * 4000) and default.retry_count == 7
    for bad in ({"local_ack_timeout": 0}, {"retry_count": 8}):
        with pytest.raises(ConfigError) as info:
            parse_scenario({**BASE, "endpoints": bad})
        assert f"endpoints.{next(iter(bad))}" in info.value.render()
    with pytest.raises(ConfigError) as info:
        parse_scenario({**BASE, "endpoints": {"retransmit_timeout_ms": 2000}})
    assert "set local_ack_timeout" in info.value.render()


def test_dcqcn_profile_without_dcqcn_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario({**BASE, "endpoints": {"dcqcn": False, "dcqcn_profile": "connectx"}})
    assert "dcqcn_profile connectx has no effect with dcqcn: false" in info.value.render()
