"""A running fabric: the parts composed, brought up in order and torn down in reverse.

:class:`Fabric` is a thin facade over the modules that each do one job:

* testbed.fabric.network: the Mininet network (namespaces, veths, port qdiscs, BMv2 processes);
* testbed.control.p4runtime: programming the switches over P4Runtime, and re-routing on link
  changes;
* testbed.fabric.agents and testbed.fabric.endpoints: the switch agents and the hosts' RoCE
  endpoints;
* testbed.run.lifecycle: the results folder, the state record, the run's clock and finalising.

Tear-down order (each step needs what the later ones remove): the endpoints' host loss is
read and the endpoints stop; the hidden loss is read while the switches still run; the agents
stop, then the CPU sampler; the telemetry summary with the fidelity verdict is written; the
P4Runtime sessions close; Mininet stops; the state record is cleaned.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.config.models import FabricConfig
from testbed.control.p4runtime import Rerouter, SwitchSession, program_fabric
from testbed.fabric.agents import AgentPool
from testbed.fabric.endpoints import EndpointPool
from testbed.fabric.network import FabricError, Network
from testbed.machine.ports import PortSpec
from testbed.machine.state import clean_orphans, running_elsewhere
from testbed.run.lifecycle import Progress, Run, fidelity_budgets
from testbed.topology.graph import Topology
from testbed.topology.qos import lossless_buffers, port_specs, switch_queue_profiles


@dataclass
class Timings:
    """Seconds spent in each bring-up step; the benchmark reads these."""

    steps: dict[str, float] = field(default_factory=dict)

    def mark(self, step: str, since: float) -> float:
        now = time.monotonic()
        self.steps[step] = round(now - since, 4)
        return now

    @property
    def total(self) -> float:
        return round(sum(self.steps.values()), 4)


class Fabric:
    """A running fabric. Use as a context manager, or call start() and stop().

    ``run``: the run this fabric belongs to (testbed.run.lifecycle.Run), whose folder must be
    ``results_dir`` and whose progress callback is used; by default a new run in that folder.
    """

    def __init__(self, cfg: FabricConfig, topo: Topology, results_dir: Path,
                 progress: Progress | None = None, with_agents: bool = True,
                 run: Run | None = None) -> None:
        self.cfg = cfg
        self.topo = topo
        self.with_agents = with_agents
        if run is not None and run.results_dir != results_dir:
            raise ValueError(f"the run's folder is {run.results_dir}, not {results_dir}")
        self.run = run or Run(cfg, topo, results_dir, progress)
        self.progress = self.run.progress
        r = self.run
        self.network = Network(cfg, topo, r.runtime_dir, r.results_dir, r.state)
        self.rerouter: Rerouter | None = None  # made as the switches are programmed
        self.agent_pool = AgentPool(cfg, topo, r.runtime_dir, r.results_dir, r.state, r.t0)
        self.endpoint_pool = EndpointPool(cfg, topo, r.runtime_dir, r.results_dir, r.state, r.t0)
        self.sessions: dict[str, SwitchSession] = {}
        self.timings = Timings()

    # -- what the parts hold ------------------------------------------------------------
    @property
    def results_dir(self) -> Path:
        return self.run.results_dir

    @property
    def runtime_dir(self) -> Path:
        return self.run.runtime_dir

    @property
    def state(self):
        return self.run.state

    @property
    def t0(self) -> float:
        """Origin of the run's clock (testbed.run.lifecycle.Run.t0)."""
        return self.run.t0

    @property
    def net(self):
        """The Mininet network (None before start and after stop)."""
        return self.network.net

    @property
    def endpoints(self) -> dict:
        """host name -> traffic.client.EndpointClient, while the endpoints run."""
        return self.endpoint_pool.clients

    @property
    def down_links(self) -> set[tuple[str, int]]:
        """(switch, port) ends of the links that are down."""
        return self.rerouter.down_links if self.rerouter is not None else set()

    @property
    def hidden_loss(self) -> int | None:
        """Frames lost in front of BMv2 over the whole run, read as the fabric stops."""
        return self.run.hidden_loss

    @property
    def host_loss(self) -> int | None:
        """Frames the hosts' endpoints lost at their own sockets, read as they stop."""
        return self.endpoint_pool.host_loss

    # -- bring-up -----------------------------------------------------------------------
    def start(self) -> Fabric:
        self._claim_machine()
        t = time.monotonic()
        self.progress(f"creating {len(self.topo.switches)} switches, {len(self.topo.hosts)} "
                      f"hosts and {len(self.topo.links)} links")
        try:
            self.run.open([f for s in self.topo.switches
                           for f in (*self.network.runtime_files(s.name),
                                     *self.agent_pool.runtime_files(s.name))],
                          self.network.interfaces())
            self.network.build()
            t = self.timings.mark("mininet", t)
            assert self.network.bmv2 is not None
            self.run.bmv2 = {**asdict(self.network.bmv2), "scheduling": self.network.scheduling,
                             "refused": self.network.refused, "cores": self.network.cores}
            placed = ", one core each" if self.network.cores else ""
            self.progress(f"starting BMv2 switches ({self.network.bmv2.build} build, "
                          f"{self.network.scheduling}{placed})")
            if self.network.refused:
                self.progress(self.network.refused)
            self.network.start_switches()
            t = self.timings.mark("switches_ready", t)
            self.progress("programming switches over P4Runtime")
            self.sessions = program_fabric(self.topo, self.cfg, self.network.grpc_addrs())
            self.rerouter = Rerouter(self.topo)
            t = self.timings.mark("programmed", t)
            if self.with_agents:
                self.progress("starting switch agents")
                self.start_agents()
                self.timings.mark("agents", t)
                self.run.start_cpu_sampler()
            self.run.write_inputs()
        except BaseException:
            self.stop()
            raise
        return self

    def _claim_machine(self) -> None:
        """Refuse to start beside another live fabric (Mininet's node and interface names are
        machine-wide, so either would tear down the other's), and first remove what a killed
        run left behind. Before anything is created, so that a refusal removes nothing."""
        other = running_elsewhere()
        if other is not None:
            raise FabricError(
                f"a fabric is already up on this machine ({other.name!r}, process "
                f"{other.owner_pid}): stop it with `sudo testbed down` (or wait for it)")
        for name, n in clean_orphans(report=lambda line: self.progress(f"skipped {line}")):
            self.progress(f"removed what the killed run {name!r} left: {n['processes']} "
                          f"processes, {n['interfaces']} interfaces, {n['files']} files")

    def start_agents(self) -> None:
        """One switch agent per switch, inside the switch's namespace."""
        assert self.net is not None
        pool = self.agent_pool
        try:
            pool.start(self.net)
        finally:
            self.run.agents = {"scheduling": pool.scheduling, "refused": pool.refused}
        if pool.refused:
            self.progress(pool.refused)

    def stop_agents(self) -> None:
        self.agent_pool.stop()

    def start_endpoints(self, extra_args: list[str] | None = None) -> dict:
        """One RoCE endpoint process per host, in the host's namespace; returns their clients."""
        assert self.net is not None
        return self.endpoint_pool.start(self.net, extra_args)

    def stop_endpoints(self) -> None:
        self.endpoint_pool.stop()

    def endpoint_socket(self, host: str) -> Path:
        return self.endpoint_pool.socket(host)

    # -- tear-down ----------------------------------------------------------------------
    def stop(self) -> None:
        """Stop every part, then remove what the run recorded: that last step runs whatever
        an earlier one raised (a Ctrl-C in the middle of a sweep left a run's record and
        runtime files behind)."""
        try:
            self.endpoint_pool.stop()  # reads the host loss first
            self.run.read_hidden_loss(self)
            had_agents = self.agent_pool.running
            self.agent_pool.stop()
            self.run.stop_cpu_sampler()
            if had_agents:
                self.run.write_telemetry_summary(self.host_loss,
                                                 self.endpoint_pool.host_loss_unknown,
                                                 **self.endpoint_pool.host_lag())
            for s in self.sessions.values():
                s.close()
            self.sessions = {}
            self.network.stop()
        finally:
            self.run.close()  # after Mininet: sweep whatever it left behind

    def __enter__(self) -> Fabric:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- use ----------------------------------------------------------------------------
    def host(self, name: str):
        return self.network.host(name)

    def stopped_switches(self) -> list[tuple[str, int, Path]]:
        return self.network.stopped_switches()

    def pingall(self, timeout: float = 1.0) -> tuple[int, int]:
        """Ping every ordered pair of hosts once; return (answered, sent)."""
        return self.network.pingall(timeout)

    def set_link(self, a: str, b: str, up: bool, index: int | None = None) -> list[str]:
        """Links between two switches fail or come back (all parallel links of the pair, or
        the ``index``-th, 1-based): every switch's routing converges to the fabric without the
        failed links (testbed.control.p4runtime.Rerouter). The veths stay up, since taking a veth
        down under BMv2 stops the switch receiving on every port. Returns the switches whose routes
        changed."""
        assert self.rerouter is not None, "the fabric is not started"
        return self.rerouter.set_link(self.sessions, a, b, up, index)

    # -- what the config makes of this fabric -------------------------------------------
    def queue_profiles(self, sw_name: str, rate_mbps: float) -> dict:
        """A port's eight queue profiles on this switch: every other port may feed it."""
        return switch_queue_profiles(self.cfg, self.topo, sw_name, rate_mbps)

    def port_specs(self, sw_name: str) -> list[PortSpec]:
        return port_specs(self.cfg, self.topo, sw_name)

    def lossless_buffers(self) -> dict[tuple[str, int, int], int]:
        """(switch, port, class) -> the configured buffer of every lossless queue."""
        return lossless_buffers(self.cfg, self.topo)

    def fidelity_budgets(self):
        """What the fidelity guard allows on this fabric (testbed.analysis.fidelity.Budgets)."""
        return fidelity_budgets(self.cfg, self.topo)
