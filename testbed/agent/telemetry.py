"""Ticks and telemetry.

* Ticks: every resync period, for each lossless (port, class) that holds or just held
  packets, the agent reads the kernel's backlog and sends a tick frame into the switch through
  its own port; the P4 program resyncs its phantom queue to it and sends XON, or refreshes
  XOFF, toward the ports it paused. Every tick period between resyncs, timer ticks (no kernel
  read) let the program judge its own phantom, for the classes on which the switch has a
  pause standing on a neighbour.
* Telemetry: kernel backlog, drops and sent counters per (port, class), the pause states and
  the P4 program's view of each lossless queue, every sample period, as
  :class:`testbed.results.telemetry.TelemetryRow` records: for the classes traffic can reach (the
  DSCP map's, the default class), the lossless classes and any class PFC named; the last sample,
  when the agent stops, has every class.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from functools import cached_property

from testbed.agent.config import AgentConfig
from testbed.agent.frames import tick_frame
from testbed.agent.pause import PortRuntime
from testbed.agent.pfcwd import PfcWatchdog
from testbed.agent.registers import RegisterReader
from testbed.config.constants import TICK_TIMER_ONLY, gate_major
from testbed.machine.ports import ClassStats
from testbed.machine.tcstats import QdiscReader, by_ifindex
from testbed.results.telemetry import CsvWriter, TelemetryRow
from traffic.wire import NUM_TCS, PFC_QUANTUM_BITS

#: After the switch sends PFC or a lossless queue holds packets, tick fast for this long.
BUSY_HOLD_S = 1.0


class TelemetryMixin:
    """The switch agent's ticks and samples (a part of :class:`testbed.agent.SwitchAgent`)."""

    cfg: AgentConfig
    clock: Callable[[], float]
    now: Callable[[], float]
    ports: dict[int, PortRuntime]
    reader: QdiscReader
    registers: RegisterReader
    stats: dict[str, int]
    tick_sock: socket.socket
    telemetry_log: CsvWriter[TelemetryRow]
    hot: set[tuple[int, int]]  # lossless queues that held packets lately
    watchdog: PfcWatchdog  # WatchdogMixin's: what its drop action discarded, per queue
    _sent_seen: dict[tuple[int, int], int]  # each lossless queue's sent packets at last sample
    busy_until: float
    #: Per (port, class): until when (clock) the last XOFF our switch sent there holds.
    xoff_until: dict[tuple[int, int], float]
    credit_waiting: Callable[[int, int, float], tuple[bool, float] | None]  # CreditMixin's
    credit_input_max: Callable[[int, int], int | None]  # CreditMixin's

    #: The longest the loop woke after the time it asked to (its epoll came back late: the
    #: process was stopped or waited for a core) since the last sample; run_agents reports it.
    _woke_late_s: float = 0.0

    def woke_late(self, seconds: float) -> None:
        """The loop woke ``seconds`` after the time it had asked to wake."""
        self._woke_late_s = max(self._woke_late_s, seconds)

    def _late_max_us(self) -> int | None:
        """The agent's stall since the last sample: the longest an answer of BMv2 waited for
        the loop to read it, or the loop woke after its time, whichever was longer (None when
        no answer came and the loop was never late)."""
        read = self.registers.late_max_us()
        woke, self._woke_late_s = round(self._woke_late_s * 1e6), 0.0
        return read if not woke else max(read or 0, woke)

    @cached_property
    def _resynced_majors(self) -> frozenset[int]:
        """The resynced classes' gate handles (majors): what a resync tick reads (the
        lossless classes, and those with a phantom above them)."""
        return frozenset(gate_major(tc) for tc in self.cfg.resync_classes)

    @cached_property
    def _reachable_majors(self) -> frozenset[int]:
        """The gates of the classes a packet can join: the DSCP map's classes, the default
        class (the kernel's and the P4 program's classifiers use the same map), and the
        lossless classes. Under the default map that is 3 of the 8: the other five gates
        never hold, send or drop a packet, and their rows were five of every eight a sample
        parsed from the dump and wrote (the agents' CPU did not measurably move with them)."""
        tcs = {tc for _dscp, tc in self.cfg.dscp_to_tc} | {self.cfg.default_tc}
        return frozenset(gate_major(tc) for tc in tcs | set(self.cfg.resync_classes))

    def _sampled_majors(self) -> frozenset[int]:
        """The reachable classes, and any other class a PFC frame has named on some port (a
        storm injected on a class no DSCP maps to is still seen pausing it)."""
        named = {gate_major(tc) for pr in self.ports.values()
                 for tc, ps in enumerate(pr.pause) if ps.frames}
        return self._reachable_majors | named if named else self._reachable_majors

    def _backlogs(self, majors: frozenset[int] | None = None
                  ) -> dict[int, dict[int, ClassStats]]:
        """Every port's classes (or those whose gate is in ``majors``), from one netlink
        dump."""
        per_port = by_ifindex(self.reader.dump(majors))
        return {n: pr.gates.stats(per_port.get(pr.gates.ifindex, []))
                for n, pr in self.ports.items()}

    def tick(self, stats: dict[int, dict[int, ClassStats]] | None = None) -> None:
        """Resync tick: read the kernel (one dump) and tick every resynced queue (lossless, or
        with a phantom above a lossless one) that holds, or just held, packets with its
        backlog. Queues with a backlog become "hot"."""
        stats = stats if stats is not None else self._backlogs(self._resynced_majors)
        for n in self.ports:
            for tc in self.cfg.resync_classes:
                st = stats[n].get(tc)
                backlog = st.backlog_bytes if st else 0
                key = (n, tc)
                # a queue that is and was empty needs no tick: the program has nothing to do
                if backlog == 0 and key not in self.hot:
                    continue
                if backlog:
                    self.hot.add(key)
                else:
                    self.hot.discard(key)
                released = st.released_bytes if st else None
                self.tick_sock.send(tick_frame(self.cfg.tick_src_mac, n, tc, backlog,
                                               released))
                self.stats["ticks"] += 1
        if self.hot:
            self.busy_until = self.clock() + BUSY_HOLD_S

    def timer_tick(self) -> None:
        """Between resyncs: tick the hot queues of each class for which our switch has a pause
        standing on a neighbour, without reading the kernel; the program judges its own phantom
        (drained at the port rate) for XON or a refreshed XOFF.

        A timer tick does nothing else (p4/lossless.p4 drops it when the queue paused no
        port, and the phantom drains by the clock whether ticked or not), so a class with no
        pause of ours standing gets none: they were most of the ticks, each a packet BMv2
        interprets and a send that wakes it."""
        standing = self._standing_xoff()
        if not standing:
            return
        for n, tc in self.hot:
            if tc in standing:
                self.tick_sock.send(tick_frame(self.cfg.tick_src_mac, n, tc, TICK_TIMER_ONLY))
                self.stats["ticks"] += 1

    def _standing_xoff(self) -> set[int]:
        """The classes for which a pause our switch sent is still in force on some port."""
        now = self.clock()
        for key in [k for k, until in self.xoff_until.items() if until <= now]:
            del self.xoff_until[key]
        return {tc for _port, tc in self.xoff_until}

    def on_own_pfc(self, pr: PortRuntime, classes: dict[int, int],
                   cause: tuple[int, int] | None = None) -> None:
        """Our switch paused or resumed a neighbour (a PFC frame leaving port ``pr``), on
        account of the queue ``cause`` (port, class), as the program wrote in the frame."""
        now = self.clock()
        self.busy_until = now + BUSY_HOLD_S
        quantum_s = PFC_QUANTUM_BITS / (pr.cfg.rate_mbps * 1e6)
        for tc, quanta in classes.items():
            if tc not in self.cfg.lossless:
                continue
            if quanta:  # the neighbour stops sending tc for this long, unless XON or refresh
                self.xoff_until[pr.cfg.number, tc] = now + quanta * quantum_s
            else:
                self.xoff_until.pop((pr.cfg.number, tc), None)
        # An XOFF can come from the phantom while the kernel queue is already empty (and so
        # not hot): without a tick for it the program never sees the queue drained and never
        # sends the XON. Timer ticks from now on (the loop ticks at once), resyncs at their own
        # pace: a resync at once would set the phantom to a kernel backlog that has not caught
        # up with what BMv2 holds, and XON the port it just paused.
        # The queue is the one the frame names; a frame that names none of ours makes every
        # port's queue of its class hot, as each XOFF did before the program named it (a 4:1
        # incast on 2x3x2 at 20 Mbit/s: 2,325-2,352 ticks a run against 6,017-6,250).
        paused = [tc for tc, q in classes.items() if q and tc in self.cfg.lossless]
        if cause is not None and cause[0] in self.ports and cause[1] in paused:
            self.hot.add(cause)
        else:
            self.hot.update((n, tc) for n in self.ports for tc in paused)

    def _busy_lossless(self, backlogs: dict[int, dict[int, ClassStats]]
                       ) -> list[tuple[int, int]]:
        """The lossless queues that held or sent packets since the last sample: an idle queue
        had no resync, so its registers hold nothing new."""
        busy = []
        for n, per_tc in backlogs.items():
            for tc in self.cfg.lossless:
                st = per_tc.get(tc)
                if st is None:
                    continue
                key = (n, tc)
                if st.backlog_packets or self._sent_seen.get(key) != st.sent_packets \
                        or key in self.hot:
                    busy.append(key)
                self._sent_seen[key] = st.sent_packets
        return busy

    def sample(self, every_class: bool = False, resync: bool = False
               ) -> dict[int, dict[int, ClassStats]]:
        """Write a row per (port, class) sampled (every class when ``every_class``: the
        last sample, so that each class's totals are on record). Its kernel dump also serves
        a resync tick due now (``resync``) and, at rest, the slow check for a queue that
        holds packets. Returns the kernel's statistics it read, which have every lossless
        class, for the other jobs due now."""
        now = self.clock()
        t_s = self.now()
        backlogs = self._backlogs(None if every_class else self._sampled_majors())
        if resync or now >= self.busy_until:
            self.tick(backlogs)  # first: the resync's backlog as fresh as it can be
        busy = self._busy_lossless(backlogs)
        # every sample, busy or idle: an idle queue's views are not read (registers.view_calls),
        # but BMv2's hold always is, and how long BMv2 takes to answer times a stall
        self.registers.ask(busy)
        views, lag = self.registers.take()
        answer, late = self.registers.answer_max_us(), self._late_max_us()
        for n, per_tc in backlogs.items():
            pr = self.ports[n]
            for tc in range(NUM_TCS):
                st = per_tc.get(tc)
                if st is None:
                    continue
                ps = pr.pause[tc]
                paused, paused_s = bool(ps.until), ps.total + (now - ps.since if ps.until
                                                               else 0.0)
                # a credited class is held for want of credit (IB's PortXmitWait) instead
                waiting = self.credit_waiting(n, tc, now)
                if waiting is not None:
                    paused, paused_s = waiting
                drift, held, below, peak = views.get((n, tc), (None, None, None, None))
                wd = (self.watchdog.dropped_total(n, tc, st.drops) if tc in self.cfg.lossless
                      else None)
                self.telemetry_log.write(TelemetryRow(
                    t_s, self.cfg.switch, n, tc, st.backlog_bytes, st.backlog_packets, st.drops,
                    st.sent_bytes, st.sent_packets, paused, ps.frames, paused_s,
                    drift, held, below, peak, lag, wd, answer,
                    input_max_bytes=self.credit_input_max(n, tc), agent_late_max_us=late))
        self.telemetry_log.flush()
        return backlogs
