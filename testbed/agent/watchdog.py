"""PFC watchdog, as SONiC runs it: every polling interval, a lossless queue that is paused by
PFC with packets waiting and none leaving loses one interval of its detection time; at zero it
is a storm, and the action applies (drop: stop honouring PFC and discard the queue's packets;
forward: stop honouring PFC; alert: log). It is restored once no PFC has arrived for the
restoration time. SONiC also asks that the PFC counter rose since the last poll; here a pause
lasts up to 3.4 s (the quanta scale with the link), so "a pause is in force" stands for it.

The decisions are :mod:`testbed.agent.pfcwd`'s (a pure state machine); here is only what it observes
(kernel counters, pause state) and what its actions do. The state is written to
``<switch>.pfcwd.json`` (:class:`testbed.results.telemetry.PfcwdState`) for the Mininet CLI's
``pfcwd`` command.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from testbed.agent.config import AgentConfig
from testbed.agent.pause import PortRuntime
from testbed.agent.pfcwd import PfcWatchdog, QueueObservation, StormDetected, StormRestored
from testbed.agent.registers import P4Registers
from testbed.machine.ports import ClassStats
from testbed.results.telemetry import PfcwdQueue, PfcwdState, write_pfcwd
from traffic.spool import Spool


class WatchdogMixin:
    """The switch agent's PFC watchdog (a part of :class:`testbed.agent.SwitchAgent`)."""

    cfg: AgentConfig
    clock: Callable[[], float]
    now: Callable[[], float]
    ports: dict[int, PortRuntime]
    p4: P4Registers
    spool: Spool  # the state file is written off the loop
    _event: Callable[..., None]
    #: The telemetry's kernel read (TelemetryMixin): every port's classes from one dump.
    _backlogs: Callable[..., dict[int, dict[int, ClassStats]]]
    _resynced_majors: frozenset[int]

    @functools.cached_property
    def watchdog(self) -> PfcWatchdog:
        """The watchdog, its defaults from testbed.config.models.PfcWatchdogConfig (one definition).
        Each watched queue's :class:`WatchdogState` is bound to the watchdog's state of it, so the
        pause code reads the storm from the one place that decides it."""
        wd = PfcWatchdog.from_agent(self.cfg.watchdog, self.ports, self.cfg.lossless)
        for (n, tc), q in wd.queues.items():
            self.ports[n].wd[tc].queue = q
        return wd

    @property
    def wd_action(self) -> str:
        return self.watchdog.action

    def watchdog_poll(self, backlogs: dict[int, dict[int, ClassStats]] | None = None) -> None:
        """One polling interval: observe every watched queue, let the watchdog judge, carry
        out its actions, write the state file. ``backlogs``: a sample's statistics read in the
        same wake-up (they have every lossless class), instead of a dump of its own."""
        if not self.watchdog.ports:
            return
        now = self.clock()
        stats = backlogs if backlogs is not None else self._backlogs(self._resynced_majors)
        seen: dict[tuple[int, int], QueueObservation] = {}
        for n, tc in self.watchdog.queues:
            st = stats[n].get(tc)
            if st is None:  # no gate right now: nothing to judge
                continue
            pr = self.ports[n]
            seen[n, tc] = QueueObservation(
                paused=bool(pr.pause[tc].until), backlog_packets=st.backlog_packets,
                sent_packets=st.sent_packets, drops=st.drops, last_pfc_at=pr.wd[tc].last_pfc)
        for act in self.watchdog.poll(now, seen):
            if isinstance(act, StormDetected):
                self._wd_detect(act)
            else:
                self._wd_restore(act)
        self._write_state()

    def _wd_detect(self, act: StormDetected) -> None:
        """Apply a storm's action. drop and forward end the pause in force (on_pfc ignores
        PFC for the queue from now on) and tell the P4 program; alert only logs."""
        pr, tc = self.ports[act.port], act.tc
        if act.ignores_pfc:
            pause = pr.pause[tc]
            if pause.until:
                pause.total += act.at - pause.since
                pause.until = 0.0
        if act.action == "drop":
            # discard what is queued and whatever arrives: the class's queue holds nothing;
            # the gates' counters stay cumulative and count the purged backlog as drops
            pr.gates.drop_all(tc)
        elif act.action == "forward":
            pr.gates.open(tc)
        if act.ignores_pfc:
            self.p4.set_pfc_ignored(act.port, tc, True)
        self._event(pr, tc, "storm_detected", 0, None, act.detail)

    def _wd_restore(self, act: StormRestored) -> None:
        """Undo the storm's action: the normal gate back, PFC honoured again."""
        pr = self.ports[act.port]
        if act.action == "drop":
            pr.gates.restore(act.tc)
            st = pr.gates.stats().get(act.tc)
            if st is not None:  # what the drop gate discarded since the last poll is its too
                act = replace(act, dropped=self.watchdog.settle_dropped(act.port, act.tc,
                                                                        st.drops))
        if act.action in ("drop", "forward"):
            admitted = self.p4.set_pfc_ignored(act.port, act.tc, False)
            if act.action == "drop" and admitted is not None:
                # What the program admitted is now sent, dropped, or in the (restored) queue:
                # the resync ticks count the dropped frames' bytes from here on. Off by what
                # BMv2 held at this instant (counted as dropped, then sent), by which the
                # occupancy is then understated; a resync never sets the phantom below the
                # kernel's backlog. Without an answer the ticks go on without the released
                # bytes: the backlog alone.
                st = pr.gates.stats().get(act.tc)
                if st is not None:
                    pr.gates.rebase(act.tc, admitted - st.backlog_bytes)
        self._event(pr, act.tc, "storm_restored", 0, None, act.detail)

    def _write_state(self) -> None:
        """``<switch>.pfcwd.json`` for the Mininet CLI's ``pfcwd`` command, written by the
        spool's thread (each poll's state, in order)."""
        if not self.cfg.state_file:
            return
        self.spool.submit(functools.partial(write_pfcwd, self.cfg.state_file, PfcwdState(
            switch=self.cfg.switch, t_s=round(self.now(), 3), action=self.wd_action,
            queues=[PfcwdQueue(port=n, tc=tc, storm=q.storm, storms=q.storms,
                               paused=bool(self.ports[n].pause[tc].until), dropped=q.dropped,
                               detection_left_ms=q.detection_left_ms)
                    for (n, tc), q in self.watchdog.queues.items()])))
