"""Cyclic buffer dependencies, from a scenario's routes alone (pure: the topology, the static
routes and the failed links). A switch's egress queue toward a neighbour waits on the
neighbour's egress queue that the same packets go on to (the neighbour pauses it when that
queue fills); a cycle in this wait-for graph is what a PFC deadlock needs (Hu et al.,
HotNets 2016)."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_network

from testbed.run.scenario import Scenario
from testbed.topology.graph import Topology, compute_routes, link_ends

Queue = tuple[str, str]  # (switch, the neighbour its egress queue sends to)
MAX_HOPS = 16


def _next_ports(topo: Topology, switch: str, dst: str, down) -> list[int]:
    """The ports ``switch`` forwards ``dst`` to: longest prefix match over its routes."""
    ip = IPv4Address(dst)
    routes = [r for r in compute_routes(topo, topo.switch(switch), down)
              if ip in ip_network(r.prefix)]
    if not routes:
        return []
    best = max(routes, key=lambda r: ip_network(r.prefix).prefixlen)
    return [n.port for n in best.nexthops]


def flow_paths(sc: Scenario, src: str, dst: str) -> list[list[str]]:
    """Every switch path (ECMP branches apart) from src's leaf toward dst."""
    topo = sc.topo
    down = frozenset(end for f in sc.extras.faults if f.link_down is not None
                     for end in link_ends(topo, f.link_down[0], f.link_down[1],
                                          f.link_down[2] if len(f.link_down) > 2 else None))
    dst_ip = topo.host(dst).ip
    hosts = {h.name for h in topo.hosts}
    done: list[list[str]] = []
    todo = [[topo.host(src).leaf]]
    while todo:
        path = todo.pop()
        sw = path[-1]
        peers = sorted({topo.switch(sw).ports[p].peer for p in _next_ports(topo, sw, dst_ip, down)})
        if not peers or len(path) > MAX_HOPS:
            done.append(path)
        for peer in peers:
            if peer == dst:
                done.append(path)
            elif peer not in hosts:
                todo.append(path + [peer])
    return done


def wait_for(sc: Scenario) -> dict[Queue, set[Queue]]:
    """Each egress queue -> the queues it waits on, over every flow's paths."""
    graph: dict[Queue, set[Queue]] = {}
    for f in sc.extras.flows:
        for path in flow_paths(sc, f.src, f.dst):
            hops = list(zip(path, path[1:], strict=False))
            for a, b in zip(hops, hops[1:], strict=False):
                graph.setdefault(a, set()).add(b)
    return graph


def find_cycle(graph: dict[Queue, set[Queue]]) -> list[Queue]:
    """One cycle of the graph (its queues in order), or [] when there is none."""
    state: dict[Queue, int] = {}  # 1: on the current path, 2: done
    stack: list[Queue] = []

    def visit(q: Queue) -> list[Queue]:
        state[q] = 1
        stack.append(q)
        for nxt in sorted(graph.get(q, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[q] = 2
        return []

    for q in sorted(graph):
        if q not in state and (found := visit(q)):
            return found
    return []
