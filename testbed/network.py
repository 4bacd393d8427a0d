"""Assemble a fabric in Mininet: BMv2 switches and RoCE hosts in their own namespaces.

:class:`Bmv2Switch` is a Mininet ``Switch`` (as in p4lang/tutorials) that runs in its own
network namespace, so its Thrift server is unreachable from anywhere but that namespace.
:class:`RoceHost` is a Mininet ``Host`` configured for a routed fabric without ARP: a /32
address, a default route to its leaf and a permanent neighbour entry for the gateway.
:class:`Fabric` brings the whole thing up (switches started and programmed in parallel,
waiting on readiness, never on fixed sleeps) and down again.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mininet.link import Link
from mininet.net import Mininet
from mininet.node import Host, Switch

from testbed.agent import AgentPort, agent_config
from testbed.bmv2 import Bmv2Options, Bmv2Process, SwitchStartError
from testbed.config import FabricConfig
from testbed.control import (
    AGENT_PORT,
    ControlPlaneError,
    SwitchSession,
    program_fabric,
    routing_entries,
)
from testbed.ports import PortSpec, scheduler_commands
from testbed.qos import endpoint_args, max_frame_bytes, queue_profiles
from testbed.state import RunState, runtime_dir_for
from testbed.topology import Topology, compute_routes, intf_name, link_ends

Progress = Callable[[str], None]

#: Socket send buffer for BMv2 (see ARCHITECTURE.md: BMv2 sends for all ports from one thread on
#: blocking sockets; packets held in a qdisc count against the buffer, and a full buffer stalls
#: the whole switch). 16 MiB stays under net.core.wmem_max's usual ceiling once that is raised.
SWITCH_WMEM_BYTES = 16 * 1024 * 1024

NO_IPV6 = "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"


class FabricError(Exception):
    """The fabric could not be brought up; the message says which part and why."""


def keep_flows_in_order(intfs: list[str]) -> str:
    """A shell command: Receive Packet Steering on these interfaces, over every CPU.

    A veth hands each frame to the backlog of the CPU that transmitted it. When the sending
    side's qdisc runs on one CPU for one frame and on the other for the next, the receiver can
    take the second first: a RoCE flow saw one swap in about 75 incast runs, which Go-Back-N
    counts as a loss. RPS puts each flow on one CPU's backlog, chosen by its hash, so a flow
    stays in order (see the kernel's scaling.rst). Mininet gives every node its own mount
    namespace, whose /sys shows the node's interfaces.
    """
    mask = f"{(1 << (os.cpu_count() or 1)) - 1:x}"
    return " ; ".join(f"echo {mask} > /sys/class/net/{i}/queues/rx-0/rps_cpus" for i in intfs)


class Bmv2Switch(Switch):
    """A BMv2 simple_switch_grpc in its own network namespace."""

    def __init__(self, name: str, bmv2: Bmv2Options, **params) -> None:
        params["inNamespace"] = True  # Mininet passes its own default (False): override it
        super().__init__(name, dpid=f"{bmv2.device_id:x}", **params)
        self.bmv2 = Bmv2Process(bmv2)
        # Before any link exists, so no interface ever gets an IPv6 link-local address.
        self.cmd(NO_IPV6)

    def prepare(self, mtu: int, schedulers: list[PortSpec], batch_file: Path) -> None:
        """MTU and offloads on every port, the agent's tick port, and each port's scheduler."""
        tick, agt = tick_intfs(self.name)
        cmds = [f"sysctl -qw net.core.wmem_default={SWITCH_WMEM_BYTES}", "ip link set lo up",
                f"ip link add dev {tick} type veth peer name {agt}"]
        for intf in [*self.intfNames(), tick, agt]:
            if intf == "lo":
                continue
            cmds.append(f"ip link set dev {intf} mtu {mtu} up")
            cmds.append(f"ethtool -K {intf} rx off tx off sg off tso off gso off gro off "
                        ">/dev/null 2>&1")
        batch_file.write_text("\n".join(line for spec in schedulers
                                         for line in scheduler_commands(spec)) + "\n")
        cmds.append(f"tc -batch {batch_file}")
        cmds.append(keep_flows_in_order([i for i in self.intfNames() if i != "lo"]))
        out = self.cmd(" ; ".join(cmds))
        if "Error" in out or "failed" in out:
            raise FabricError(f"{self.name}: setting up its ports failed: {out.strip()}")

    def start(self, controllers) -> None:  # noqa: ARG002 - Mininet's signature
        self.bmv2.start(lambda cmd, **kw: self.popen(cmd, **kw))

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        self.bmv2.stop()
        super().stop(deleteIntfs)


def tick_intfs(switch: str) -> tuple[str, str]:
    """The veth pair between a switch's agent port (BMv2 side) and the agent."""
    return f"{switch}-tick", f"{switch}-agt"


class RoceHost(Host):
    """A host on a routed fabric: /32 address, default route and static neighbour for its leaf."""

    def __init__(self, name: str, **params) -> None:
        super().__init__(name, **params)
        # Before any link exists: no router or neighbour solicitation ever reaches the fabric.
        self.cmd(NO_IPV6)

    def config(self, ip: str = "", mac: str = "", gateway_ip: str = "", gateway_mac: str = "",
               mtu: int = 9000, **params):
        r = super().config(mac=mac, **params)
        intf = self.defaultIntf().name
        self.cmd(" ; ".join([
            NO_IPV6,
            f"ip link set dev {intf} mtu {mtu} up",
            f"ip addr flush dev {intf}",
            f"ip addr add {ip}/32 dev {intf}",
            f"ip route add {gateway_ip} dev {intf} scope link",
            f"ip route add default via {gateway_ip} dev {intf} onlink",
            f"ip neigh replace {gateway_ip} lladdr {gateway_mac} dev {intf} nud permanent",
            # Checksums must be filled in by the kernel, not left for an offload BMv2 lacks.
            f"ethtool -K {intf} rx off tx off sg off tso off gso off gro off >/dev/null 2>&1",
            keep_flows_in_order([intf]),
        ]))
        return r


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
    """A running fabric. Use as a context manager, or call start() and stop()."""

    def __init__(self, cfg: FabricConfig, topo: Topology, results_dir: Path,
                 progress: Progress | None = None, with_agents: bool = True) -> None:
        self.with_agents = with_agents
        self.cfg = cfg
        self.topo = topo
        self.results_dir = results_dir
        self.runtime_dir = runtime_dir_for(cfg.name)
        self.progress = progress or (lambda _msg: None)
        self.net: Mininet | None = None
        self.sessions: dict[str, SwitchSession] = {}
        self.endpoints: dict = {}  # host name -> traffic.client.EndpointClient
        self._endpoint_procs: list[subprocess.Popen] = []
        self._agent_procs: list[subprocess.Popen] = []
        self.state = RunState(cfg.name)
        self.timings = Timings()
        #: Origin of the run's clock: agents' telemetry and events, the scenario's timeline
        #: and counter samples are all seconds since this instant.
        self.t0 = time.monotonic()
        self.down_links: set[tuple[str, int]] = set()  # (switch, port) ends of failed links
        self._cpu = None  # testbed.cpuload.CpuSampler while agents run
        #: Frames lost in front of BMv2 over the whole run, read as the fabric stops.
        self.hidden_loss: int | None = None
        #: Frames the hosts' endpoints lost at their own sockets, read as they stop.
        self.host_loss: int | None = None

    # -- bring-up -----------------------------------------------------------------------
    def _bmv2_options(self, sw_name: str) -> Bmv2Options:
        sw = self.topo.switch(sw_name)
        return Bmv2Options(
            name=sw.name,
            device_id=sw.device_id,
            ports={**{p: intf_name(sw.name, p) for p in sw.ports},
                   AGENT_PORT: tick_intfs(sw.name)[0]},
            grpc_socket=self.runtime_dir / f"{sw.name}.grpc",
            log_path=self.results_dir / "logs" / f"{sw.name}.log",
            thrift_port=self.cfg.switch.thrift_port,
            log=self.cfg.switch.log,
            log_max_bytes=self.cfg.switch.log_max_mb * 1024 * 1024,
            nice=self.cfg.switch.nice,
        )

    def _build(self) -> None:
        topo = self.topo
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self.state.files = [str(self.runtime_dir / f"{s.name}.{ext}") for s in topo.switches
                            for ext in ("grpc", "tc", "agent.json", "pfcwd.json")]
        self.state.interfaces = [intf_name(link.a, link.a_port) for link in topo.links] + [
            intf_name(link.b, link.b_port) for link in topo.links
        ] + [i for s in topo.switches for i in tick_intfs(s.name)]
        self.state.save()
        net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False)
        self.net = net
        for sw in topo.switches:
            node = net.addSwitch(sw.name, cls=Bmv2Switch, bmv2=self._bmv2_options(sw.name))
            self.state.add_process(node.pid, f"mininet:{sw.name}")
        for h in topo.hosts:
            node = net.addHost(h.name, cls=RoceHost, ip=h.ip, mac=h.mac, gateway_ip=h.gateway_ip,
                               gateway_mac=h.gateway_mac, mtu=topo.mtu)
            self.state.add_process(node.pid, f"mininet:{h.name}")
        for link in topo.links:
            a, b = net.get(link.a), net.get(link.b)
            if link.tier == "host":
                h_mac = topo.host(link.a).mac
                b_mac = topo.switch(link.b).ports[link.b_port].mac
                net.addLink(a, b, port1=0, port2=link.b_port, cls=Link, addr1=h_mac, addr2=b_mac,
                            intfName1=intf_name(link.a, 0),
                            intfName2=intf_name(link.b, link.b_port))
            else:
                a_mac = topo.switch(link.a).ports[link.a_port].mac
                b_mac = topo.switch(link.b).ports[link.b_port].mac
                net.addLink(a, b, port1=link.a_port, port2=link.b_port, cls=Link, addr1=a_mac,
                            addr2=b_mac, intfName1=intf_name(link.a, link.a_port),
                            intfName2=intf_name(link.b, link.b_port))
        net.build()
        for sw in topo.switches:
            net.get(sw.name).prepare(topo.mtu, self.port_specs(sw.name),
                                     self.runtime_dir / f"{sw.name}.tc")

    def queue_profiles(self, sw_name: str, rate_mbps: float) -> dict:
        """A port's eight queue profiles on this switch: every other port may feed it."""
        fan_in = max(len(self.topo.switch(sw_name).ports) - 1, 1)
        return queue_profiles(self.cfg.qos, rate_mbps, fan_in=fan_in, mtu=self.topo.mtu)

    def lossless_buffers(self) -> dict[tuple[str, int, int], int]:
        """(switch, port, class) -> the configured buffer of every lossless queue (what a real
        switch with this headroom holds; the kernel limit adds the emulation's slack)."""
        return {(sw.name, p.number, tc): prof.buffer_bytes for sw in self.topo.switches
                for p in sw.ports.values()
                for tc, prof in self.queue_profiles(sw.name, p.rate_mbps).items() if prof.pfc}

    def port_specs(self, sw_name: str) -> list[PortSpec]:
        sw = self.topo.switch(sw_name)
        q = self.cfg.qos
        return [PortSpec(intf_name(sw.name, p.number), p.rate_mbps,
                         tuple(prof.kernel_limit for prof in
                               self.queue_profiles(sw_name, p.rate_mbps).values()),
                         tuple(q.dscp_to_tc_map.items()), q.default_tc,
                         max_frame_bytes(self.topo.mtu))
                for p in sw.ports.values()]

    def start_agents(self) -> None:
        """One switch agent per switch, inside the switch's namespace."""
        assert self.net is not None
        out = self.results_dir / "telemetry"
        out.mkdir(parents=True, exist_ok=True)
        a = self.cfg.agent
        for sw in self.topo.switches:
            ports = [AgentPort(spec_port.number, intf_name(sw.name, spec_port.number),
                               spec_port.rate_mbps, list(spec.buffers))
                     for spec_port, spec in zip(sw.ports.values(), self.port_specs(sw.name),
                                                strict=True)]
            conf = agent_config(sw.name, ports, self.cfg.qos, tick_intfs(sw.name)[1],
                                a.tick_period_ms / 1000, a.sample_period_ms / 1000, out,
                                max_frame_bytes(self.topo.mtu), a.pfc_watchdog,
                                self.runtime_dir / f"{sw.name}.pfcwd.json",
                                self.cfg.switch.thrift_port, self.t0, a.nice)
            path = self.runtime_dir / f"{sw.name}.agent.json"
            path.write_text(json.dumps(conf))
            with open(out / f"{sw.name}.agent.log", "w") as log:
                p = self.net.get(sw.name).popen([sys.executable, "-m", "testbed.agent",
                                                 str(path)], stdout=log,
                                                stderr=subprocess.STDOUT)
            self._agent_procs.append(p)
            self.state.add_process(p.pid, str(path))
        # An agent is ready once it has opened its sockets and its event log.
        deadline = time.monotonic() + 20
        for sw, proc in zip(self.topo.switches, self._agent_procs, strict=True):
            while not (out / f"{sw.name}.events.csv").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = (out / f"{sw.name}.agent.log").read_text(errors="replace")[-2000:]
                    raise FabricError(f"the agent of {sw.name} did not start:\n{log}")
                time.sleep(0.02)

    def stop_agents(self) -> None:
        for p in self._agent_procs:
            if p.poll() is None:
                p.terminate()
        for p in self._agent_procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        self._agent_procs = []

    def _start_switches(self) -> None:
        assert self.net is not None
        nodes = [self.net.get(sw.name) for sw in self.topo.switches]
        for node in nodes:
            node.start([])
            self.state.add_process(node.bmv2.pid, str(node.bmv2.opts.grpc_socket))
        timeout = self.cfg.switch.start_timeout_s
        errors = []
        with cf.ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            futs = {pool.submit(n.bmv2.wait_ready, timeout): n.name for n in nodes}
            for fut in cf.as_completed(futs):
                try:
                    fut.result()
                except SwitchStartError as exc:
                    errors.append(str(exc))
        if errors:
            raise FabricError("\n".join(sorted(errors)))

    def start(self) -> Fabric:
        t = time.monotonic()
        self.progress(f"creating {len(self.topo.switches)} switches, {len(self.topo.hosts)} "
                      f"hosts and {len(self.topo.links)} links")
        try:
            self._build()
            t = self.timings.mark("mininet", t)
            self.progress("starting BMv2 switches")
            self._start_switches()
            t = self.timings.mark("switches_ready", t)
            self.progress("programming switches over P4Runtime")
            addrs = {s.name: f"unix://{self.runtime_dir / (s.name + '.grpc')}"
                     for s in self.topo.switches}
            self.sessions = program_fabric(self.topo, self.cfg, addrs)
            t = self.timings.mark("programmed", t)
            if self.with_agents:
                self.progress("starting switch agents")
                self.start_agents()
                self.timings.mark("agents", t)
                from testbed.cpuload import CpuSampler

                self._cpu = CpuSampler(self.results_dir / "telemetry" / "cpu.csv", self.t0)
                self._cpu.start()
            (self.results_dir / "topology.json").write_text(self.topo.to_json())
            (self.results_dir / "config.json").write_text(self.cfg.model_dump_json(indent=2))
        except (SwitchStartError, ControlPlaneError, FabricError):
            self.stop()
            raise
        except BaseException:
            self.stop()
            raise
        return self

    # -- endpoints ----------------------------------------------------------------------
    def endpoint_socket(self, host: str) -> Path:
        return self.runtime_dir / f"{host}.ep"

    def set_link(self, a: str, b: str, up: bool, index: int | None = None) -> list[str]:
        """Links between two switches fail or come back (all parallel links of the pair, or
        the ``index``-th, 1-based): every switch's routing converges to the fabric without the
        failed links (see compute_routes). The veths stay up, since taking a veth down under
        BMv2 stops the switch receiving on every port. Returns the switches whose routes
        changed."""
        ends = link_ends(self.topo, a, b, index)
        self.down_links = (self.down_links - ends) if up else (self.down_links | ends)
        builder = next(iter(self.sessions.values())).builder
        changed = []
        for sw in self.topo.switches:
            routing = routing_entries(builder, compute_routes(self.topo, sw,
                                                              frozenset(self.down_links)))
            if self.sessions[sw.name].reroute(routing):
                changed.append(sw.name)
        return changed

    def start_endpoints(self, extra_args: list[str] | None = None) -> dict:
        """One RoCE endpoint process per host, in the host's namespace; returns their clients."""
        from traffic.client import EndpointClient

        assert self.net is not None
        out = self.results_dir / "endpoints"
        out.mkdir(parents=True, exist_ok=True)
        for h in self.topo.hosts:
            sock = self.endpoint_socket(h.name)
            cmd = [sys.executable, "-m", "traffic.endpoint", "--intf", intf_name(h.name, 0),
                   "--mac", h.mac, "--ip", h.ip, "--next-hop-mac", h.gateway_mac,
                   "--line-rate-mbps", str(h.rate_mbps), "--control", str(sock),
                   "--out", str(out / h.name), "--t0", repr(self.t0), *endpoint_args(self.cfg),
                   *(extra_args or [])]
            with open(out / f"{h.name}.log", "w") as log:
                p = self.net.get(h.name).popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            self._endpoint_procs.append(p)
            self.state.add_process(p.pid, str(sock))
            self.state.files.append(str(sock))
        self.state.save()
        for h in self.topo.hosts:
            self.endpoints[h.name] = EndpointClient(self.endpoint_socket(h.name), timeout=15)
        return self.endpoints

    def stop_endpoints(self) -> None:
        self._read_host_loss()
        for c in self.endpoints.values():
            with contextlib.suppress(Exception):
                c.call(cmd="stop")
            c.close()
        self.endpoints = {}
        for p in self._endpoint_procs:
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
        self._endpoint_procs = []

    # -- tear-down ----------------------------------------------------------------------
    def stop(self) -> None:
        self.stop_endpoints()
        self._read_hidden_loss()
        had_agents = bool(self._agent_procs)
        self.stop_agents()
        if self._cpu is not None:
            self._cpu.stop()
            self._cpu = None
        if had_agents:
            self._write_telemetry_summary()
        for s in self.sessions.values():
            s.close()
        self.sessions = {}
        if self.net is not None:
            with contextlib.suppress(Exception):
                self.net.stop()
            self.net = None
        from testbed.state import clean_state  # after Mininet: sweep whatever it left behind

        clean_state(self.state)

    def _read_host_loss(self) -> None:
        """Frames the endpoints lost at their own sockets (a receive buffer that overflowed, a
        send the kernel refused): a host that did not keep up, like a NIC's RX overflow."""
        lost = 0
        for c in self.endpoints.values():
            try:
                st = c.call(cmd="stats")["stats"]
            except Exception:  # an endpoint already gone: the figure stays unknown
                return
            lost += st.get("rx_socket_drops", 0) + st.get("send_errors", 0)
        if self.endpoints:
            self.host_loss = (self.host_loss or 0) + lost

    def _read_hidden_loss(self) -> None:
        """Frames the switches' veths received that their P4 programs never saw, summed over
        every port (see testbed.measure), while the switches still run."""
        if not self.sessions or self.net is None:
            return
        from testbed.measure import fabric_counters

        try:
            counters = fabric_counters(self)
        except Exception as exc:  # a switch already gone: the figure stays unknown
            self.progress(f"hidden loss not read: {exc}")
            return
        self.hidden_loss = sum(max(pc.hidden_loss, 0) for sc in counters.values()
                               for pc in sc.ports.values() if pc.veth_rx_packets >= 0)

    def fidelity_budgets(self):
        """What the fidelity guard allows on this fabric (testbed.fidelity.Budgets)."""
        from testbed.fidelity import Budgets

        q = self.cfg.qos
        rates = {self.cfg.fabric.host_link_mbps, self.cfg.fabric.fabric_link_mbps}
        headroom = min((queue_profiles(q, r, mtu=self.topo.mtu)[tc].headroom for r in rates
                        for tc in q.pfc_enable),
                       default=0)
        return Budgets(headroom_bytes=headroom, reaction_us=int(q.pfc.reaction_ms * 1000),
                       bmv2_lag_us=int(self.cfg.fidelity.bmv2_lag_ms * 1000),
                       cpu_saturated_s=self.cfg.fidelity.cpu_saturated_s)

    def _write_telemetry_summary(self) -> None:
        """telemetry/summary.json beside the agents' CSVs, with the fidelity guard's verdict:
        a failed run keeps it too."""
        from testbed.analysis import fidelity_figures, telemetry_summary
        from testbed.fidelity import assess

        out = self.results_dir / "telemetry" / "summary.json"
        try:
            summary = telemetry_summary(self.results_dir)
            figs = fidelity_figures(self.results_dir, list(self.cfg.qos.pfc_enable),
                                    self.cfg.fidelity.cpu_busy_pct, self.hidden_loss,
                                    self.lossless_buffers(), self.host_loss)
            summary["fidelity"] = assess(figs, self.fidelity_budgets())
            out.write_text(json.dumps(summary, indent=2))
        except (OSError, ValueError, KeyError) as exc:  # a half-written CSV of a killed agent
            self.progress(f"telemetry summary not written: {exc}")

    def __enter__(self) -> Fabric:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- use ----------------------------------------------------------------------------
    def host(self, name: str):
        assert self.net is not None
        return self.net.get(name)

    def pingall(self, timeout: float = 1.0) -> tuple[int, int]:
        """Ping every ordered pair of hosts once; return (answered, sent)."""
        assert self.net is not None
        hosts = [self.net.get(h.name) for h in self.topo.hosts]
        ok = sent = 0
        for src in hosts:
            # One shell round trip per source host: ping every destination in the background.
            dsts = [h for h in self.topo.hosts if h.name != src.name]
            script = " ".join(
                f"(ping -c1 -W{timeout:g} {d.ip} >/dev/null 2>&1 && echo OK {d.name} || "
                f"echo FAIL {d.name}) &" for d in dsts
            ) + " wait"
            out = src.cmd(script)
            ok += out.count("OK ")
            sent += len(dsts)
        return ok, sent
