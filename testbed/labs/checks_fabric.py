"""Lab 1's checks: the student's answers (``answers.yaml``) about the fabric they brought up,
graded against what the project's own pure code says of that fabric (testbed.topology.graph, the
ECMP hash configuration, testbed.config.constants): nothing here is a hard-coded answer."""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Address, ip_network
from pathlib import Path
from typing import Any

import yaml

from testbed.config.models import ConfigError, FabricConfig
from testbed.labs.verdict import Context, Verdict, check, failed, passed
from testbed.topology.graph import Topology, build_topology, compute_routes
from testbed.topology.validate import load_config
from traffic.wire import ROCEV2_UDP_PORT

#: Hash fields that are the same for every QP between two hosts: addresses, protocol (UDP) and
#: the destination port (RoCEv2's 4791). What is left in the hash is a QP's own entropy.
SAME_FOR_ALL_QPS = {"src_ip", "dst_ip", "ip_proto", "dst_port"}


def host_ip(topo: Topology, cfg: FabricConfig, host: str) -> str:
    return topo.host(host).ip


def gateway_ip(topo: Topology, cfg: FabricConfig, host: str) -> str:
    return topo.host(host).gateway_ip


def ecmp_paths(topo: Topology, cfg: FabricConfig, switch: str, host: str) -> int:
    """Next hops of ``switch``'s route toward ``host``: the equal-cost paths ECMP picks from."""
    dst = IPv4Address(topo.host(host).ip)
    routes = [r for r in compute_routes(topo, topo.switch(switch))
              if dst in ip_network(r.prefix)]
    best = max(routes, key=lambda r: ip_network(r.prefix).prefixlen)
    return len(best.nexthops)


def ports_toward(topo: Topology, cfg: FabricConfig, switch: str, peer: str) -> list[int]:
    return sorted(p.number for p in topo.switch(switch).ports.values() if p.peer == peer)


def entropy_field(topo: Topology, cfg: FabricConfig) -> str:
    rest = [f for f in cfg.ecmp.hash_fields if f not in SAME_FOR_ALL_QPS]
    return rest[0] if len(rest) == 1 else ", ".join(rest)


def roce_udp_port(topo: Topology, cfg: FabricConfig) -> int:
    return ROCEV2_UDP_PORT


#: fact name -> (function, how to find it in the Mininet CLI: the hint of a wrong answer)
FACTS: dict[str, tuple[Callable[..., Any], str]] = {
    "host_ip": (host_ip, "ask the host: `{host} ip -4 addr show dev {host}-eth0`"),
    "gateway_ip": (gateway_ip, "ask the host for its default route: `{host} ip route`"),
    "ecmp_paths": (ecmp_paths, "count the next hops: `testbed topology FILE` lists {switch}'s "
                   "routes; every parallel link to every spine is a path of its own"),
    "ports_toward": (ports_toward, "`testbed topology FILE` lists {switch}'s ports and their "
                     "peers (ports count from 1: hosts first, then uplinks)"),
    "entropy_field": (entropy_field, "of the fields in ecmp.hash_fields, which one is not the "
                      "same for every QP between two hosts? (RoCEv2 always goes to UDP port "
                      "4791)"),
    "roce_udp_port": (roce_udp_port, "RoCEv2 is IANA's UDP port for RoCE (capture one: "
                      "`h1 tcpdump -c1 -ni h1-eth0 udp`)"),
}


def lab_fabric(ctx: Context, file: str) -> tuple[Topology, FabricConfig]:
    """The fabric the student brought up: their copy of the lab's file, else the lab's."""
    for folder in (ctx.folder, ctx.lab_dir):
        if folder is not None and (folder / file).exists():
            cfg = load_config(folder / file)
            return build_topology(cfg), cfg
    raise ConfigError([f"{file} is in neither the lab folder nor the lab"], file)


def _same(given: Any, truth: Any) -> bool:
    if isinstance(truth, list):
        return isinstance(given, list) and sorted(map(str, given)) == sorted(map(str, truth))
    return str(given).strip().lower() == str(truth).strip().lower()


def read_answers(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read {path.name}: {exc}") from None
    return data if isinstance(data, dict) else {}


@check("answer")
def answer(ctx: Context, run: None, key: str, fact: str, fabric: str = "fabric.yaml",
           **args: Any) -> Verdict:
    """The student's answer ``key`` in answers.yaml equals the fact computed on the fabric."""
    try:
        answers = read_answers(ctx.folder / "answers.yaml")
    except ValueError as exc:
        return failed(str(exc), "answers.yaml must stay valid YAML: `key: value` lines")
    fn, how = FACTS[fact]
    topo, cfg = lab_fabric(ctx, fabric)
    truth = fn(topo, cfg, **args)
    given = answers.get(key)
    if given is None:
        return failed(f"{key} is not answered", how.format(**args))
    if not _same(given, truth):
        return failed(f"{key}: {given!r} is not right", how.format(**args))
    return passed(f"{key}: {given!r}")
