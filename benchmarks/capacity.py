"""Fabric capacity: the highest emulated link rate at which a load still passes every check
the incast test makes, for each BMv2 build and frame size, with the other costs in the same run.

A trial is one load, PFC only (no ECN, no DCQCN), every link at the same rate, sized so that the
busiest host link carries about ``--incast-s`` seconds of it at that rate: an N:1 incast, or
all-to-all (every host sends to every other, as an AI training job's collective does). It
passes when:

- the flows complete and every byte arrives once, in order, with no NAK and nothing resent
  (``delivered``);
- no lossless-class drop in the kernel queues nor in P4 (``lossless_drops``);
- nothing lost in front of BMv2 (``hidden_loss``);
- an incast: PFC was sent (``pfc_sent``: it really congested the fabric). All-to-all need not
  congest anything (each receiver gets one link's worth), so there it is recorded only;
- the phantom's drift from the kernel backlog, p99 over busy lossless queues, is within 10
  frames (``drift_p99``);
- the agents' PFC reaction, p99, is within ``qos.pfc.reaction_ms`` (``reaction_p99``);
- an incast: the receiver's link was kept busy, its bytes took at most 1/0.8 of their time at
  line rate (``utilization``). An emulation that cannot fill the link is not running at that
  rate, whatever else it gets right. All-to-all's is recorded only: its 56 flows start one
  after another (three calls to the endpoints each, seconds in all on a loaded machine), and
  on a real fabric too its ECMP collisions and PFC's head-of-line blocking keep the host links
  below the line rate (measured here: 0.46 at 2.5 Mbit/s, where the fidelity guard found
  nothing wrong).

- the run's own fidelity guard called it faithful, every figure measured and passed
  (``faithful``): a capacity is a rate at which the emulation is a faithful one.

A rate passes when ``--runs`` trials in a row pass (the first failure ends the point). The
search doubles from ``--start`` while it passes, then bisects between the last pass and the first
failure ``--steps`` times. It decides on the checks named by ``--decide`` (default: every check,
the phantom's drift included); with fewer, the table also gives the highest rate tried at which
every trial passed every check, a lower bound of the capacity on all checks.

Run as root: sudo .venv/bin/python -m benchmarks.capacity [--builds default,fast]
[--realtime-priority 0] (the agents at nice alone; by default they run as agent.realtime_priority
says, real-time).
Writes capacity.json and capacity.md to benchmarks/out. Each trial holds the machine's fabric
lock (testbed.machine.state.fabric_lock), so it waits for any test that has a fabric up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path


def _incast(senders: list[str], to: str = "h1") -> list[tuple[str, str]]:
    return [(s, to) for s in senders]


def _all_to_all(hosts: int) -> list[tuple[str, str]]:
    names = [f"h{i}" for i in range(1, hosts + 1)]
    return [(s, d) for s in names for d in names if s != d]


#: The loads: (spines, leaves, hosts per leaf) and the flows (sender, receiver). The incasts
#: load one receiver's link; all-to-all (an AI training job's collective: every host sends to
#: every other, 56 QPs on 2x4x2) loads every host link both ways and the fabric links at 6/7
#: of that, so every switch forwards at once.
SHAPES = {"4:1 on 2x3x2": ((2, 3, 2), _incast(["h3", "h4", "h5", "h6"])),
          "6:1 on 2x4x2": ((2, 4, 2), _incast(["h3", "h4", "h5", "h6", "h7", "h8"])),
          "all-to-all on 2x4x2": ((2, 4, 2), _all_to_all(8))}
#: Interface MTU -> the RoCE path MTU the hosts use (testbed.fabric.endpoints derives it the same
#: way).
FRAMES = {9000: "4 KB frames", 1500: "1 KB frames"}
UTILIZATION_MIN = 0.8
CHECKS = ("delivered", "lossless_drops", "hidden_loss", "pfc_sent", "drift_p99", "reaction_p99",
          "utilization", "faithful")
DRIFT_FRAMES = 10


@dataclass
class Trial:
    rate_mbps: float
    passed: bool
    failed: list[str]
    figures: dict = field(default_factory=dict)


def search(trial: Callable[[float], bool], start: float, steps: int,
           ceiling: float) -> tuple[float | None, list[float]]:
    """The highest passing rate, and every rate tried in order. Doubles from ``start`` while it
    passes (up to ``ceiling``), then bisects ``steps`` times between the last pass and the first
    failure; a failing ``start`` bisects between 0 and it. Pure: ``trial`` decides."""
    tried: list[float] = []

    def ok(rate: float) -> bool:
        tried.append(rate)
        return trial(rate)

    best: float | None = None
    lo, hi = 0.0, start
    while hi <= ceiling and ok(hi):
        best, lo, hi = hi, hi, hi * 2
    if hi > ceiling:
        return best, tried
    for _ in range(steps):
        mid = round((lo + hi) / 2, 1)
        if ok(mid):
            best, lo = mid, mid
        else:
            hi = mid
    return best, tried


def _agent(realtime: int | None) -> dict:
    """The config's agent section: agent.realtime_priority if given (0: nice alone), else
    the product's default."""
    return {} if realtime is None else {"realtime_priority": realtime}


