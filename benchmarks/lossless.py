"""The lossless switch's costs, measured in one run:

1. packets per second one BMv2 forwards with the full program, beside the same program built
   without the lossless control (``-DPLAIN_FORWARDING``): the ratio is the price of phantom
   queues, ECN and PFC;
2. the switch agent's pause reaction (PFC frame received by the kernel -> gate command issued),
   median and 99th percentile, from a 4:1 incast;
3. the agents' CPU for a 2x4x2 fabric, at idle and under that incast.

Run as root (needs p4c for step 1): sudo .venv/bin/python -m benchmarks.lossless
Writes lossless.json and lossless.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from testbed.analysis.deadlock import pause_reactions_us
from testbed.config.models import FabricConfig
from testbed.control.entries import P4_DIR, build_switch_program, lossless_entries
from testbed.run.bringup import Fabric
from testbed.topology.graph import NextHop, Port, Route, Switch, build_topology
from tests.dataplane import bmv2_harness
from traffic.flows import FlowRunner, FlowSpec

#: The start of a sender script run inside the harness's namespace (argv: packets, size):
#: a socket on ptf1 to send, one on ptf2 to count what the switch forwarded, and ``f``, a
#: RoCE data frame (DSCP 26, class 3, ECT) routed from port 1 to port 2 by program_dut.
FRAME = r"""
import socket, struct, sys, time
n, size = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("ptf1", 0))
r = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); r.bind(("ptf2", 0))
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 26 << 2 | 2, size - 14, 0, 0x4000, 64, 17, 0,
                 bytes([10, 0, 9, 9]), bytes([10, 0, 2, 1]))
def csum(h):
    s = sum(struct.unpack("!10H", h))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
f = bytes.fromhex("024c00010001") + bytes.fromhex("02000a000909") + b"\x08\x00" + ip
f += struct.pack("!HHHH", 50000, 4791, size - 34, 0) + bytes(size - len(f) - 8)
"""

BLAST = FRAME + r"""
r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20); r.settimeout(1.0)
got = 0
def drain(upto):
    # count what came out on ptf2 until upto frames are in, or the port goes quiet for 1 s
    global got
    while got < upto:
        try:
            p, a = r.recvfrom(65536)
        except socket.timeout:
            return
        if a[2] != 4:
            got += 1
t0 = time.monotonic()
for i in range(n):
    s.send(f)
    # a bounded burst: keep BMv2's input from overflowing (see the design notes)
    if i % 64 == 63:
        drain(i - 32)
drain(float("inf"))  # until quiet for 1 s (taken off the time below)
t = time.monotonic() - t0 - 1.0
print(got, max(t, 1e-3))
"""


def plain_program(tmp: Path) -> tuple[Path, Path]:
    """Our program built without the lossless control (-DPLAIN_FORWARDING): P4Info, JSON."""
    subprocess.run(["p4c-bm2-ss", "-DPLAIN_FORWARDING", "--p4runtime-files",
                    str(tmp / "p.txtpb"), "-o", str(tmp / "p.json"), "roce_switch.p4"],
                   cwd=P4_DIR, check=True, capture_output=True)
    return tmp / "p.txtpb", tmp / "p.json"


def program_dut(h, plain: bool, tmp: Path) -> None:
    """Program the harness's switch to forward 10.0.2.0/24 from port 1 to port 2, with the
    full program or (``plain``) the plain one, whose entries are the routes and classes."""
    if plain:
        h.session.push_pipeline(*plain_program(tmp))
    sw = Switch("dut", "leaf", 1, 1)
    sw.ports = {p: Port(p, f"02:4c:00:01:00:0{p}", "x", 1, 10.0) for p in (1, 2)}
    routes = [Route("10.0.2.0/24", (NextHop(2, "02:4c:00:01:00:02", "02:00:0a:00:02:01"),))]
    prog = build_switch_program(h.builder, sw, routes, FabricConfig())
    if plain:  # the plain program has no lossless tables
        lossless_ids = {e.SerializeToString() for e in lossless_entries(h.builder, sw,
                                                                        FabricConfig())}
        prog.insert = [e for e in prog.insert if e.SerializeToString() not in lossless_ids]
    h.session.apply(prog)


def forwarding_pps(plain: bool, n: int = 6000, size: int = 512, build: str = "auto") -> float:
    with tempfile.TemporaryDirectory() as tmp, bmv2_harness(2, build=build) as h:
        program_dut(h, plain, Path(tmp))
        r = subprocess.run(["ip", "netns", "exec", h.ns, sys.executable, "-c", BLAST, str(n),
                            str(size)], capture_output=True, text=True, timeout=300)
    got, t = r.stdout.split()
    return int(got) / float(t)


@contextmanager
def fabric_2x4x2(build: str = "auto", agent: dict | None = None,
                 rate_mbps: float | None = None) -> Iterator[tuple[Fabric, Path]]:
    """The 2x4x2 fabric these measures load, up and programmed, with its results folder.
    ``agent``: agent settings over the defaults; ``rate_mbps``: every link's rate."""
    rates = {"host_link_mbps": rate_mbps, "fabric_link_mbps": rate_mbps} if rate_mbps else {}
    cfg = FabricConfig.model_validate({"name": "bench-lossless", "switch": {"build": build},
                                       "fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 2,
                                                  **rates},
                                       "qos": {"ecn": {}}, "agent": agent or {}})
    with tempfile.TemporaryDirectory() as tmp, Fabric(cfg, build_topology(cfg),
                                                      Path(tmp)) as fabric:
        yield fabric, Path(tmp)


