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
from testbed.netns import inside
from testbed.ports import PortGates
from testbed.results import events_writer, telemetry_writer
from testbed.tcstats import QdiscReader
from traffic.packets import parse_pfc


class SwitchAgent(PauseMixin, TelemetryMixin, WatchdogMixin):
    def __init__(self, cfg: AgentConfig, clock=time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self.t0 = cfg.t0_monotonic if cfg.t0_monotonic is not None else clock()
        self.reader = QdiscReader()
        self.ports: dict[int, PortRuntime] = {}
        for p in cfg.ports:
            gates = PortGates(cfg.port_spec(p), reader=self.reader)
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
        self.xoff_until: dict[tuple[int, int], float] = {}  # our pauses standing on neighbours
        # Thrift connects on first use, perhaps after the thread has left the namespace
        self.p4 = P4Registers(cfg.thrift_port, cfg.switch, cfg.netns)  # the watchdog's writes
        self.registers = RegisterReader(cfg.thrift_port, cfg.switch, cfg.netns)  # its reads
        self.registers.start()

    def now(self) -> float:
        return self.clock() - self.t0

    # -- loop ---------------------------------------------------------------------------
    # The loop is split so that one process can serve several switches (run_agents): each
    # agent says which sockets it waits on and when it next must wake, and handles what is
    # ready; run_agents sleeps in one select() over every agent's sockets.
    def start_loop(self, phase: float = 0.0) -> None:
        """``phase`` (0 to 1): how far into each period this agent's timers fall, so that
        the agents one process serves take their samples, resyncs and polls in turn, not all
        in one wake-up (which held a PFC frame for six samples' time)."""
        now = self.clock()
        poll_s = self.watchdog.config.polling_interval_ms / 1000
        self.next_tick = now + phase * self.cfg.tick_period_s
        self.next_resync = now + phase * self.cfg.resync_period_s
        self.next_sample = now + phase * self.cfg.sample_period_s
        self.next_poll = now + phase * poll_s

    def sockets(self) -> list:
        return list(self.by_sock)

    def due(self) -> float:
        """Run what is due (ticks, samples, the watchdog's poll, pause expiries); return when
        (on self.clock) the agent must next wake."""
        now = self.clock()
        wd_on = self.watchdog.config.enabled
        if now >= self.next_tick and now < self.busy_until:
            if now >= self.next_resync:
                self.tick()
                self.next_resync = now + self.cfg.resync_period_s
            else:
                self.timer_tick()
            self.next_tick = now + self.cfg.tick_period_s
        if now >= self.next_sample:
            self.sample()
            self.next_sample = now + self.cfg.sample_period_s
        if wd_on and now >= self.next_poll:
            self.watchdog_poll()
            self.next_poll = now + self.watchdog.config.polling_interval_ms / 1000
        self.expire()
        wake = min(self.next_tick if now < self.busy_until else self.next_sample,
                   self.next_sample, self.timers[0][0] if self.timers else self.next_sample)
        if wd_on:
            wake = min(wake, self.next_poll)
        return wake

    def ready(self, s) -> None:
        """A socket of ours is readable: PFC frames came or left."""
        pr = self.by_sock[s]
        for data, t_kernel, outgoing in receive(s):
            classes = parse_pfc(data)
            if outgoing:  # our switch paused or resumed a neighbour
                if classes:
                    self.on_own_pfc(pr, classes)
                    self.next_tick = min(self.next_tick, self.clock())  # tick at once
                continue
            if classes:
                self.on_pfc(pr, classes, t_kernel)

    def run(self) -> None:
        run_agents([self])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sample(every_class=True)
        self.registers.stop()
        for pr in self.ports.values():
            for tc in range(NUM_TCS):
                if pr.pause[tc].until:
                    pr.gates.open(tc)
            pr.sock.close()
            pr.gates.close_sockets()
        self.tick_sock.close()
        self.telemetry_log.close()
        self.event_log.close()


def run_agents(agents: list[SwitchAgent]) -> None:
    """Serve every agent from this thread until one is told to stop: one select() over all
    their sockets, woken by the first PFC frame or timer of any of them."""
    clock = agents[0].clock
    owner = {}
    for i, a in enumerate(agents):
        a.start_loop(i / len(agents))
        owner.update({s: a for s in a.sockets()})
    socks = list(owner)
    while all(a.running for a in agents):
        wake = min(a.due() for a in agents)
        ready, _, _ = select.select(socks, [], [], max(0.0, wake - clock()))
        for s in ready:
            owner[s].ready(s)


def _set_priority(cfg: AgentConfig) -> None:
    """Before the register readers start, so that they inherit it."""
    if cfg.nice:
        os.setpriority(os.PRIO_PROCESS, 0, cfg.nice)
    if cfg.realtime_priority:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.realtime_priority))
        except OSError as e:  # a container without CAP_SYS_NICE, or no real-time budget
            print(f"agent {cfg.switch}: no real-time priority ({e.strerror}); running at nice "
                  f"{cfg.nice} (agent.realtime_priority)", flush=True)


def main() -> None:
    """``python -m testbed.agent CONFIG.json [CONFIG.json ...]``: one agent per config file,
    each made inside its switch's namespace (its ``netns``), all served by this process."""
    if len(sys.argv) < 2:
        print("usage: python -m testbed.agent CONFIG.json [CONFIG.json ...]", file=sys.stderr)
        sys.exit(2)
    cfgs = [AgentConfig.load(path) for path in sys.argv[1:]]
    _set_priority(cfgs[0])  # the fabric's agent settings: the same in every file
    agents: list[SwitchAgent] = []

    def stop(*_) -> None:
        for a in agents:
            a.running = False

    signal.signal(signal.SIGTERM, stop)
    try:
        for cfg in cfgs:
            with inside(cfg.netns):
                agents.append(SwitchAgent(cfg))
        run_agents(agents)
    except KeyboardInterrupt:
        pass
    finally:
        if len(agents) <= 1:
            for a in agents:
                a.close()
        else:  # in parallel: closing a packet socket waits out an RCU grace period
            from concurrent.futures import ThreadPoolExecutor  # (packet(7)), one at a time here

            with ThreadPoolExecutor(len(agents)) as pool:
                list(pool.map(SwitchAgent.close, agents))
        for a in agents:
            print(json.dumps({"switch": a.cfg.switch, **a.stats}), flush=True)
