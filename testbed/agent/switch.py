"""The switch agent's process: its ports, sockets and files, and the loop that runs the jobs of
:mod:`testbed.agent.pause`, :mod:`testbed.agent.telemetry` and :mod:`testbed.agent.watchdog`
in one thread, sleeping in select() until a PFC frame arrives or the next timer is due."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

from testbed.agent.config import AgentConfig
from testbed.agent.frames import pfc_socket, receive
from testbed.agent.pause import PauseMixin, PortRuntime
from testbed.agent.registers import P4Registers, RegisterReader
from testbed.agent.telemetry import TelemetryMixin
from testbed.agent.watchdog import WatchdogMixin
from testbed.constants import NUM_TCS
from testbed.ports import PortGates, TcBatch
from testbed.results import events_writer, telemetry_writer
from testbed.tcstats import QdiscReader
from traffic.packets import parse_pfc


class SwitchAgent(PauseMixin, TelemetryMixin, WatchdogMixin):
    def __init__(self, cfg: AgentConfig, clock=time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self.t0 = cfg.t0_monotonic if cfg.t0_monotonic is not None else clock()
        self.batch = TcBatch()
        self.reader = QdiscReader()
        self.ports: dict[int, PortRuntime] = {}
        for p in cfg.ports:
            gates = PortGates(cfg.port_spec(p), batch=self.batch, reader=self.reader)
            s = pfc_socket(p.ifname)
            s.setblocking(False)
            self.ports[p.number] = PortRuntime(p, gates, s)
        self.by_sock = {pr.sock: pr for pr in self.ports.values()}
        self.tick_sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.tick_sock.bind((cfg.tick_ifname, 0))
        self.timers: list[tuple[float, int, int]] = []  # (when, port, tc): a pause expires
        self.running = True
        self.stats = {"ticks": 0, "pfc_rx": 0, "gate_changes": 0}
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        self.telemetry_log = telemetry_writer(cfg.out_dir, cfg.switch)
        self.event_log = events_writer(cfg.out_dir, cfg.switch)
        self.hot: set[tuple[int, int]] = set()  # lossless queues that held packets lately
        self._sent_seen: dict[tuple[int, int], int] = {}  # sent packets at the last sample
        self.busy_until = 0.0
        self.p4 = P4Registers(cfg.thrift_port, cfg.switch)  # the watchdog's writes
        self.registers = RegisterReader(cfg.thrift_port, cfg.switch)  # telemetry's reads
        self.registers.start()

    def now(self) -> float:
        return self.clock() - self.t0

    # -- kicks ----------------------------------------------------------------------------
    # An opened gate needs a kick once tc has applied the change (PortGates.open). The agent's
    # loop is single-threaded, so instead of waiting for tc, each gate has the batch kick it
    # when tc answers (TcBatch.when_applied), and the loop dispatches on the batch's output.
    def _kick_when_applied(self) -> None:
        for pr in self.ports.values():
            pr.gates.kick_when_applied = True

    # -- loop ---------------------------------------------------------------------------
    def run(self) -> None:
        next_tick = next_sample = next_poll = self.clock()
        wd_on = self.watchdog.config.enabled
        poll_s = self.watchdog.config.polling_interval_ms / 1000
        self._kick_when_applied()
        socks: list = [*self.by_sock, self.batch]
        next_resync = next_tick
        while self.running:
            now = self.clock()
            if now >= next_tick and now < self.busy_until:
                if now >= next_resync:
                    self.tick()
                    next_resync = now + self.cfg.resync_period_s
                else:
                    self.timer_tick()
                next_tick = now + self.cfg.tick_period_s
            if now >= next_sample:
                self.sample()
                next_sample = now + self.cfg.sample_period_s
            if wd_on and now >= next_poll:
                self.watchdog_poll()
                next_poll = now + poll_s
            self.expire()
            self.batch.fire_overdue()
            wake = min(next_tick if now < self.busy_until else next_sample, next_sample,
                       self.timers[0][0] if self.timers else next_sample)
            if wd_on:
                wake = min(wake, next_poll)
            overdue = self.batch.overdue_at()  # on time.monotonic, as self.clock
            if overdue is not None:
                wake = min(wake, overdue)
            ready, _, _ = select.select(socks, [], [], max(0.0, wake - self.clock()))
            for s in ready:
                if s is self.batch:
                    self.batch.dispatch()
                    continue
                pr = self.by_sock[s]
                for data, t_kernel, outgoing in receive(s):
                    classes = parse_pfc(data)
                    if outgoing:  # our switch paused or resumed a neighbour
                        if classes:
                            self.on_own_pfc(classes)
                            next_tick = min(next_tick, self.clock())  # tick at once
                        continue
                    if classes:
                        self.on_pfc(pr, classes, t_kernel)

    def close(self) -> None:
        for pr in self.ports.values():  # the loop is over: open() waits for tc itself now
            pr.gates.kick_when_applied = False
        with contextlib.suppress(Exception):
            self.sample()
        self.registers.stop()
        for pr in self.ports.values():
            for tc in range(NUM_TCS):
                if pr.pause[tc].until:
                    pr.gates.open(tc)
            pr.sock.close()
            pr.gates.ipr.close()
        self.batch.close()
        self.tick_sock.close()
        self.telemetry_log.close()
        self.event_log.close()


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: python -m testbed.agent CONFIG.json", file=sys.stderr)
        sys.exit(2)
    cfg = AgentConfig.load(sys.argv[1])
    # before the tc batch process and the register reader start, so that they inherit both
    if cfg.nice:
        os.setpriority(os.PRIO_PROCESS, 0, cfg.nice)
    if cfg.realtime_priority:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.realtime_priority))
        except OSError as e:  # a container without CAP_SYS_NICE, or no real-time budget
            print(f"agent {cfg.switch}: no real-time priority ({e.strerror}); running at nice "
                  f"{cfg.nice} (agent.realtime_priority)", flush=True)
    agent = SwitchAgent(cfg)
    signal.signal(signal.SIGTERM, lambda *_: setattr(agent, "running", False))
    try:
        agent.run()
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()
        print(json.dumps({"switch": agent.cfg.switch, **agent.stats}), flush=True)