def _cfg(shape: tuple[int, int, int], rate: float, mtu: int, build: str, name: str,
         realtime: int | None = None):
    """``realtime``: the agents' agent.realtime_priority (None: the product's default)."""
    from testbed.config.models import FabricConfig

    return FabricConfig.model_validate({
        "name": name,
        "fabric": {"spines": shape[0], "leaves": shape[1], "hosts_per_leaf": shape[2],
                   "host_link_mbps": rate, "fabric_link_mbps": rate, "mtu": mtu},
        "switch": {"build": build},
        "qos": {"pfc_enable": [3], "ecn": {}},  # PFC alone, as in the incast test
        "agent": _agent(realtime),
    })


def run_trial(shape_name: str, rate: float, mtu: int, build: str, incast_s: float,
              tmp: Path, realtime: int | None = None) -> Trial:
    """One load; every check the incast test makes, and the costs beside."""
    from testbed.machine.state import fabric_lock

    shape, pairs = SHAPES[shape_name]
    cfg = _cfg(shape, rate, mtu, build, "capacity", realtime)
    with fabric_lock():
        return _load(cfg, pairs, rate, incast_s, tmp)


def _load(cfg, pairs: list[tuple[str, str]], rate: float, incast_s: float, tmp: Path) -> Trial:
    import psutil

    from testbed.fabric.measure import fabric_counters
    from testbed.run.bringup import Fabric
    from testbed.run.calibrate import cpu_seconds
    from testbed.topology.graph import build_topology
    from traffic.flows import FlowRunner, FlowSpec

    topo = build_topology(cfg)
    msg = 16384
    # sized so that the busiest link (a receiver's, or for all-to-all every host's) carries
    # about incast_s seconds of it at the line rate
    fan = max(*Counter(d for _s, d in pairs).values(), *Counter(s for s, _d in pairs).values())
    count = max(4, int(rate * 1e6 / 8 * incast_s / fan / msg))
    with Fabric(cfg, topo, tmp) as fabric:
        eps = fabric.start_endpoints(["--no-dcqcn"])
        procs = {"agents": [psutil.Process(p.pid) for p in fabric.agent_pool.procs],
                 "endpoints": [psutil.Process(p.pid) for p in fabric.endpoint_pool.procs]}
        cpu0 = {k: cpu_seconds(v) for k, v in procs.items()}
        flows = [FlowSpec(name=f"f{i}", src=s, dst=d, message_bytes=msg, count=count)
                 for i, (s, d) in enumerate(pairs)]
        runner = FlowRunner(flows, eps, {h.name: h.ip for h in topo.hosts})
        t0 = time.monotonic()
        runner.start()
        deadline = t0 + 20 * incast_s + 30
        while not runner.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        cpu = {k: cpu_seconds(v) - cpu0[k] for k, v in procs.items()}
        done = runner.done()
        time.sleep(1.0)  # let the last PFC/XON settle
        counters = fabric_counters(fabric)
        recv = {d: eps[d].call(cmd="stats") for d in {d for _s, d in pairs}}
    dst = {f.name: f.dst for f in flows}
    incast = len({d for _s, d in pairs}) == 1
    qps = [recv[dst[name]]["qps"].get(str(a.responder_qpn), {})
           for name, v in runner.assignments.items() for a in v]
    return judge(cfg, tmp, qps, counters, done, msg * count,
                 {"elapsed_s": elapsed, "cpu_s": cpu, "count": count, "rate": rate, "fan": fan,
                  "incast": incast})


