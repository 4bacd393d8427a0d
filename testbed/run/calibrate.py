"""`testbed calibrate`: measure what this machine's cores pay for the emulation, once.

One small fabric (a leaf with two hosts, under one spine) is brought up with the build in use,
left idle for a while, then loaded with one flow from h1 to h2 at line rate. Every process's
CPU time is read from the kernel (psutil, /proc/<pid>/stat) at the ends of each window, the
packets from the endpoints' own counters, the agents' wake-ups from their voluntary context
switches (what agent_floor.py counts); then, per unit:

* BMv2: (the leaf's CPU under load - its idle CPU) / the packet passes it made (each frame
  from h1 to h2 or back passes the leaf once), and each switch's idle CPU;
* an endpoint: (both endpoints' CPU under load - their idle CPU) / the frames they handled
  (each frame is sent by one and received by the other), and an endpoint's idle CPU; then the
  same with the flow spread over WIDE_QPS QPs at the same link rate: what each further QP
  adds to the CPU a frame (its timers, pacing and DCQCN state visited on every pass of the
  endpoint's loop);
* an agent: its CPU under load / its wake-ups, and its wake-ups a second;
* the cores: those this process may run on, less what other work kept busy meanwhile
  (/proc/stat, as testbed.run.cpuload reads it).

The loaded window's rate (CALIBRATION_MBPS) keeps BMv2 well below saturation, as a faithful
run must: the cost a packet has when the cores keep up.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from testbed.budget.cores import BuildCost, Profile
from testbed.config.models import FabricConfig
from testbed.run.cpuload import busy_shares, read_jiffies

#: The loaded window's link rate: about 600 data packets a second of 4 KB frames.
CALIBRATION_MBPS = 20.0
#: How long each window lasts (s): idle, warm-up, loaded. With the bring-up, under a minute.
IDLE_S, WARMUP_S, LOAD_S = 3.0, 1.0, 4.0
#: Loaded rounds (one QP, then WIDE_QPS), each figure the median of the rounds': on two
#: shared cores one window's figure moved by half from one calibration to the next (a packet
#: pass 158-206 us, a frame 67-100 us in three calibrations within a minute).
ROUNDS = 3
#: The second loaded window's QPs, h1 to h2 (an endpoint of all-to-all among 8 hosts holds 14).
WIDE_QPS = 8


@dataclass
class Window:
    """What one window measured: CPU seconds per group of processes, and counts."""

    seconds: float
    bmv2_leaf_s: float
    bmv2_all_s: float
    endpoints_s: float
    agents_s: float
    agent_wakeups: int
    frames: int = 0  # frames between h1 and h2 (data, ACKs, CNPs)


def _us_per_frame(eps_idle: float, w: Window) -> float:
    return max(w.endpoints_s - eps_idle * w.seconds, 0.0) / (2 * w.frames) * 1e6


def costs(idle: Window, load: Window, n_switches: int, n_endpoints: int,
          n_agents: int, wide: Window | None = None) -> dict[str, float]:
    """The per-unit costs from an idle and a loaded window, and ``wide``, the loaded window
    again with WIDE_QPS QPs (pure: unit-tested)."""
    if load.frames <= 0 or (wide is not None and wide.frames <= 0):
        raise ValueError("the loaded window carried no frames: the flow did not run")
    leaf_idle = idle.bmv2_leaf_s / idle.seconds
    eps_idle = idle.endpoints_s / idle.seconds
    return {
        "us_per_pass": max(load.bmv2_leaf_s - leaf_idle * load.seconds, 0.0) / load.frames * 1e6,
        "bmv2_idle_cores": idle.bmv2_all_s / idle.seconds / n_switches,
        "endpoint_us_per_frame": _us_per_frame(eps_idle, load),
        "endpoint_us_per_frame_per_qp": 0.0 if wide is None else max(
            _us_per_frame(eps_idle, wide) - _us_per_frame(eps_idle, load), 0.0) / (WIDE_QPS - 1),
        "endpoint_idle_cores": eps_idle / n_endpoints,
        "agent_us_per_wakeup": load.agents_s / max(load.agent_wakeups, 1) * 1e6,
        "agent_wakeups_per_s": load.agent_wakeups / load.seconds / n_agents,
    }


def median_costs(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds (pure: unit-tested)."""
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def calibration_config(build: str) -> FabricConfig:
    """The calibration fabric: one leaf, two hosts, one spine; the default QoS and agents."""
    return FabricConfig.model_validate({
        "name": "calibrate", "switch": {"build": build},
        "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 2,
                   "host_link_mbps": CALIBRATION_MBPS, "fabric_link_mbps": CALIBRATION_MBPS}})


def cpu_seconds(procs) -> float:
    """CPU seconds of these processes (psutil.Process) and their ended children, user and
    system; a process that ended counts nothing (benchmarks/capacity.py uses it too)."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except Exception:  # noqa: BLE001 - a process that ended: its time went with it
            pass
    return total


def _wakeups(procs) -> int:
    n = 0
    for p in procs:
        with contextlib.suppress(Exception):  # a process that ended, as above
            n += p.num_ctx_switches().voluntary
    return n


def _frames(eps) -> int:
    """Frames between h1 and h2 so far, every QP's: data packets sent (resends too) by h1's
    requesters, ACKs, NAKs and CNPs by h2's responders."""
    sent = eps["h1"].call(cmd="stats")["qps"].values()
    answered = eps["h2"].call(cmd="stats")["qps"].values()
    return (sum(q.get("packets_sent", 0) for q in sent)
            + sum(q.get("acks_sent", 0) + q.get("naks_sent", 0) + q.get("cnps_sent", 0)
                  for q in answered))


