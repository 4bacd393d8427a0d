"""The switch agent's process: its ports, sockets and files, and the loop that runs the jobs of
:mod:`testbed.agent.pause`, :mod:`testbed.agent.telemetry` and :mod:`testbed.agent.watchdog`
in one thread, sleeping in epoll until a PFC frame arrives or the next timer is due (its file
writes are another thread's: traffic.spool)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from testbed.agent.config import AgentConfig
from testbed.agent.credit import CreditMixin
from testbed.agent.frames import pfc_cause, pfc_socket, receive
from testbed.agent.pause import PauseMixin, PortRuntime
from testbed.agent.registers import P4Registers, RegisterReader
from testbed.agent.schedule import Periodic, offset_slots, window
from testbed.agent.telemetry import TelemetryMixin
from testbed.agent.watchdog import WatchdogMixin
from testbed.machine.netns import inside
from testbed.machine.ports import PortGates
from testbed.machine.tcstats import QdiscReader
from testbed.results.telemetry import events_writer, telemetry_writer
from traffic.credits import parse_credit_frame
from traffic.packets import parse_pfc
from traffic.spool import Spool, SpooledFile
from traffic.wire import NUM_TCS


class SwitchAgent(PauseMixin, TelemetryMixin, WatchdogMixin, CreditMixin):
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
        self.stats = {"ticks": 0, "pfc_rx": 0, "gate_changes": 0, "plugs": 0}
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        # every file write leaves the loop for the spool's thread (traffic.spool)
        self.spool = Spool(cfg.switch)
        spooled = partial(SpooledFile, spool=self.spool)
        self.telemetry_log = telemetry_writer(cfg.out_dir, cfg.switch, spooled)
        self.event_log = events_writer(cfg.out_dir, cfg.switch, spooled)
        self.hot: set[tuple[int, int]] = set()  # lossless queues that held packets lately
        self._sent_seen: dict[tuple[int, int], int] = {}  # sent packets at the last sample
        self.busy_until = 0.0
        self.xoff_until: dict[tuple[int, int], float] = {}  # our pauses standing on neighbours
        # Thrift connects on first use, perhaps after the thread has left the namespace
        self.p4 = P4Registers(cfg.thrift_port, cfg.switch, cfg.netns)  # the watchdog's writes
        self.registers = RegisterReader(cfg.thrift_port, cfg.switch, cfg.netns)  # its reads
        self.credit_setup()  # mode ib-credit: the credited gates start closed

    def now(self) -> float:
        return self.clock() - self.t0

    # -- loop ---------------------------------------------------------------------------
    # The loop is split so that one process can serve several switches (run_agents): each
    # agent says which sockets it waits on and when it next must wake, and handles what is
    # ready; run_agents sleeps in one epoll over every agent's sockets.
    def start_loop(self, anchor: float, offset: float = 0.0) -> None:
        """Lay the periodic jobs' grids (:mod:`testbed.agent.schedule`): the ticks on
        ``anchor``, which every switch of one process shares, so that their ticks take one
        wake-up; the resyncs, samples and watchdog polls ``offset`` seconds later, a whole
        number of ticks, which differs between the switches of one process so that their
        samples, the heavy job, take turns."""
        cfg = self.cfg
        start = anchor + offset
        self.window = window(cfg.tick_period_s)
        self.ticks = Periodic.starting(anchor, cfg.tick_period_s)
        self.resyncs = Periodic.starting(start, cfg.resync_period_s)
        self.samples = Periodic.starting(start, cfg.sample_period_s)
        self.polls = Periodic.starting(start, self.watchdog.config.polling_interval_ms / 1000)
        self.credits = Periodic.starting(anchor, cfg.credit_period_s)

    def sockets(self) -> list:
        return list(self.by_sock)

    def due(self) -> float:
        """Run what is due (samples, ticks, the watchdog's poll, pause expiries); return when
        (on self.clock) the agent must next wake. Jobs due together share the sample's kernel
        dump: a resync tick needs the lossless classes, the watchdog every watched queue,
        and the sample reads both."""
        now = self.clock()
        soon = now + self.window
        busy = now < self.busy_until
        backlogs = None
        if self.samples.due(soon):
            resync = busy and self.ticks.due(soon) and self.resyncs.due(soon)
            backlogs = self.sample(resync=resync)
            self.samples.ran(soon)
            if resync or not busy:  # the sample ticked: this slot's resync, or the at-rest one
                self.resyncs.ran(soon)
                self.ticks.ran(soon)
        if busy and self.ticks.due(soon):
            if self.resyncs.due(soon):
                self.tick()
                self.resyncs.ran(soon)
            else:
                self.timer_tick()
            self.ticks.ran(soon)
        wd_on = self.watchdog.config.enabled
        if wd_on and self.polls.due(soon):
            self.watchdog_poll(backlogs)
            self.polls.ran(soon)
        self.expire()
        if self.cfg.credited and self.credits.due(soon):
            self.credit_tick()
            self.credits.ran(soon)
        wake = self.samples.next
        if self.cfg.credited:
            wake = min(wake, self.credits.next)
        if now < self.busy_until:
            # a timer tick does something only while a pause of ours stands (timer_tick); with
            # none, the next tick that does anything is the next resync
            wake = min(wake, self.ticks.next if self._standing_xoff()
                       else max(self.ticks.next, self.resyncs.next))
        if self.timers:
            wake = min(wake, self.timers[0][0])
        if wd_on:
            wake = min(wake, self.polls.next)
        return wake

    def ready(self, s) -> None:
        """A socket of ours is readable: PFC frames came or left."""
        pr = self.by_sock[s]
        for data, t_kernel, outgoing in receive(s):
            if self.cfg.credited:
                credits = parse_credit_frame(data)
                if credits is not None:
                    if not outgoing:
                        self.on_credit(pr, credits)
                    continue
            classes = parse_pfc(data)
            if outgoing:  # our switch paused or resumed a neighbour
                if classes:
                    self.on_own_pfc(pr, classes, pfc_cause(data))
                    self.ticks.at_once(self.clock())  # tick at once
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
        self.telemetry_log.close()
        self.event_log.close()
        self.spool.close()  # every write done
        self.credit_close()
        # At once: closing a packet socket waits out an RCU grace period (packet(7)'s release
        # calls synchronize_net()), 7-23 ms each here, and a leaf has nine (a PFC and a kick
        # socket a port, and the tick's): 130 ms of a teardown one after another. close()
        # lets go of the interpreter lock, so threads overlap the waits.
        closers = [self.tick_sock.close, *(f for pr in self.ports.values()
                                           for f in (pr.sock.close, pr.gates.close_sockets))]
        with ThreadPoolExecutor(len(closers)) as pool:
            list(pool.map(lambda close: close(), closers))


def run_agents(agents: list[SwitchAgent]) -> None:
    """Serve every agent from this thread until one is told to stop, woken by the first PFC
    frame, timer or register read of any of them.

    epoll, not select(): select() hooks the thread onto every socket's wait queue and off again
    at each wake-up, which for one process's six switches (48 sockets) was 0.1 ms of the
    kernel's time a wake-up. Its timeout counts whole milliseconds, rounded up, so a timer
    (a tick, a pause's expiry) runs up to 1 ms late: an XON up to 1.25 KB of the link's time
    late at 10 Mbit/s, 5 KB at 40, and a pause that long longer, the safe side. Rounded down,
    the loop spun through every last millisecond before a pause's expiry."""
    clock = agents[0].clock
    anchor = clock()
    #: fd -> (agent, its PFC socket), or (agent, None) for its register reads' connection
    owner: dict[int, tuple[SwitchAgent, socket.socket | None]] = {}
    for i, a in enumerate(agents):
        a.start_loop(anchor, offset_slots(i, len(agents), a.cfg.tick_period_s,
                                          a.cfg.sample_period_s))
        owner.update({s.fileno(): (a, s) for s in a.sockets()})
    watched: dict[int, tuple[socket.socket, int]] = {}  # agent's index -> its reads' socket
    with select.epoll() as ep:
        for fd in owner:
            ep.register(fd, select.EPOLLIN)
        while all(a.running for a in agents):
            wake = min(a.due() for a in agents)
            for i, a in enumerate(agents):
                _watch_reads(ep, owner, watched, i, a)
            events = ep.poll(max(0.0, wake - clock()))
            if (late := clock() - wake) > 0:  # woke after its time: stopped, or no core
                for a in agents:
                    a.woke_late(late)
            for fd, _events in events:
                agent, s = owner.get(fd, (None, None))
                if agent is None:
                    continue
                if s is None:
                    agent.registers.readable()
                else:
                    agent.ready(s)


def _watch_reads(ep: select.epoll, owner: dict, watched: dict, i: int, a: SwitchAgent) -> None:
    """Watch the connection of agent ``i``'s register reads while a batch is out, and only
    then (between batches a closed connection would read as readable for ever)."""
    s = a.registers.watch()
    old = watched.get(i)
    if old is not None and old[0] is s:
        return
    if old is not None:
        del watched[i]
        # unless the number went to another switch's new connection since this one closed
        # (closing a socket drops it from epoll)
        if owner.get(old[1]) == (a, None):
            del owner[old[1]]
            with contextlib.suppress(OSError):  # closed: epoll dropped it already
                ep.unregister(old[1])
    if s is not None:
        fd = s.fileno()
        ep.register(fd, select.EPOLLIN)
        owner[fd] = (a, None)
        watched[i] = (s, fd)


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
        else:  # in parallel, as each closes its sockets (SwitchAgent.close)
            with ThreadPoolExecutor(len(agents)) as pool:
                list(pool.map(SwitchAgent.close, agents))
        for a in agents:
            print(json.dumps({"switch": a.cfg.switch, **a.stats}), flush=True)