def judge(cfg, run_dir: Path, qps: list[dict], counters, done: bool, per_qp: int,
          m: dict) -> Trial:
    """``qps``: each QP's receive statistics, from its receiver's endpoint; ``m["fan"]``: the
    QPs on the busiest host link (the incast's receiver; a sender of all-to-all)."""
    from testbed.analysis.deadlock import pause_reactions_us
    from testbed.fabric.measure import hidden_loss, kernel_drops
    from testbed.results.telemetry import run_telemetry
    from testbed.topology.qos import roce_frame_bytes

    bad_qps = [q for q in qps if q.get("bytes") != per_qp or q.get("corrupt") or
               q.get("out_of_order") or q.get("naks_sent") or q.get("duplicates")]
    p4_drops = sum(v for sc in counters.values() for k, v in sc.drops.items() if k[1] != 5)
    drift = sorted(abs(r.phantom_drift_bytes) for r in run_telemetry(run_dir)
                   if r.tc == 3 and r.phantom_drift_bytes is not None and r.backlog_bytes > 0)
    reactions = sorted(pause_reactions_us(run_dir))
    frame = roce_frame_bytes(cfg.fabric.mtu)
    # the busiest host link's bytes over what the line rate carries in the time taken
    util = per_qp * m["fan"] * 8 / (m["rate"] * 1e6 * m["elapsed_s"])
    delivered_pkts = max(1, sum(q.get("packets", 0) for q in qps))
    tel = json.loads((run_dir / "telemetry" / "summary.json").read_text())
    figs = {
        "kernel_drops": kernel_drops(counters, 3), "p4_drops": p4_drops,
        "hidden_loss": sum(hidden_loss(counters).values()),
        "pfc_frames": sum(sum(sc.pfc_tx.values()) for sc in counters.values()),
        "drift_p99_bytes": _p99(drift), "reaction_p99_us": _p99(reactions),
        "utilization": round(util, 3), "elapsed_s": round(m["elapsed_s"], 2),
        "agents_cpu_cores": round(m["cpu_s"]["agents"] / m["elapsed_s"], 3),
        "endpoint_cpu_us_per_pkt": round(m["cpu_s"]["endpoints"] * 1e6 / delivered_pkts, 1),
        "undelivered": {"flows_done": done, "qps": len(qps), "short_qps": sum(
            q.get("bytes") != per_qp for q in qps), "out_of_order": sum(
            q.get("out_of_order", 0) for q in qps), "naks": sum(
            q.get("naks_sent", 0) for q in qps), "corrupt": sum(
            q.get("corrupt", 0) for q in qps)} if bad_qps or not done else None,
        "fidelity_ok": tel.get("fidelity", {}).get("ok"),
        "fidelity_reasons": tel.get("fidelity", {}).get("reasons"),
        "agents": tel.get("agents", {}).get("scheduling"),  # what they ran at: "SCHED_FIFO 10"
    }
    checks = {
        "delivered": done and not bad_qps and len(qps) > 0,
        "lossless_drops": figs["kernel_drops"] == 0 and p4_drops == 0,
        "hidden_loss": figs["hidden_loss"] == 0,
        "pfc_sent": figs["pfc_frames"] > 0 or not m["incast"],
        "drift_p99": figs["drift_p99_bytes"] is not None
        and figs["drift_p99_bytes"] <= DRIFT_FRAMES * frame,
        "reaction_p99": figs["reaction_p99_us"] is None
        or figs["reaction_p99_us"] <= cfg.qos.pfc.reaction_ms * 1000,
        "utilization": util >= UTILIZATION_MIN or not m["incast"],
        "faithful": figs["fidelity_ok"] is True,
    }
    failed = [k for k, v in checks.items() if not v]
    return Trial(m["rate"], not failed, failed, figs)


