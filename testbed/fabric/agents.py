"""The switch agents of a fabric: one `python -m testbed.agent` per switch, inside its
namespace (the default), or one process serving every switch (agent.one_process).

:class:`AgentPool` writes each agent's config file (its ports, their class buffers, the tick
port, the watchdog, the switch's namespace), starts the agents, waits until each has opened
its sockets and its event log, and stops them.

One process starts one interpreter instead of one per switch, and its sockets, opened inside
each switch's namespace, keep working from outside (testbed.machine.netns); the switches' ticks
share its wake-ups (testbed.agent.schedule), which makes it a fifth cheaper under incast. But it
serves the switches' PFC frames one after another, and on cores saturated past the fabric's
capacity it fell further behind than six processes do, so a process per switch stays the
default (benchmarks/agent_process.py measures both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from testbed.agent import AgentPort, agent_config
from testbed.config.models import FabricConfig
from testbed.fabric.network import FabricError, tick_intfs
from testbed.machine.safepath import write_new
from testbed.machine.state import RunState
from testbed.results.files import AGENT_LOG_SUFFIX, AGENTS_LOG_FILE, TELEMETRY_DIR
from testbed.results.telemetry import events_path, pfcwd_path
from testbed.topology.graph import Topology, intf_name
from testbed.topology.qos import (
    credit_buffer_bytes,
    max_frame_bytes,
    port_specs,
    roce_frame_bytes,
)

#: How long the agents together may take to become ready.
READY_TIMEOUT_S = 20


def scheduling(asked: int, nice: int, real_time: list[bool]) -> tuple[str, str | None]:
    """What the agents run at, and why not what was asked when the machine refused it (an
    agent that may not take SCHED_FIFO goes on at its nice, testbed.agent.switch): given
    ``asked`` (agent.realtime_priority, 0 for none) and, per agent process, whether it runs
    real-time."""
    if asked and all(real_time):
        return f"SCHED_FIFO {asked}", None
    if not asked:
        return f"nice {nice}", None
    return f"nice {nice}", (
        f"agent.realtime_priority {asked} was refused by this machine: "
        f"{sum(not r for r in real_time)} of {len(real_time)} switch agent processes run at "
        f"nice {nice}, and PFC waits for a core as BMv2 and the hosts do (a container needs "
        "--cap-add SYS_NICE --cpu-rt-runtime 950000; `testbed doctor` checks it)")


class AgentPool:
    """One switch agent per switch, started in the switch's namespace."""

    def __init__(self, cfg: FabricConfig, topo: Topology, runtime_dir: Path, results_dir: Path,
                 state: RunState, t0: float) -> None:
        self.cfg = cfg
        self.topo = topo
        self.runtime_dir = runtime_dir
        self.out = results_dir / TELEMETRY_DIR
        self.state = state
        self.t0 = t0  # the run's clock: the agents' telemetry counts seconds from it
        self.procs: list[subprocess.Popen] = []
        #: What the agents run at ("SCHED_FIFO 10", "nice -10"), once they have started.
        self.scheduling: str | None = None
        #: Why they do not run at agent.realtime_priority, if the machine refused it.
        self.refused: str | None = None

    def runtime_files(self, switch: str) -> list[str]:
        """The files a switch's agent makes in the runtime folder."""
        return [str(self.config_path(switch)), str(pfcwd_path(self.runtime_dir, switch))]

    def config_path(self, switch: str) -> Path:
        return self.runtime_dir / f"{switch}.agent.json"

    def config(self, switch: str, netns: str | None = None) -> dict:
        """What the agent of ``switch`` is told (testbed.agent.AgentConfig, as a dict)."""
        sw = self.topo.switch(switch)
        a = self.cfg.agent
        q, mtu = self.cfg.qos, self.topo.mtu
        ports = [AgentPort(spec_port.number, intf_name(sw.name, spec_port.number),
                           spec_port.rate_mbps, list(spec.buffers),
                           credit_buffer_bytes(q, spec_port.rate_mbps, mtu) if q.credit_enable
                           else 0, bool(q.credit_enable) and spec_port.peer_port != 0)
                 for spec_port, spec in zip(sw.ports.values(),
                                            port_specs(self.cfg, self.topo, sw.name), strict=True)]
        return agent_config(sw.name, ports, self.cfg.qos, tick_intfs(sw.name)[1],
                            a.tick_period_ms / 1000, a.sample_period_ms / 1000, self.out,
                            max_frame_bytes(self.topo.mtu), a.pfc_watchdog,
                            pfcwd_path(self.runtime_dir, sw.name),
                            self.cfg.switch.thrift_port, self.t0, a.nice,
                            a.resync_period_ms / 1000, a.realtime_priority, netns,
                            roce_frame_bytes(mtu))

    @property
    def running(self) -> bool:
        return bool(self.procs)

    def log_path(self, switch: str | None = None) -> Path:
        """Where an agent's output goes: ``agents.log`` for the one process, else per switch."""
        return self.out / (f"{switch}{AGENT_LOG_SUFFIX}" if switch else AGENTS_LOG_FILE)

    def start(self, net) -> None:
        """Write each agent's config, start the agents (``net.get(switch)`` must have Mininet's
        ``pid`` and ``popen``), then wait until every agent is ready."""
        self.out.mkdir(parents=True, exist_ok=True)
        one = self.cfg.agent.one_process
        paths = []
        for sw in self.topo.switches:
            path = self.config_path(sw.name)
            node = net.get(sw.name)
            netns = f"/proc/{node.pid}/ns/net" if one else None
            write_new(path, json.dumps(self.config(sw.name, netns)))
            paths.append(str(path))
            if not one:
                with open(self.log_path(sw.name), "w") as log:
                    p = node.popen([sys.executable, "-m", "testbed.agent", str(path)],
                                   stdout=log, stderr=subprocess.STDOUT)
                self.procs.append(p)
                self.state.add_process(p.pid, str(path))
        if one:
            with open(self.log_path(), "w") as log:
                p = subprocess.Popen([sys.executable, "-m", "testbed.agent", *paths],
                                     stdout=log, stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.state.add_process(p.pid, paths[0])
        self.wait_ready()
        self.check_scheduling()

    def check_scheduling(self) -> None:
        """Whether the agents got agent.realtime_priority (each sets it before it is ready):
        a refusal of a priority the config wrote stops the run; of the default, it is said
        (testbed.run.bringup) and the agents go on at agent.nice."""
        a = self.cfg.agent
        real_time = []
        for p in self.procs:
            try:
                real_time.append(os.sched_getscheduler(p.pid) == os.SCHED_FIFO)
            except OSError:  # gone: wait_ready would have said so
                real_time.append(False)
        self.scheduling, self.refused = scheduling(a.realtime_priority, a.nice, real_time)
        if self.refused and "realtime_priority" in a.model_fields_set:
            raise FabricError(f"{self.refused}; or set agent.realtime_priority: 0")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """An agent is ready once it has opened its sockets and its event log."""
        deadline = time.monotonic() + timeout
        one = self.cfg.agent.one_process
        for i, sw in enumerate(self.topo.switches):
            proc = self.procs[0 if one else i]
            while not events_path(self.out, sw.name).exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = self.log_path(None if one else sw.name)
                    tail = log.read_text(errors="replace")[-2000:]
                    raise FabricError(f"the agent of {sw.name} did not start:\n{tail}")
                time.sleep(0.02)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []
