"""The switch agent's config file: what the fabric tells each agent (written by
:func:`agent_config`, read by :meth:`AgentConfig.load`). Read without pydantic: the agent
starts on a loaded machine, and the file is complete."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.config.phantoms import resynced_classes
from testbed.machine.ports import PortSpec
from testbed.machine.safepath import read_own


@dataclass
class AgentPort:
    number: int
    ifname: str
    rate_mbps: float
    buffers: list[int]
    #: Mode ib-credit: the receive buffer of each credited class for frames that come in on
    #: this port, and whether the neighbour is a switch (its credit gates this port's sends).
    credit_buffer: int = 0
    gated: bool = False


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
    resync_period_s: float = 0.05  # config agent.resync_period_ms
    realtime_priority: int = 0  # config agent.realtime_priority (SCHED_FIFO), 0: none
    #: The switch's network namespace (a path, /proc/PID/ns/net), which the agent enters to
    #: open the switch's sockets; None: the agent was started inside it.
    netns: str | None = None
    #: The classes whose phantoms the agent resyncs (testbed.config.phantoms.resynced_classes):
    #: the lossless ones and the classes with a phantom above them. The fabric always writes
    #: it (agent_config).
    resynced: list[int] = field(kw_only=True)
    #: Mode ib-credit (testbed.agent.credit): the credited classes, how often the ports send
    #: their flow control packets, and the largest frame such a class carries.
    credited: list[int] = field(default_factory=list, kw_only=True)
    credit_period_s: float = field(default=0.01, kw_only=True)
    credit_frame: int = field(default=0, kw_only=True)

    @property
    def resync_classes(self) -> list[int]:
        return self.resynced

    @classmethod
    def load(cls, path: str | Path) -> AgentConfig:
        d = json.loads(read_own(Path(path)))  # root reads it: only if root wrote it
        d["ports"] = [AgentPort(**p) for p in d["ports"]]
        return cls(**d)

    def port_spec(self, p: AgentPort) -> PortSpec:
        return PortSpec(p.ifname, p.rate_mbps, tuple(p.buffers),
                        tuple((d, t) for d, t in self.dscp_to_tc), self.default_tc,
                        self.max_frame)


def agent_config(switch: str, ports: list[AgentPort], qos, tick_ifname: str, tick_period_s: float,
                 sample_period_s: float, out_dir: Path, max_frame: int,
                 watchdog=None, state_file: Path | None = None,
                 thrift_port: int | None = None, t0_monotonic: float | None = None,
                 nice: int = 0, resync_period_s: float = 0.05,
                 realtime_priority: int = 0, netns: str | None = None,
                 credit_frame: int = 0) -> dict:
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
        thrift_port=thrift_port, t0_monotonic=t0_monotonic, nice=nice,
        resync_period_s=resync_period_s, realtime_priority=realtime_priority, netns=netns,
        resynced=resynced_classes(qos), credited=list(qos.credit_enable),
        credit_period_s=qos.credit.period_ms / 1000, credit_frame=credit_frame))