def _p99(xs: list) -> float | None:
    return xs[int(0.99 * (len(xs) - 1))] if xs else None


def capacity(shape: str, mtu: int, build: str, args, log: list[dict]) -> dict:
    """The search for one (shape, frames, build); every trial goes to ``log``."""
    decide = set(args.decide.split(","))
    all_ok: dict[float, bool] = {}

    def point(rate: float) -> bool:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="roce-capacity-") as tmp:
                t = run_trial(shape, rate, mtu, build, args.incast_s, Path(tmp),
                              args.realtime_priority)
            log.append({"shape": shape, "mtu": mtu, "build": build, "run": i, **asdict(t)})
            print(f"  {shape}, {FRAMES[mtu]}, {build}: {rate:g} Mbit/s run {i}: "
                  f"{'pass' if t.passed else 'FAIL ' + ','.join(t.failed)} "
                  f"{json.dumps(t.figures)}", flush=True)
            all_ok[rate] = all_ok.get(rate, True) and t.passed
            if decide & set(t.failed):
                all_ok[rate] = False
                return False
        return True

    best, tried = search(point, args.start, args.steps, args.ceiling)
    strict = max((r for r, ok in all_ok.items() if ok), default=None)
    return {"shape": shape, "frames": FRAMES[mtu], "build": build, "capacity_mbps": best,
            "all_checks_mbps": strict, "tried": tried, "decided_on": sorted(decide)}


def _costs(build: str, instructions: bool = True, realtime: int | None = None) -> dict:
    """The other benchmarks' figures for one build, in the same run (benchmarks/lossless.py,
    benchmarks/bmv2_instructions.py): BMv2's forwarding rate with the full program over plain
    forwarding, the same in instructions per packet (exact where packets per second swing by a
    third from run to run on this machine; None without valgrind or with ``instructions``
    False), and the agents' CPU."""
    from benchmarks.lossless import fabric_measures, forwarding_pps
    from testbed.machine.state import fabric_lock

    with fabric_lock():
        full, plain = forwarding_pps(False, build=build), forwarding_pps(True, build=build)
    with fabric_lock():
        agents = fabric_measures(build=build, agent=_agent(realtime))
    counted: dict = {"full_instructions": None, "plain_instructions": None}
    if instructions and shutil.which("valgrind"):
        from benchmarks.bmv2_instructions import measure

        with fabric_lock():
            counted = {f"{p}_instructions": measure(build, p, "off", 100, 400).per_packet
                       for p in ("full", "plain")}
    return {"full_pps": round(full), "plain_pps": round(plain), "ratio": round(full / plain, 3),
            **counted, **agents}


def _instructions(c: dict) -> str:
    """The cost table's instructions cell: full / plain (plain over full), or why none."""
    full, plain = c.get("full_instructions"), c.get("plain_instructions")
    if not (full and plain):
        return "not counted"
    return f"{full:,} / {plain:,} ({plain / full:.3f})"


def _find(results: list[dict], shape: str, frames: str, build: str) -> dict | None:
    return next((x for x in results if x["shape"] == shape and x["frames"] == frames
                 and x["build"] == build), None)


