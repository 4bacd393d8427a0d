"""The switch agent: what a switch OS does in software, one process per switch, inside the
switch's network namespace.

* Pause: a PFC frame arriving on a port closes that port's gate for each class it names, for
  its quanta (512 bit times of the link each); a later frame extends or, with quanta 0, ends the
  pause. This is the MAC's job in a real switch; here the agent reads the frames straight off
  the port (a raw socket for EtherType 0x8808), so BMv2 is not on the reaction path.
* Ticks: every tick period, for each lossless (port, class), the agent reads the kernel's backlog
  and sends a tick frame into the switch through its own port; the P4 program resyncs its
  phantom queue to it and sends XON, or refreshes XOFF, toward the ports it paused.
* Telemetry: kernel backlog, drops and sent counters per (port, class) and the gate states, as a
  CSV time series (:class:`testbed.results.TelemetryRow`), and every pause as an event
  (:class:`testbed.results.EventRow`).
* PFC watchdog, as SONiC runs it: every polling interval, a lossless queue that is paused by
  PFC with packets waiting and none leaving loses one interval of its detection time; at zero it
  is a storm, and the action applies (drop: stop honouring PFC and discard the queue's packets;
  forward: stop honouring PFC; alert: log). It is restored once no PFC has arrived for the
  restoration time. SONiC also asks that the PFC counter rose since the last poll; here a pause
  lasts up to 3.4 s (the quanta scale with the link), so "a pause is in force" stands for it.
  The state is written to ``<switch>.pfcwd.json`` for the Mininet CLI's ``pfcwd`` command.

Run by the testbed as ``python -m testbed.agent CONFIG.json``; the config is written by
:func:`agent_config`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import heapq
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.constants import (
    ETH_P_ALL,
    ETH_P_MAC_CONTROL,
    ETH_P_TICK,
    NUM_TCS,
    PACKET_OUTGOING,
    PFC_QUANTUM_BITS,
    TICK_SENT_UNKNOWN,
    TICK_TIMER_ONLY,
)
from testbed.pfcwd import PfcWatchdog, QueueObservation, QueueState, StormDetected, StormRestored
from testbed.ports import ClassStats, PortGates, PortSpec, TcBatch
from testbed.results import (
    EventRow,
    PfcwdQueue,
    PfcwdState,
    TelemetryRow,
    events_writer,
    telemetry_writer,
    write_pfcwd,
)
from testbed.tcstats import QdiscReader
from traffic.packets import parse_pfc

SO_ATTACH_FILTER = 26
#: Classic BPF: keep a frame whose EtherType (offset 12) is 0x8808, drop the rest.
PFC_BPF = [(0x28, 0, 0, 12), (0x15, 0, 1, ETH_P_MAC_CONTROL), (0x06, 0, 0, 0xFFFF),
           (0x06, 0, 0, 0)]
#: After the switch sends PFC or a lossless queue holds packets, tick fast for this long.
BUSY_HOLD_S = 1.0
#: While busy, resync from the kernel this often; timer ticks fill the gaps (no kernel read).
RESYNC_S = 0.05
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not name it

@dataclass
class AgentPort:
    number: int
    ifname: str
    rate_mbps: float
    buffers: list[int]


@dataclass
class AgentConfig:
    switch: str
    ports: list[AgentPort]
    dscp_to_tc: list[list[int]]
    default_tc: int
    lossless: list[int]
    tick_ifname: str
    tick_period_s: float
    sample_period_s: float
    out_dir: str
    max_frame: int = 9014
    tick_src_mac: str = "02:00:00:00:00:fe"
    watchdog: dict | None = None  # PfcWatchdogConfig as a dict, with "ports": [numbers]
    state_file: str | None = None
    thrift_port: int | None = None  # BMv2's, inside this namespace: read the drift register
    #: The fabric's clock origin (CLOCK_MONOTONIC, shared by every process on the machine), so
    #: that every agent's t_s, the scenario's timeline and the counter samples line up.
    t0_monotonic: float | None = None
    nice: int = 0  # scheduling priority (config agent.nice), set before anything starts

    @classmethod
    def load(cls, path: str | Path) -> AgentConfig:
        d = json.loads(Path(path).read_text())
        d["ports"] = [AgentPort(**p) for p in d["ports"]]
        return cls(**d)

    def port_spec(self, p: AgentPort) -> PortSpec:
        return PortSpec(p.ifname, p.rate_mbps, tuple(p.buffers),
                        tuple((d, t) for d, t in self.dscp_to_tc), self.default_tc,
                        self.max_frame)


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
    the queue is in a storm, which only the watchdog (:mod:`testbed.pfcwd`) decides."""

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


def tick_frame(src_mac: str, port: int, tc: int, backlog: int,
               released: int | None = None) -> bytes:
    """The agent's tick for (port, class): the kernel's backlog, and the bytes the kernel has
    let go of (sent plus dropped) since the port was made, modulo 2^32 (None: unknown, the
    program then takes the backlog alone)."""
    dst = b"\x02\x00\x00\x00\x00\xff"
    src = bytes.fromhex(src_mac.replace(":", ""))
    sent = TICK_SENT_UNKNOWN if released is None else released & 0xFFFFFFFF
    if sent == TICK_SENT_UNKNOWN:  # the one value that means unknown: off by a byte is safe
        sent -= 1
    body = struct.pack("!HBII", port, tc, min(backlog, 0xFFFFFFFF), sent)
    f = dst + src + struct.pack("!H", ETH_P_TICK) + body
    return f + b"\x00" * (60 - len(f))


def released_bytes(st: ClassStats, max_frame: int) -> int:
    """Bytes a kernel queue has let go of: sent, plus dropped. The kernel counts drops in
    packets only; they are costed at the class's mean frame size (the largest frame before it
    has sent any), which errs by a fraction of a frame per drop in a class where a drop is
    already a failure the run reports."""
    mean = st.sent_bytes // st.sent_packets if st.sent_packets else max_frame
    return st.sent_bytes + st.drops * mean


def pfc_socket(ifname: str) -> socket.socket:
    """A socket that sees every PFC frame on the port, both ways, with kernel timestamps.

    Outgoing frames matter: a PFC frame our own switch sends says a queue of ours crossed XOFF,
    which is when the ticks are needed (see tick()). Linux hands outgoing frames only to
    ETH_P_ALL sockets, not to one bound to 0x8808, so the socket takes everything and a BPF
    filter keeps only MAC control frames in the kernel.
    """
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    prog = b"".join(struct.pack("HBBI", *ins) for ins in PFC_BPF)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HL", len(PFC_BPF), ctypes.addressof(buf))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    s.bind((ifname, 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return s


