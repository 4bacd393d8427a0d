"""The endpoint's lateness to its due frames (traffic.pacing), with hand-worked times."""

from __future__ import annotations

from traffic.endpoint_telemetry import EndpointStats
from traffic.pacing import MIN_ACTIVE_S, PACING_SLACK_S, LatenessMeter, lost_share, paced


def test_lateness_beyond_the_slack_is_lost_and_within_it_is_repaid() -> None:
    st = EndpointStats()
    m = LatenessMeter(0.005, st)
    m.turn(0.000)
    m.next_due(None)  # nothing to send: the time until the next turn is not active
    m.turn(1.000)
    m.next_due(1.010)
    m.turn(1.013)  # 3 ms late: the pacers repay it
    m.next_due(1.014)
    m.turn(1.034)  # 20 ms late: 15 ms of it lost
    m.next_due(None)
    m.turn(2.000)
    assert st.active_s == 1.034 - 1.000
    assert abs(st.late_lost_s - 0.015) < 1e-9
    assert abs(st.late_max_s - 0.020) < 1e-9
    # 34 ms of activity is too short to be a rate: the 15 ms lost count over a second
    assert abs(lost_share({"late_lost_s": st.late_lost_s, "active_s": st.active_s})
               - 0.015 / MIN_ACTIVE_S) < 1e-9


def test_a_share_over_a_long_active_time_is_that_time_s() -> None:
    """Sustained lateness over a long run is judged over the time it was active; one late
    wake-up in a short burst of frames is judged over at least MIN_ACTIVE_S (the CI dry run's
    case: 9.9 ms lost over 0.23 s active)."""
    assert lost_share({"late_lost_s": 0.6, "active_s": 4.0}) == 0.15
    assert abs(lost_share({"late_lost_s": 0.0099, "active_s": 0.2264}) - 0.0099) < 1e-12
    assert lost_share({"late_lost_s": 0.0, "active_s": 0.0}) == 0.0


def test_no_activity_is_no_lag_and_a_tcp_endpoint_measures_none() -> None:
    st = EndpointStats()
    LatenessMeter(PACING_SLACK_S, st)
    assert lost_share({"late_lost_s": st.late_lost_s, "active_s": st.active_s}) == 0.0
    assert lost_share({"late_lost_s": None, "active_s": None}) is None  # EndpointStats()'s own
    assert EndpointStats().active_s is None


def test_a_pacer_forgives_only_what_is_past_the_slack() -> None:
    assert paced(1.000, 1.002, 0.001) == 1.001  # 2 ms behind: the debt is kept
    assert abs(paced(1.000, 1.020, 0.001) - (1.020 - PACING_SLACK_S + 0.001)) < 1e-12