def faithful_rate(trials: list[dict], shape: str, frames: str, build: str) -> float | None:
    """The highest rate tried at which every trial passed every check and the run's own
    fidelity guard called it faithful: what a run decided before ``faithful`` was a check
    shows on every check (its trials record the verdict)."""
    by_rate: dict[float, bool] = {}
    for t in trials:
        if (t["shape"], FRAMES.get(t["mtu"]), t["build"]) != (shape, frames, build):
            continue
        ok = t["passed"] and t["figures"].get("fidelity_ok") is True
        by_rate[t["rate_mbps"]] = by_rate.get(t["rate_mbps"], True) and ok
    return max((r for r, ok in by_rate.items() if ok), default=None)


def _cell(r: dict | None, trials: list[dict] | None = None) -> str:
    if r is None:
        return "not run"
    if set(r["decided_on"]) >= set(CHECKS):
        return _rate(r["capacity_mbps"], r)
    strict = (faithful_rate(trials, r["shape"], r["frames"], r["build"]) if trials
              else r["all_checks_mbps"])
    return f"{_rate(r['capacity_mbps'], r)} ({_rate(strict, r)} on every check)"


def _all_checks(r: dict | None) -> str:
    """What an earlier run proved on every check: its capacity when it decided on all of them,
    else the highest rate it tried at which every trial passed every check."""
    if r is None:
        return "not run"
    mbps = r["capacity_mbps"] if set(r["decided_on"]) >= set(CHECKS) else r["all_checks_mbps"]
    return _rate(mbps, r)


def markdown(results: list[dict], costs: dict, trials: list[dict],
             before: list[dict] | None = None) -> str:
    """The capacity table (with an earlier run's capacity on every check beside each build's,
    when ``before`` gives its results) and the costs measured in this run."""
    head = []
    for b in costs:
        head += ([f"{b} build, before", f"{b} build, now"] if before is not None
                 else [f"{b} build"])
    lines = ["| load | frames | " + " | ".join(head) + " |",
             "|---|---|" + "---|" * len(head)]
    for shape in SHAPES:
        for frames in FRAMES.values():
            cells = []
            for b in costs:
                if before is not None:
                    cells.append(_all_checks(_find(before, shape, frames, b)))
                cells.append(_cell(_find(results, shape, frames, b), trials))
            lines.append(f"| {shape} | {frames} | " + " | ".join(cells) + " |")
    lines += ["", "| build | BMv2 pps full / plain (ratio) | BMv2 instructions per packet full / "
              "plain (ratio) | agents' CPU idle / 4:1 incast on 2x4x2 | endpoint CPU per "
              "delivered packet (median over passing trials) |",
              "|---|---|---|---|---|"]
    for b, c in costs.items():
        per_pkt = [t["figures"]["endpoint_cpu_us_per_pkt"] for t in trials
                   if t["build"] == b and t["passed"]]
        lines.append(f"| {b} | {c['full_pps']} / {c['plain_pps']} ({c['ratio']}) | "
                     f"{_instructions(c)} | {c['agent_cpu_idle_cores']:.1%} / "
                     f"{c['agent_cpu_incast_cores']:.1%} of a core | "
                     f"{f'{statistics.median(per_pkt):.1f}' if per_pkt else '-'} us |")
    return "\n".join(lines + ["", *agents_ran_at(trials), *guard_flags(trials)]) + "\n"


def agents_ran_at(trials: list[dict]) -> list[str]:
    """What the switch agents ran at in the trials (their run's summary says it), so that a
    table says which scheduling its rates were reached with; nothing for a run saved before
    the trials recorded it."""
    seen = Counter(t["figures"]["agents"] for t in trials if t["figures"].get("agents"))
    if not seen:
        return []
    if len(seen) == 1 and sum(seen.values()) == len(trials):
        return [f"The switch agents ran at {next(iter(seen))} in every trial.", ""]
    each = ", ".join(f"{k} in {n} trial{'s' * (n != 1)}" for k, n in seen.most_common())
    return [f"The switch agents ran at {each} (of {len(trials)}).", ""]