class SwitchAgent:
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
        self.busy_until = 0.0
        self._thrift = None

    def now(self) -> float:
        return self.clock() - self.t0

    # -- pause --------------------------------------------------------------------------
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
                st.since = now
                self._event(pr, tc, "pause", quanta, t_kernel)
            st.until = now + quanta * quantum_s
            heapq.heappush(self.timers, (st.until, pr.cfg.number, tc))

    def _resume(self, pr: PortRuntime, tc: int, now: float, why: str,
                t_kernel: float | None = None) -> None:
        st = pr.pause[tc]
        st.total += now - st.since
        st.until = 0.0
        # logged as decided, before the gate change (which waits for tc before kicking)
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

    # -- PFC watchdog -------------------------------------------------------------------
    # The decisions are testbed.pfcwd's (a pure state machine, SONiC's pfcwd); here is only
    # what it observes (kernel counters, pause state) and what its actions do.
    @functools.cached_property
    def watchdog(self) -> PfcWatchdog:
        """The watchdog, its defaults from testbed.config.PfcWatchdogConfig (one definition). Each
        watched queue's :class:`WatchdogState` is bound to the watchdog's state of it, so the
        pause code reads the storm from the one place that decides it."""
        wd = PfcWatchdog.from_agent(self.cfg.watchdog, self.ports, self.cfg.lossless)
        for (n, tc), q in wd.queues.items():
            self.ports[n].wd[tc].queue = q
        return wd

    @property
    def wd_action(self) -> str:
        return self.watchdog.action

    def watchdog_poll(self) -> None:
        """One polling interval: observe every watched queue, let the watchdog judge, carry
        out its actions, write the state file."""
        if not self.watchdog.ports:
            return
        now = self.clock()
        dump = self.reader.dump()
        stats = {n: self.ports[n].gates.stats(dump) for n in self.watchdog.ports}
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
            self._p4_ignore_pfc(act.port, tc, True)
        self._event(pr, tc, "storm_detected", 0, None, act.detail)

    def _wd_restore(self, act: StormRestored) -> None:
        """Undo the storm's action: the normal gate back, PFC honoured again."""
        pr = self.ports[act.port]
        if act.action == "drop":
            pr.gates.restore(act.tc)
        if act.action in ("drop", "forward"):
            self._p4_ignore_pfc(act.port, act.tc, False)
        self._event(pr, act.tc, "storm_restored", 0, None, act.detail)

    def _write_state(self) -> None:
        """``<switch>.pfcwd.json`` for the Mininet CLI's ``pfcwd`` command."""
        if not self.cfg.state_file:
            return
        write_pfcwd(self.cfg.state_file, PfcwdState(
            switch=self.cfg.switch, t_s=round(self.now(), 3), action=self.wd_action,
            queues=[PfcwdQueue(port=n, tc=tc, storm=q.storm, storms=q.storms,
                               paused=bool(self.ports[n].pause[tc].until), dropped=q.dropped,
                               detection_left_ms=q.detection_left_ms)
                    for (n, tc), q in self.watchdog.queues.items()]))

    def expire(self) -> None:
        now = self.clock()
        while self.timers and self.timers[0][0] <= now:
            when, port, tc = heapq.heappop(self.timers)
            pr = self.ports[port]
            st = pr.pause[tc]
            if st.until and st.until <= now:  # not extended since this timer was set
                self._resume(pr, tc, now, "expire")

    # -- deferred kicks -------------------------------------------------------------------
    # An opened gate needs a kick once tc has applied the change (PortGates.open). The agent's
    # loop is single-threaded, so instead of sleeping for it, the kick waits in a timer heap
    # of its own, which run() fires and counts in its wake-up time.
    def _defer_kicks(self) -> None:
        """Have every gate of this agent hand its kicks to the loop from now on."""
        self.kicks: list[tuple[float, int, PortGates]] = []  # (due, seq, gates)
        self._kick_seq = 0
        for pr in self.ports.values():
            pr.gates.kick_later = self._kick_later

    def _kick_later(self, gates: PortGates, delay_s: float) -> None:
        if not self.running:  # closing: the loop will not come round again to kick
            time.sleep(delay_s)
            gates.kick()
            return
        self._kick_seq += 1
        heapq.heappush(self.kicks, (self.clock() + delay_s, self._kick_seq, gates))

    def run_kicks(self) -> None:
        """Kick every gate whose kick is due."""
        now = self.clock()
        while self.kicks and self.kicks[0][0] <= now:
            heapq.heappop(self.kicks)[2].kick()

    # -- ticks and telemetry --------------------------------------------------------------
    def _backlogs(self) -> dict[int, dict]:
        dump = self.reader.dump()  # one netlink dump for every port
        return {n: pr.gates.stats(dump) for n, pr in self.ports.items()}

    def tick(self, stats: dict[int, dict] | None = None) -> None:
        """Resync tick: read the kernel (one dump) and tick every lossless queue that holds, or
        just held, packets with its backlog. Queues with a backlog become "hot"."""
        stats = stats if stats is not None else self._backlogs()
        for n in self.ports:
            for tc in self.cfg.lossless:
                st = stats[n].get(tc)
                backlog = st.backlog_bytes if st else 0
                released = released_bytes(st, self.cfg.max_frame) if st else None
                key = (n, tc)
                # a queue that is and was empty needs no tick: the program has nothing to do
                if backlog == 0 and key not in self.hot:
                    continue
                if backlog:
                    self.hot.add(key)
                else:
                    self.hot.discard(key)
                self.tick_sock.send(tick_frame(self.cfg.tick_src_mac, n, tc, backlog,
                                               released))
                self.stats["ticks"] += 1
        if self.hot:
            self.busy_until = self.clock() + BUSY_HOLD_S

    def timer_tick(self) -> None:
        """Between resyncs: tick the hot queues without reading the kernel; the program judges
        its own phantom (drained at the port rate) for XON or a refreshed XOFF."""
        for n, tc in self.hot:
            self.tick_sock.send(tick_frame(self.cfg.tick_src_mac, n, tc, TICK_TIMER_ONLY))
            self.stats["ticks"] += 1

    def _bm(self):
        """BMv2's Thrift client inside this namespace (None without a port or the module)."""
        if self._thrift is None and self.cfg.thrift_port:
            from bm_runtime.standard import Standard
            from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
            from thrift.transport import TSocket, TTransport

            transport = TTransport.TBufferedTransport(
                TSocket.TSocket("127.0.0.1", self.cfg.thrift_port))
            proto = TMultiplexedProtocol.TMultiplexedProtocol(
                TBinaryProtocol.TBinaryProtocol(transport), "standard")
            transport.open()
            self._thrift = Standard.Client(proto)
        return self._thrift

    def _registers(self) -> tuple[dict[int, tuple[int, int, int, int]], int | None]:
        """The P4 program's view at the last resync of each lossless queue (drift, held: see
        the registers in p4/lossless.p4) and BMv2's longest hold of a packet since the last
        call (read and cleared), over Thrift one cell at a time (the whole 4096-cell array
        costs 12 ms to decode)."""
        if not self.cfg.thrift_port or not self.cfg.lossless:
            return {}, None
        try:
            bm = self._bm()
            out = {}
            for n in self.ports:
                for tc in self.cfg.lossless:
                    cell = n * NUM_TCS + tc
                    d = bm.bm_register_read(0, "drift", cell)
                    held = bm.bm_register_read(0, "held", cell)
                    below = bm.bm_register_read(0, "below_max", cell)
                    if below:
                        bm.bm_register_write(0, "below_max", cell, 0)
                    peak = bm.bm_register_read(0, "occupancy_max", cell)
                    if peak:
                        bm.bm_register_write(0, "occupancy_max", cell, 0)
                    out[cell] = (d - (1 << 32) if d >= 1 << 31 else d,
                                 held - (1 << 32) if held >= 1 << 31 else held, below, peak)
            lag = bm.bm_register_read(0, "bmv2_lag_max", 0)
            bm.bm_register_write(0, "bmv2_lag_max", 0, 0)
            return out, lag
        except Exception:  # BMv2 gone or no Thrift module: the columns stay empty
            self._thrift = None
            return {}, None

    def _p4_ignore_pfc(self, port: int, tc: int, ignore: bool) -> None:
        """Tell the P4 program whether the watchdog has (port, class) ignore PFC: while it
        does, the phantom must keep draining, or the program would XOFF upstream on the storm's
        account and spread it (secondary storms)."""
        idx = port * NUM_TCS + tc
        try:
            bm = self._bm()
            if bm is None:
                return
            bm.bm_register_write(0, "pfc_ignored", idx, int(ignore))
            if ignore:
                bm.bm_register_write(0, "paused_until", idx, 0)
        except Exception as exc:  # BMv2 gone: nothing left to tell
            self._thrift = None
            print(f"{self.cfg.switch}: pfc_ignored[{idx}] not written: {exc}", file=sys.stderr)

    def sample(self) -> None:
        now = self.clock()
        t_s = self.now()
        backlogs = self._backlogs()
        regs, lag = self._registers()
        if now >= self.busy_until:
            self.tick(backlogs)  # the slow, at-rest check rides on the sample's dump
        for n, per_tc in backlogs.items():
            pr = self.ports[n]
            for tc in range(NUM_TCS):
                st = per_tc.get(tc)
                if st is None:
                    continue
                ps = pr.pause[tc]
                paused_s = ps.total + (now - ps.since if ps.until else 0.0)
                d, held, below, peak = regs.get(n * NUM_TCS + tc, (None, None, None, None))
                self.telemetry_log.write(TelemetryRow(
                    t_s, self.cfg.switch, n, tc, st.backlog_bytes, st.backlog_packets, st.drops,
                    st.sent_bytes, st.sent_packets, bool(ps.until), ps.frames, paused_s,
                    d, held, below, peak, lag))
        self.telemetry_log.flush()

    # -- loop ---------------------------------------------------------------------------
    def run(self) -> None:
        next_tick = next_sample = next_poll = self.clock()
        wd_on = self.watchdog.config.enabled
        poll_s = self.watchdog.config.polling_interval_ms / 1000
        self._defer_kicks()
        socks = list(self.by_sock)
        next_resync = next_tick
        while self.running:
            now = self.clock()
            if now >= next_tick and now < self.busy_until:
                if now >= next_resync:
                    self.tick()
                    next_resync = now + RESYNC_S
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
            self.run_kicks()
            wake = min(next_tick if now < self.busy_until else next_sample, next_sample,
                       self.timers[0][0] if self.timers else next_sample)
            if wd_on:
                wake = min(wake, next_poll)
            if self.kicks:
                wake = min(wake, self.kicks[0][0])
            ready, _, _ = select.select(socks, [], [], max(0.0, wake - self.clock()))
            for s in ready:
                pr = self.by_sock[s]
                while True:
                    try:
                        data, anc, _flags, addr = s.recvmsg(2048, 64)
                    except BlockingIOError:
                        break
                    except OSError:  # the port went down: nothing to read until it is up
                        break
                    t_kernel = time.time()
                    for level, kind, value in anc:
                        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                            sec, nsec = struct.unpack("qq", value[:16])
                            t_kernel = sec + nsec / 1e9
                    classes = parse_pfc(data)
                    if addr[2] == PACKET_OUTGOING:  # our switch paused or resumed a neighbour
                        if classes:
                            self.busy_until = self.clock() + BUSY_HOLD_S
                            # An XOFF can come from the phantom while the kernel queue is
                            # already empty (and so not hot): without a tick for it the program
                            # never sees the queue drained and never sends the XON. Timer ticks
                            # from now on, resyncs at their own pace: a resync at once would
                            # set the phantom to a kernel backlog that has not caught up with
                            # what BMv2 holds, and XON the port it just paused.
                            self.hot.update((n, tc) for n in self.ports for tc, q in
                                            classes.items() if q and tc in self.cfg.lossless)
                            next_tick = min(next_tick, self.clock())
                        continue
                    if classes:
                        self.on_pfc(pr, classes, t_kernel)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sample()
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
    if cfg.nice:  # before the tc batch process starts, so that it inherits the priority
        os.setpriority(os.PRIO_PROCESS, 0, cfg.nice)
    agent = SwitchAgent(cfg)
    signal.signal(signal.SIGTERM, lambda *_: setattr(agent, "running", False))
    try:
        agent.run()
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()
        print(json.dumps({"switch": agent.cfg.switch, **agent.stats}), flush=True)


def agent_config(switch: str, ports: list[AgentPort], qos, tick_ifname: str, tick_period_s: float,
                 sample_period_s: float, out_dir: Path, max_frame: int,
                 watchdog=None, state_file: Path | None = None,
                 thrift_port: int | None = None, t0_monotonic: float | None = None,
                 nice: int = 0) -> dict:
    wd = None
    if watchdog is not None:
        wd = watchdog.model_dump()
        if wd["ports"] != "all":
            wd["ports"] = [int(x.split(":")[1]) for x in wd["ports"]
                           if x.split(":")[0] == switch]
    return asdict(AgentConfig(
        switch=switch, ports=ports, dscp_to_tc=[[d, t] for d, t in qos.dscp_to_tc_map.items()],
        default_tc=qos.default_tc, lossless=list(qos.pfc_enable), tick_ifname=tick_ifname,
        tick_period_s=tick_period_s, sample_period_s=sample_period_s, out_dir=str(out_dir),
        max_frame=max_frame, watchdog=wd, state_file=str(state_file) if state_file else None,
        thrift_port=thrift_port, t0_monotonic=t0_monotonic, nice=nice))


if __name__ == "__main__":
    main()
