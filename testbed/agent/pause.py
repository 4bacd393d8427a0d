"""Pause: a PFC frame arriving on a port closes that port's gate for each class it names, for
its quanta (512 bit times of the link each); a later frame extends or, with quanta 0, ends the
pause. This is the MAC's job in a real switch; here the agent reads the frames straight off the
port, so BMv2 is not on the reaction path. Every pause, resume and expiry is an event
(:class:`testbed.results.telemetry.EventRow`)."""

from __future__ import annotations

import heapq
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from testbed.agent.config import AgentConfig, AgentPort
from testbed.agent.pfcwd import QueueState
from testbed.machine.ports import PortGates
from testbed.results.telemetry import CsvWriter, EventRow
from traffic.wire import NUM_TCS, PFC_QUANTUM_BITS


@dataclass
class PauseState:
    until: float = 0.0  # monotonic; 0 = not paused
    since: float = 0.0
    total: float = 0.0
    frames: int = 0


@dataclass
class WatchdogState:
    """The pause code's window on the watchdog for one (port, class). on_pfc records when PFC
    arrived, which the agent feeds the watchdog as an observation; it and _resume ask whether
    the queue is in a storm, which only the watchdog (:mod:`testbed.agent.pfcwd`) decides."""

    last_pfc: float | None = None  # clock() when the last PFC frame for the class arrived
    queue: QueueState | None = None  # the watchdog's state of the queue, if it watches it

    @property
    def storm(self) -> bool:
        return self.queue is not None and self.queue.storm


@dataclass
class PortRuntime:
    cfg: AgentPort
    gates: PortGates
    sock: socket.socket
    pause: list[PauseState] = field(
        default_factory=lambda: [PauseState() for _ in range(NUM_TCS)])
    wd: list[WatchdogState] = field(
        default_factory=lambda: [WatchdogState() for _ in range(NUM_TCS)])


class PauseMixin:
    """The switch agent's pause handling (a part of :class:`testbed.agent.SwitchAgent`)."""

    cfg: AgentConfig
    clock: Callable[[], float]
    ports: dict[int, PortRuntime]
    stats: dict[str, int]
    timers: list[tuple[float, int, int]]  # (when, port, tc): a pause expires
    event_log: CsvWriter[EventRow]
    wd_action: str
    now: Callable[[], float]  # seconds on the run's clock
    hot: set[tuple[int, int]]  # the resynced queues that held packets lately (telemetry)

    def on_pfc(self, pr: PortRuntime, classes: dict[int, int], t_kernel: float) -> None:
        now = self.clock()
        quantum_s = PFC_QUANTUM_BITS / (pr.cfg.rate_mbps * 1e6)
        for tc, quanta in classes.items():
            st = pr.pause[tc]
            st.frames += 1
            self.stats["pfc_rx"] += 1
            wd = pr.wd[tc]
            wd.last_pfc = now
            if wd.storm and self.wd_action in ("drop", "forward"):
                continue  # the watchdog has this queue stop honouring PFC
            if quanta == 0:
                if st.until:
                    self._resume(pr, tc, now, "resume", t_kernel)
                continue
            if not st.until:
                pr.gates.close(tc)
                self.stats["gate_changes"] += 1
                if tc in self.cfg.resync_classes and (pr.cfg.number, tc) not in self.hot:
                    # the queue was empty at the last resync: the gate's burst goes in plugs,
                    # and what comes next is held (testbed.machine.ports.plug_sizes)
                    pr.gates.plug(tc)
                    self.stats["plugs"] += 1
                st.since = now
                self._event(pr, tc, "pause", quanta, t_kernel)
            st.until = now + quanta * quantum_s
            heapq.heappush(self.timers, (st.until, pr.cfg.number, tc))

    def _resume(self, pr: PortRuntime, tc: int, now: float, why: str,
                t_kernel: float | None = None) -> None:
        st = pr.pause[tc]
        st.total += now - st.since
        st.until = 0.0
        # logged as decided, before the gate change (and the kick that follows it)
        self._event(pr, tc, why, 0, t_kernel)
        if not (pr.wd[tc].storm and self.wd_action == "drop"):
            pr.gates.open(tc)
        self.stats["gate_changes"] += 1

    def _event(self, pr: PortRuntime, tc: int, what: str, quanta: int,
               t_kernel: float | None, detail: str = "") -> None:
        reaction = None if t_kernel is None else (time.time() - t_kernel) * 1e6
        self.event_log.write(EventRow(self.now(), self.cfg.switch, pr.cfg.number, tc, what,
                                      quanta, reaction, detail))
        self.event_log.flush()

    def expire(self) -> None:
        now = self.clock()
        while self.timers and self.timers[0][0] <= now:
            when, port, tc = heapq.heappop(self.timers)
            pr = self.ports[port]
            st = pr.pause[tc]
            if st.until and st.until <= now:  # not extended since this timer was set
                self._resume(pr, tc, now, "expire")