def guard_flags(trials: list[dict]) -> list[str]:
    """The passing trials the run's own fidelity guard flagged (README: Is a run faithful?),
    per load, frames and build: a pass is decided on the incast test's checks, and the guard's
    verdict is recorded beside it, not left in the JSON."""
    flagged: dict[tuple[str, int, str], list[float]] = {}
    passing: dict[tuple[str, int, str], int] = {}
    for t in trials:
        if not t["passed"]:
            continue
        key = (t["shape"], t["mtu"], t["build"])
        passing[key] = passing.get(key, 0) + 1
        if t["figures"].get("fidelity_ok") is False:
            flagged.setdefault(key, []).append(t["rate_mbps"])
    if not flagged:
        return ["The runs' own fidelity guard flagged none of the passing trials."]
    lines = ["Passing trials the runs' own fidelity guard flagged (their summary.json says why):"]
    for (shape, mtu, build), rates in flagged.items():
        at = ", ".join(f"{r:g}" for r in sorted(set(rates)))
        lines.append(f"- {shape}, {FRAMES.get(mtu, f'MTU {mtu}')}, {build} build: "
                     f"{len(rates)} of {passing[(shape, mtu, build)]} (at {at} Mbit/s)")
    return lines


def _rate(mbps: float | None, r: dict) -> str:
    return f"< {min(r['tried']):g} Mbit/s" if mbps is None else f"{mbps:g} Mbit/s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--builds", default="default,fast")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--mtus", default="9000,1500")
    ap.add_argument("--runs", type=int, default=3, help="trials per rate")
    ap.add_argument("--start", type=float, default=10.0)
    ap.add_argument("--ceiling", type=float, default=320.0)
    ap.add_argument("--steps", type=int, default=2, help="bisection steps after doubling")
    ap.add_argument("--incast-s", type=float, default=4.0)
    ap.add_argument("--decide", default=",".join(CHECKS),
                    help=f"the checks that decide a rate (of {', '.join(CHECKS)})")
    ap.add_argument("--no-instructions", action="store_true", help="skip counting BMv2's "
                    "instructions per packet (valgrind, about 4 minutes a build)")
    ap.add_argument("--realtime-priority", type=int, help="the agents' "
                    "agent.realtime_priority (SCHED_FIFO; 0: nice alone; default: the config's "
                    "default)")
    ap.add_argument("--tag", default="capacity", help="output file name")
    ap.add_argument("--before", type=Path, help="an earlier run's capacity.json, whose "
                    "capacity on every check the table shows beside this run's")
    ap.add_argument("--redraw", type=Path, help="no runs: write the table of a saved run's "
                    "capacity.json (with --before) to --out")
    args = ap.parse_args()
    before = json.loads(args.before.read_text())["results"] if args.before else None
    args.out.mkdir(parents=True, exist_ok=True)
    if args.redraw:
        saved = json.loads(args.redraw.read_text())
        md = markdown(saved["results"], saved["costs"], saved["trials"], before)
        (args.out / f"{args.tag}.md").write_text(md)
        print(md)
        return
    from testbed.run.lifecycle import interrupt_on_sigterm

    interrupt_on_sigterm()  # a stopped benchmark tears its fabric down, as Ctrl-C does
    builds = args.builds.split(",")
    costs = {b: _costs(b, not args.no_instructions, args.realtime_priority) for b in builds}
    print(json.dumps(costs, indent=2), flush=True)
    results: list[dict] = []
    trials: list[dict] = []
    for shape in args.shapes.split(","):
        for mtu in map(int, args.mtus.split(",")):
            for b in builds:
                results.append(capacity(shape, mtu, b, args, trials))
                out = {"results": results, "costs": costs, "trials": trials,
                       "settings": {k: str(v) for k, v in vars(args).items()}}
                (args.out / f"{args.tag}.json").write_text(json.dumps(out, indent=2))
    md = markdown(results, costs, trials, before)
    (args.out / f"{args.tag}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