def start_incast(fabric: Fabric, seconds: float) -> None:
    """The 4:1 incast of these measures, for ``seconds``: h3, h5, h7 and h8 (three leaves away
    and one beside it) to h1, DCQCN off, so that PFC alone holds it."""
    eps = fabric.start_endpoints(["--no-dcqcn"])
    flows = [FlowSpec(name=f"f{i}", src=s, dst="h1", message_bytes=65536, duration_s=seconds)
             for i, s in enumerate(["h3", "h5", "h7", "h8"])]
    FlowRunner(flows, eps, {h.name: h.ip for h in fabric.topo.hosts}).start()


def agent_processes(fabric: Fabric) -> list[psutil.Process]:
    return [psutil.Process(p.pid) for p in fabric.agent_pool.procs]


def fabric_measures(seconds: float = 5.0, build: str = "auto", agent: dict | None = None,
                    rate_mbps: float | None = None) -> dict:
    """The agents' CPU idle and under the incast, and their pause reactions in it."""
    with fabric_2x4x2(build, agent, rate_mbps) as (fabric, tmp):
        agents = agent_processes(fabric)

        def cpu(window: float) -> float:
            c0 = sum(a.cpu_times().user + a.cpu_times().system for a in agents)
            time.sleep(window)
            c1 = sum(a.cpu_times().user + a.cpu_times().system for a in agents)
            return (c1 - c0) / window

        time.sleep(1.0)
        idle = cpu(seconds)
        start_incast(fabric, seconds + 2)
        time.sleep(1.0)
        busy = cpu(seconds)
        time.sleep(2.0)
        reactions = pause_reactions_us(tmp)
    reactions.sort()
    return {"agent_cpu_idle_cores": round(idle, 4), "agent_cpu_incast_cores": round(busy, 4),
            "pause_reaction_us_median": statistics.median(reactions) if reactions else None,
            "pause_reaction_us_p99": reactions[int(0.99 * (len(reactions) - 1))]
            if reactions else None, "pauses": len(reactions)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict = {}
    if shutil.which("p4c-bm2-ss"):
        full, plain = [], []
        for _ in range(args.reps):  # interleaved, so both see the same machine
            full.append(forwarding_pps(False))
            plain.append(forwarding_pps(True))
        res["forwarding"] = {"full_pps_median": round(statistics.median(full)),
                             "plain_pps_median": round(statistics.median(plain)),
                             "ratio": round(statistics.median(full) / statistics.median(plain),
                                            3),
                             "full_runs": [round(x) for x in full],
                             "plain_runs": [round(x) for x in plain]}
    res["fabric_2x4x2"] = fabric_measures()
    (args.out / "lossless.json").write_text(json.dumps(res, indent=2))
    f, a = res.get("forwarding", {}), res["fabric_2x4x2"]
    md = ("| measure | value | goal |\n|---|---|---|\n"
          f"| BMv2 pps, full program / plain forwarding | {f.get('full_pps_median')} / "
          f"{f.get('plain_pps_median')} (ratio {f.get('ratio')}) | ratio >= 0.7 |\n"
          f"| pause reaction (PFC frame in kernel -> gate command) | median "
          f"{a['pause_reaction_us_median']} us, p99 {a['pause_reaction_us_p99']} us over "
          f"{a['pauses']} pauses | |\n"
          f"| agents' CPU, 2x4x2 fabric, idle / 4:1 incast | {a['agent_cpu_idle_cores']:.1%} / "
          f"{a['agent_cpu_incast_cores']:.1%} of a core (all six agents) | < 10% |\n")
    (args.out / "lossless.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
