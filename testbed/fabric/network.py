"""Assemble a fabric in Mininet: BMv2 switches and RoCE hosts in their own namespaces.

:class:`Bmv2Switch` is a Mininet ``Switch`` (as in p4lang/tutorials) that runs in its own
network namespace, so its Thrift server is unreachable from anywhere but that namespace.
:class:`RoceHost` is a Mininet ``Host`` configured for a routed fabric without ARP: a /32
address, a default route to its leaf and a permanent neighbour entry for the gateway.
:class:`Network` builds the namespaces, veths and port qdiscs, starts the BMv2 processes in
parallel (waiting on readiness, never on fixed sleeps) and stops it all again. Programming
the switches, the agents, the endpoints and the results folder are other modules' jobs;
:class:`testbed.run.bringup.Fabric` composes them.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
from pathlib import Path

from mininet.link import Link
from mininet.log import lg
from mininet.net import Mininet
from mininet.node import Host, Switch

from testbed.config import bmv2_build
from testbed.config.bmv2_build import Selected
from testbed.config.models import FabricConfig
from testbed.control.p4runtime import AGENT_PORT
from testbed.fabric.bmv2 import (
    Bmv2Options,
    Bmv2Process,
    SwitchStartError,
    deal_cores,
    realtime_allowed,
    scheduling,
)
from testbed.machine.ports import PortSpec, scheduler_commands
from testbed.machine.state import RunState, kill_in_namespaces, node_namespaces
from testbed.results.files import LOG_SUFFIX, LOGS_DIR
from testbed.topology.graph import Topology, intf_name
from testbed.topology.qos import port_specs

#: Socket send buffer for BMv2 (BMv2's simple_switch sends for all ports from one transmit thread on
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

    def prepare_script(self, mtu: int, schedulers: list[PortSpec], batch_file: Path) -> str:
        """The shell commands that set up its ports: MTU and offloads on every port, the
        agent's tick port, and each port's scheduler (written to ``batch_file`` for tc)."""
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
        return " ; ".join(cmds)

    def check_prepared(self, out: str) -> None:
        """Raise if the output of :meth:`prepare_script` says a command failed."""
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

    def setup_script(self) -> str:
        """The shell commands that make its one interface a routed host's (its MAC was set
        when its link was made). In place of Mininet's ``config()``, which takes a shell
        round trip per setting, and which ``Network.build`` does not call."""
        p = self.params
        intf = self.defaultIntf().name
        gateway_ip = p["gateway_ip"]
        return " ; ".join([
            NO_IPV6,
            "ip link set lo up",
            f"ip link set dev {intf} mtu {p['mtu']} up",
            f"ip addr flush dev {intf}",
            f"ip addr add {p['ip']}/32 dev {intf}",
            f"ip route add {gateway_ip} dev {intf} scope link",
            f"ip route add default via {gateway_ip} dev {intf} onlink",
            f"ip neigh replace {gateway_ip} lladdr {p['gateway_mac']} dev {intf} nud permanent",
            # Checksums must be filled in by the kernel, not left for an offload BMv2 lacks.
            f"ethtool -K {intf} rx off tx off sg off tso off gso off gro off >/dev/null 2>&1",
            keep_flows_in_order([intf]),
        ])


class Network:
    """The fabric's Mininet network: its nodes, links and ports, and the BMv2 processes.

    Every process and interface it creates is added to the run's state record as it is made.
    """

    def __init__(self, cfg: FabricConfig, topo: Topology, runtime_dir: Path, results_dir: Path,
                 state: RunState) -> None:
        self.cfg = cfg
        self.topo = topo
        self.runtime_dir = runtime_dir
        self.results_dir = results_dir
        self.state = state
        self.net: Mininet | None = None
        self.bmv2: Selected | None = None  # the BMv2 build the switches run, chosen at build()
        #: What the switches run at ("SCHED_FIFO 5", "nice -5"), chosen at build(), and why
        #: not switch.realtime_priority when the machine refused it.
        self.scheduling: str | None = None
        self.refused: str | None = None
        #: Each switch's one core (switch.one_core_each), dealt at build(); empty: any core.
        self.cores: dict[str, int] = {}

    def runtime_files(self, switch: str) -> list[str]:
        """The files a switch of this network makes in the runtime folder."""
        return [str(self.runtime_dir / f"{switch}.{ext}") for ext in ("grpc", "tc")]

    def interfaces(self) -> list[str]:
        """Every interface the network creates: both ends of each link, each switch's tick pair."""
        topo = self.topo
        return [intf_name(link.a, link.a_port) for link in topo.links] + [
            intf_name(link.b, link.b_port) for link in topo.links
        ] + [i for s in topo.switches for i in tick_intfs(s.name)]

    def grpc_addrs(self) -> dict[str, str]:
        """Each switch's P4Runtime address (a unix socket in the runtime folder)."""
        return {s.name: f"unix://{self.runtime_dir / (s.name + '.grpc')}"
                for s in self.topo.switches}

    def _bmv2_options(self, sw_name: str) -> Bmv2Options:
        sw = self.topo.switch(sw_name)
        assert self.bmv2 is not None
        return Bmv2Options(
            binary=self.bmv2.binary,
            name=sw.name,
            device_id=sw.device_id,
            ports={**{p: intf_name(sw.name, p) for p in sw.ports},
                   AGENT_PORT: tick_intfs(sw.name)[0]},
            grpc_socket=self.runtime_dir / f"{sw.name}.grpc",
            log_path=self.results_dir / LOGS_DIR / f"{sw.name}{LOG_SUFFIX}",
            thrift_port=self.cfg.switch.thrift_port,
            log=self.cfg.switch.log,
            log_max_bytes=self.cfg.switch.log_max_mb * 1024 * 1024,
            nice=self.cfg.switch.nice,
            realtime_priority=0 if self.refused else self.cfg.switch.realtime_priority,
            core=self.cores.get(sw.name),
        )

    def build(self) -> None:
        """Nodes in their namespaces, the veths between them, and every switch port's qdiscs."""
        topo = self.topo
        try:
            self.bmv2 = bmv2_build.select(self.cfg.switch.build, self.cfg.switch.log)
        except bmv2_build.BuildError as exc:
            raise FabricError(str(exc)) from None
        sw = self.cfg.switch
        self.scheduling, self.refused = scheduling(
            sw.realtime_priority, sw.nice,
            bool(sw.realtime_priority) and realtime_allowed(sw.realtime_priority))
        if self.refused and "realtime_priority" in sw.model_fields_set:
            raise FabricError(f"{self.refused}; or set switch.realtime_priority: 0")
        if sw.one_core_each:
            self.cores = deal_cores([s.name for s in topo.switches], os.sched_getaffinity(0))
        # Mininet prints through a handler of its own. p4runtime-shell's logging.debug() calls
        # give the root logger one too (logging's implicit basicConfig), and every line the
        # Mininet CLI printed came out a second time through it, as "Level 25:mininet:...".
        lg.propagate = False
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
        # Every node sets itself up in its own shell, all at once: Mininet's build() set up the
        # hosts one after another, and the switches' ports took as long again (0.25 s each
        # on 2x4x2; the commands wait on the kernel as much as they compute).
        hosts = [net.get(h.name) for h in topo.hosts]
        switches = [net.get(sw.name) for sw in topo.switches]
        for node in hosts:
            node.sendCmd(node.setup_script())
        for node in switches:
            node.sendCmd(node.prepare_script(topo.mtu, port_specs(self.cfg, topo, node.name),
                                             self.runtime_dir / f"{node.name}.tc"))
        for node in hosts:
            node.waitOutput()
        outputs = [node.waitOutput() for node in switches]  # every shell free again, then
        for node, out in zip(switches, outputs, strict=True):  # any failure
            node.check_prepared(out)
        net.built = True

    def start_switches(self) -> None:
        """Every BMv2 process, then a wait on all of them at once until each answers."""
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

    def stop(self) -> None:
        """Every BMv2 told to stop at once (their exits overlap), then every node ended.

        Not Mininet's ``stop()``: it deletes each link's two ends through the nodes' shells,
        two round trips a link, each deletion waiting out the kernel's grace periods (0.44 s of
        a 2x4x2 teardown). Every interface here lives in a node's namespace, switches' and
        hosts' alike, and the kernel removes a namespace's interfaces, all in one batch, once
        its last process has gone."""
        net, self.net = self.net, None
        if net is None:
            return
        namespaces = node_namespaces([n.pid for n in [*net.hosts, *net.switches]])
        for sw in self.topo.switches:
            with contextlib.suppress(Exception):
                net.get(sw.name).bmv2.terminate()
        for node in net.switches:
            with contextlib.suppress(Exception):
                node.stop(deleteIntfs=False)  # waits for its BMv2 to end
        for node in [*net.switches, *net.hosts]:
            with contextlib.suppress(Exception):
                node.terminate()
        # Mininet ends a node with SIGHUP, which a process started under nohup (or by anything
        # else that ignores it) inherits as ignored: such a process (a command of --exec) would
        # keep its namespace alive. Whatever is still in a node's namespace is killed.
        kill_in_namespaces(namespaces)

    def host(self, name: str):
        assert self.net is not None
        return self.net.get(name)

    def stopped_switches(self) -> list[tuple[str, int, Path]]:
        """(name, exit status, log) of each switch whose BMv2 has ended while the fabric is up."""
        if self.net is None:
            return []
        out = []
        for sw in self.topo.switches:
            bmv2 = self.net.get(sw.name).bmv2
            if (status := bmv2.exit_status()) is not None:
                out.append((sw.name, status, bmv2.opts.log_path))
        return out

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
