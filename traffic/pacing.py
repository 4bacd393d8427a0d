"""The endpoint's pacers' one rule (:func:`paced`), and how late its process came to the frames
it had due: the host's own lag.

An emulated NIC is a process, and a process waits for a core: when the scheduler (or, on a
virtual machine, the hypervisor's steal) keeps it away, the frames it had due leave late. The
pacers repay a lateness up to their slack (:data:`PACING_SLACK_S`: the next frames go back to back
until the rate is made up); beyond it the debt is forgiven, so the NIC stood idle with work to
do, and what the run measures (a collective's efficiency, a flow's goodput) is the host CPU's
result, not the protocol's. A real NIC's pipeline is hardware: it has no such time.

Measured once per turn of the endpoint's loop, which is cheap: the loop knows when its next
frame was due (what ``_transmit`` returned at the previous turn), and the turn starts at ``now``.
Pure: the loop hands in its times, :class:`~traffic.endpoint_telemetry.EndpointStats` keeps
the figures.
"""

from __future__ import annotations

#: How far behind schedule a pacer may fall before it forgets the debt; keeps the average rate
#: exact when the loop wakes late, without letting a stalled QP burst afterwards.
PACING_SLACK_S = 0.005


def paced(next_time: float, now: float, cost: float) -> float:
    """Advance a pacer's next-send time by one frame's cost, forgiving lateness past a slack."""
    return max(next_time, now - PACING_SLACK_S) + cost


class LatenessMeter:
    """The endpoint's lateness to its due frames, accumulated into its stats: ``active_s``
    (time with a frame due or waiting for a pause to end), ``late_lost_s`` (lateness beyond
    the slack, which no pacer repays) and ``late_max_s``."""

    __slots__ = ("_due", "_last", "slack_s", "stats")

    def __init__(self, slack_s: float, stats) -> None:
        self.slack_s = slack_s
        self.stats = stats
        stats.active_s = stats.late_lost_s = stats.late_max_s = 0.0
        self._due: float | None = None  # when the previous turn's next frame was due
        self._last = 0.0  # when the previous turn began

    def turn(self, now: float) -> None:
        """A turn of the loop begins at ``now``: how late it came to the frame that was due."""
        due = self._due
        if due is not None:
            st = self.stats
            st.active_s += now - self._last
            late = now - due
            if late > st.late_max_s:
                st.late_max_s = late
            if late > self.slack_s:
                st.late_lost_s += late - self.slack_s
        self._last = now

    def next_due(self, due: float | None) -> None:
        """When this turn's next frame is due (None: nothing to send)."""
        self._due = due


#: The least active time a share of lost time is taken over. A share is a rate, and over a
#: fraction of a second one late wake-up decides it: a host that sent 80 frames in 0.23 s
#: and woke 14 ms late once (9.9 ms past the slack) came out 4.37% idle, in a run whose
#: other hosts lost nothing. Over at least a second, that one wait is 0.99%, while a host
#: that keeps waking late (a quarter of every core taken in slices) still shows 17%.
MIN_ACTIVE_S = 1.0


def lost_share(stats: dict) -> float | None:
    """The share of an endpoint's active time its NIC lost to its own lateness, counted over
    at least :data:`MIN_ACTIVE_S` (0 with nothing lost); None when the endpoint does not
    measure it (mode tcp: the kernel sends)."""
    lost, active = stats.get("late_lost_s"), stats.get("active_s")
    if lost is None or active is None:
        return None
    return lost / max(active, MIN_ACTIVE_S) if lost > 0 else 0.0
