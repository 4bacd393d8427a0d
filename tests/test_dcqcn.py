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


def test_profiles_scale_alike_and_connectx_has_its_defaults() -> None:
    s = 40e9 / LINE
    cx = DcqcnParams.scaled(LINE, "connectx")
    assert cx.timer_period_s == pytest.approx(300e-6 * s)  # rpg_time_reset 300 us
    assert cx.alpha_period_s == pytest.approx(1e-6 * s)  # dce_tcp_rtt 1 us
    assert cx.byte_counter_bytes == 32767  # rpg_byte_reset, a byte count: not scaled
    assert cx.rai_bps == pytest.approx(5e6 / s) and cx.rhai_bps == pytest.approx(50e6 / s)
    assert cx.min_rate_bps == pytest.approx(1e6 / s)
    assert cx.g == pytest.approx(5 / 1024) and cx.fast_recovery_steps == 1
    assert cx.cnp_interval_s == pytest.approx(4e-6 * s)  # min_time_between_cnps
    assert not cx.clamp_target
    paper = DcqcnParams.scaled(LINE, "paper")
    assert paper == DcqcnParams.scaled(LINE) and paper.clamp_target
    assert paper.cnp_interval_s == pytest.approx(NotificationPoint.scaled(LINE).interval_s)
    with pytest.raises(ValueError, match="unknown DCQCN profile"):
        DcqcnParams.scaled(LINE, "cx7")


def cut_repeatedly(profile: str, cnps: int) -> ReactionPoint:
    """CNPs a tenth of a rate-increase period apart, alpha held at 1 (no decay, no gain)."""
    p = DcqcnParams.scaled(LINE, profile, g=0.0, initial_alpha=1.0, alpha_period_s=1e9)
    r = ReactionPoint(p)
    for i in range(cnps):
        r.on_cnp(i * p.timer_period_s / 10)
    return r


def test_connectx_keeps_the_target_rate_while_cuts_come_faster_than_increases() -> None:
    """clamp_tgt_rate off: with no increase between cuts, RT stays where the QP came from (the
    line rate); the paper's RT follows RC down, one cut behind."""
    paper, cx = cut_repeatedly("paper", 4), cut_repeatedly("connectx", 4)
    assert paper.rc == pytest.approx(LINE / 16) and cx.rc == pytest.approx(LINE / 16)
    assert paper.rt == pytest.approx(LINE / 8)  # RT <- RC before the last cut
    assert cx.rt == pytest.approx(LINE)  # kept: the rate never rose since the first cut
    # so ConnectX's first increase (fast recovery: RC <- (RT + RC) / 2) climbs far higher
    paper.advance(3 * paper.p.timer_period_s / 10 + paper.p.timer_period_s)
    cx.advance(3 * cx.p.timer_period_s / 10 + cx.p.timer_period_s)
    assert paper.rc == pytest.approx((LINE / 8 + LINE / 16) / 2)
    assert cx.rc == pytest.approx((LINE + LINE / 16) / 2)


def test_connectx_clamps_the_target_once_the_rate_has_risen() -> None:
    r = cut_repeatedly("connectx", 1)  # RC = LINE/2, RT kept at LINE
    r.advance(r.p.timer_period_s)  # one increase: RC rises to 3/4 LINE
    assert r.rc == pytest.approx(0.75 * LINE)
    r.on_cnp(r.now)  # rose since the last cut: RT <- RC, as the paper does
    assert r.rt == pytest.approx(0.75 * LINE)
    assert r.rc == pytest.approx(0.375 * LINE)


@pytest.mark.parametrize("profile", ["paper", "connectx"])
def test_timers_run_only_when_next_increase_says_give_the_same_rates(profile: str) -> None:
    """The endpoint advances a reaction point only when its rate can change (next_increase),
    at a cut and at a send, no longer every 10 ms: the rate it paces with must be the same at
    every moment as one advanced every millisecond, and after a cut every figure too."""
    import random

    rng = random.Random(11)
    every, lazy = (rp(profile=profile, byte_counter_bytes=40_000) for _ in range(2))
    period = every.p.timer_period_s
    step = period / 50
    looks = cuts = rises = 0
    for i in range(1, 40_000):
        before = every.rc
        now = i * step
        every.advance(now)
        if now >= lazy.next_increase():
            lazy.advance(now)
            looks += 1
        event = rng.random()
        if event < 0.001:
            cuts += 1
            for r in (every, lazy):
                r.on_cnp(now)
            assert (lazy.rc, lazy.rt, lazy.alpha) == (every.rc, every.rt, every.alpha)
        elif event < 0.3:
            for r in (every, lazy):
                r.on_sent(1024, now)
        assert (lazy.rc, lazy.rt) == (every.rc, every.rt), f"at step {i}"
        rises += every.rc > before
    assert cuts >= 20 and rises >= 100  # the rates moved both ways on the way
    assert looks < 40_000 / 10
    fresh = rp(profile=profile)
    assert fresh.next_increase() == float("inf")  # at line rate: no timer to run
    fresh.on_cnp(1.0)
    assert fresh.next_increase() == pytest.approx(1.0 + period)
