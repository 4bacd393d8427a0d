"""DCQCN reaction point against the equations of Zhu et al. 2015, with injected time."""

from __future__ import annotations

import pytest

from traffic.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint

LINE = 10e6


def rp(**kw) -> ReactionPoint:
    return ReactionPoint(DcqcnParams.scaled(LINE, **kw))


def test_scaling_follows_the_link_rate() -> None:
    p = DcqcnParams.scaled(LINE)
    s = 40e9 / LINE
    assert p.timer_period_s == pytest.approx(55e-6 * s)
    assert p.alpha_period_s == pytest.approx(55e-6 * s)
    assert p.rai_bps == pytest.approx(40e6 / s)
    assert p.min_rate_bps == pytest.approx(100e6 / s)
    assert NotificationPoint.scaled(LINE).interval_s == pytest.approx(50e-6 * s)


def test_rate_after_one_cnp() -> None:
    r = rp()
    r.on_cnp(0.0)
    # alpha starts at 1: RC <- RC (1 - 1/2); RT <- old RC; alpha <- (1-g) 1 + g = 1
    assert r.rc == pytest.approx(LINE / 2)
    assert r.rt == pytest.approx(LINE)
    assert r.alpha == pytest.approx(1.0)
    r.on_cnp(0.0)
    assert r.rc == pytest.approx(LINE / 4)
    assert r.rt == pytest.approx(LINE / 2)


def test_alpha_decays_every_k_without_cnp() -> None:
    r = rp()
    g, k = r.p.g, r.p.alpha_period_s
    r.on_cnp(0.0)
    r.advance(k * 10 + k / 2)
    assert r.alpha == pytest.approx((1 - g) ** 10)
    # a CNP with a smaller alpha cuts less
    rc = r.rc
    a = r.alpha
    r.on_cnp(k * 10 + k / 2)
    assert r.rc == pytest.approx(rc * (1 - a / 2))
    assert r.alpha == pytest.approx((1 - g) * a + g)


def test_fast_recovery_halves_the_gap_to_the_target() -> None:
    r = rp(alpha_period_s=1e9)  # keep alpha fixed for the check
    r.on_cnp(0.0)
    t = r.p.timer_period_s
    rc, rt = r.rc, r.rt
    for stage in range(1, r.p.fast_recovery_steps):
        r.advance(stage * t)
        assert r.phase == "fast_recovery"
        rc = (rt + rc) / 2
        assert r.rc == pytest.approx(rc)
        assert r.rt == pytest.approx(rt)


def test_additive_then_hyper_increase_steps() -> None:
    f = 5
    r = rp(byte_counter_bytes=1000)
    r.on_cnp(0.0)
    r.on_cnp(0.0)  # RC = LINE/4, RT = LINE/2
    t = r.p.timer_period_s
    # timer stage reaches F: additive increase (byte stage still 0)
    r.advance(f * t - 1e-9)
    rc, rt = r.rc, r.rt
    r.advance(f * t)
    assert r.timer_stage == f and r.phase == "additive_increase"
    assert r.rt == pytest.approx(rt + r.p.rai_bps)
    assert r.rc == pytest.approx((rt + r.p.rai_bps + rc) / 2)
    # byte stage reaches F too: hyper increase with i = min(iT, iB) - F + 1
    for _ in range(f - 1):
        r.on_sent(1000, f * t)
    rc, rt = r.rc, r.rt
    r.on_sent(1000, f * t)
    assert r.byte_stage == f and r.phase == "hyper_increase"
    assert r.rt == pytest.approx(min(rt + 1 * r.p.rhai_bps, LINE))
    assert r.rc == pytest.approx((r.rt + rc) / 2)


def test_floor_and_line_rate_caps() -> None:
    r = rp()
    for _ in range(100):
        r.on_cnp(0.0)
    assert r.rc == pytest.approx(r.p.min_rate_bps)
    r.advance(10_000 * r.p.timer_period_s)
    assert r.rc <= LINE and r.rt <= LINE
    assert r.rc == pytest.approx(LINE, rel=1e-3)


def test_notification_point_spacing() -> None:
    n = NotificationPoint(0.2)
    assert n.should_send(1, 0.0)
    assert not n.should_send(1, 0.1)
    assert n.should_send(2, 0.1)  # per QP
    assert n.should_send(1, 0.2)