def background_cores(seconds: float = 1.0) -> float:
    """The cores kept busy before anything of ours starts: other work on the machine."""
    stat = Path("/proc/stat")
    before = read_jiffies(stat.read_text())
    time.sleep(seconds)
    return sum(busy_shares(before, read_jiffies(stat.read_text()))) / 100.0


def _measure(fabric, groups: dict, leaf, seconds: float, eps=None) -> Window:
    c0 = {k: cpu_seconds(v) for k, v in groups.items()}
    leaf0, w0, f0 = cpu_seconds([leaf]), _wakeups(groups["agents"]), _frames(eps) if eps else 0
    t0 = time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    c1 = {k: cpu_seconds(v) - c0[k] for k, v in groups.items()}
    return Window(dt, cpu_seconds([leaf]) - leaf0, c1["bmv2"], c1["endpoints"], c1["agents"],
                  _wakeups(groups["agents"]) - w0, (_frames(eps) - f0) if eps else 0)


def measure(build: str = "auto", progress=print) -> tuple[str, BuildCost, dict[str, float]]:
    """Bring the calibration fabric up, measure it idle and loaded, tear it down: the build
    that ran, its cost, and the other costs (:func:`costs`, plus ``background_cores``)."""
    import psutil

    from testbed.run.bringup import Fabric
    from testbed.topology.graph import build_topology
    from traffic.flows import FlowRunner, FlowSpec

    background = background_cores()
    cfg = calibration_config(build)
    topo = build_topology(cfg)
    with tempfile.TemporaryDirectory() as tmp, Fabric(cfg, topo, Path(tmp),
                                                      progress=progress) as fabric:
        eps = fabric.start_endpoints()
        nodes = {n.name: n for n in fabric.net.switches}
        leaf = psutil.Process(nodes["leaf1"].bmv2.pid)
        groups = {"bmv2": [psutil.Process(n.bmv2.pid) for n in nodes.values()],
                  "agents": [psutil.Process(p.pid) for p in fabric.agent_pool.procs],
                  "endpoints": [psutil.Process(p.pid) for p in fabric.endpoint_pool.procs]}
        progress(f"measuring idle ({IDLE_S:g} s)")
        idle = _measure(fabric, groups, leaf, IDLE_S)
        # ROUNDS x (one QP, then WIDE_QPS), each flow ended before the next: distinct QP
        # numbers, one runner
        gap = WARMUP_S + LOAD_S + 0.5
        flows = [FlowSpec(name=f"calibrate-{k // 2}-{n}", src="h1", dst="h2",
                          message_bytes=65536, qps=n, start_s=k * gap,
                          duration_s=WARMUP_S + LOAD_S + 0.2)
                 for k, n in enumerate((1, WIDE_QPS) * ROUNDS)]
        runner = FlowRunner(flows, eps, {h.name: h.ip for h in topo.hosts})
        t0 = time.monotonic()
        runner.start(t0)
        windows = []
        for f in flows:
            time.sleep(max(t0 + f.start_s + WARMUP_S - time.monotonic(), 0.0))
            progress(f"measuring {f.name}: h1 -> h2 over {f.qps} QP"
                     f"{'s' if f.qps > 1 else ''} at {CALIBRATION_MBPS:g} Mbit/s "
                     f"({LOAD_S:g} s)")
            windows.append(_measure(fabric, groups, leaf, LOAD_S, eps))
        runner.stop()
        ran = fabric.network.bmv2
        n = (len(nodes), len(groups["endpoints"]), len(groups["agents"]))
        c = median_costs([costs(idle, windows[2 * r], *n, wide=windows[2 * r + 1])
                          for r in range(ROUNDS)])
    assert ran is not None
    c["background_cores"] = background
    return ran.build, BuildCost(us_per_pass=c["us_per_pass"],
                                idle_cores=c["bmv2_idle_cores"], binary=ran.binary), c


def profile_from(build: str, cost: BuildCost, c: dict[str, float],
                 previous: Profile | None) -> Profile:
    """The new profile: this measure's figures, and the other builds' from ``previous``."""
    builds = dict(previous.builds) if previous else {}
    builds[build] = cost
    return Profile(measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                   cpu_model=_cpu_model(), cores=len(os.sched_getaffinity(0)),
                   background_cores=round(c["background_cores"], 3), builds=builds,
                   endpoint_us_per_frame=c["endpoint_us_per_frame"],
                   endpoint_us_per_frame_per_qp=c["endpoint_us_per_frame_per_qp"],
                   endpoint_idle_cores=c["endpoint_idle_cores"],
                   agent_us_per_wakeup=c["agent_us_per_wakeup"],
                   agent_wakeups_per_s=c["agent_wakeups_per_s"])


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()
