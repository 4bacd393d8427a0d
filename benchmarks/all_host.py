"""Every host busy: how fast a fabric can carry all-host traffic faithfully (issue #32).

A load keeps every host sending at once, as a collective does: a **permutation** (host i writes
to the host n/2 away, on another leaf: one step of a ring all-reduce that crosses the spines) or
**all-to-all** (every host writes to every other, as an all-to-all collective or SONiC's
8-rank all-to-all case does). Each runs as a scenario through `testbed run`'s own path
(:func:`testbed.run.scenario_run.run_scenario`), PFC + ECN + DCQCN on class 3, every link at one
rate, on a ladder of rates. A rate passes when ``--runs`` runs in a row are faithful (the run's
own fidelity verdict: every check measured and passed); the ladder stops at the first rate
that does not. For each run the table gives the aggregate goodput (the headline's, every
flow's bytes over the span of the flows), and the CPU each role used, read from the kernel
(/proc/<pid>/stat through psutil) over the flows' window: the BMv2 processes, the switch
agents, the hosts' endpoints; and BMv2's CPU per packet pass (its CPU over the packets the P4
program took in, every switch's ``rx_port`` counter, the agents' ticks included).

``--variants`` compares ways of running the same fabric in one run of the benchmark, the
variants interleaved at each rate so that the machine's hour affects them alike:

- ``default``: the product as it is;
- ``switches-rt``: every BMv2 thread real-time (switch.realtime_priority 5, below the agents');
- ``switches-nice``: BMv2 in the fair scheduler at switch.nice (switch.realtime_priority 0);
- ``pinned``: each BMv2 process, all its threads, held on one core, the switches dealt round
  robin over the cores (switch.one_core_each: true, the default since it was measured here),
  so that a packet's hand-offs between BMv2's threads (receive, ingress, egress, transmit)
  stay on one core;
- ``free``: the kernel places BMv2's threads (switch.one_core_each: false);

Run as root: sudo .venv/bin/python -m benchmarks.all_host [--shapes 2x4x2,2x4x4]
[--loads permutation,all-to-all] [--rates 2,3,5,7,10] [--runs 3] [--variants pinned,free]
[--tag all_host]. Writes <tag>.json and <tag>.md to benchmarks/out (``--redraw FILE``: the
table of a saved json, no runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: The loads, by name: (shape, host count) -> (src, dst) pairs.
LOADS = ("permutation", "all-to-all")
VARIANTS = ("default", "switches-rt", "switches-nice", "pinned", "free")
#: Each variant's config, over the scenario's.
VARIANT_CONFIG = {"default": {}, "switches-rt": {"switch": {"realtime_priority": 5}},
                  "switches-nice": {"switch": {"realtime_priority": 0}},
                  "pinned": {"switch": {"one_core_each": True}},
                  "free": {"switch": {"one_core_each": False}}}
#: When the flows start, on the scenario's clock (s).
FLOW_START_S = 0.5
#: Process roles, by what their command line holds.
ROLES = {"bmv2": "simple_switch_grpc", "agents": "testbed.agent", "endpoints": "traffic.endpoint"}


def parse_shape(text: str) -> tuple[int, int, int]:
    """'2x4x2' -> (spines, leaves, hosts per leaf)."""
    parts = tuple(int(p) for p in text.lower().split("x"))
    if len(parts) != 3 or min(parts) < 1:
        raise ValueError(f"a shape is spines x leaves x hosts per leaf, like 2x4x2: {text!r}")
    return parts  # type: ignore[return-value]


def pairs(load: str, hosts: int) -> list[tuple[str, str]]:
    """The load's flows among hosts h1..hN: permutation sends h_i to the host N/2 away (with
    hosts numbered leaf by leaf, on another leaf whenever a leaf holds at most N/2 hosts)."""
    if load == "permutation":
        return [(f"h{i}", f"h{(i - 1 + hosts // 2) % hosts + 1}") for i in range(1, hosts + 1)]
    if load == "all-to-all":
        return [(f"h{i}", f"h{j}") for i in range(1, hosts + 1) for j in range(1, hosts + 1)
                if i != j]
    raise ValueError(f"unknown load {load!r}: one of {', '.join(LOADS)}")


def scenario(shape: tuple[int, int, int], load: str, rate: float, seconds: float,
             variant: str = "default") -> dict:
    """The scenario a run of the benchmark runs: PFC + ECN + DCQCN on class 3, one rate on
    every link, every flow writing for ``seconds`` from 0.5 s; the variant's config over it."""
    hosts = shape[1] * shape[2]
    return {
        "name": f"allhost-{load}",
        "fabric": {"spines": shape[0], "leaves": shape[1], "hosts_per_leaf": shape[2],
                   "host_link_mbps": rate, "fabric_link_mbps": rate},
        "switch": {"build": "fast", **VARIANT_CONFIG[variant].get("switch", {})},
        "qos": {"pfc_enable": [3], "ecn": {3: {}}},
        "endpoints": {"dcqcn": True},
        "duration_s": seconds + 1.0, "settle_s": 1.0,
        "flows": [{"name": f"f{k}", "src": s, "dst": d, "duration_s": seconds,
                   "start_s": FLOW_START_S}
                  for k, (s, d) in enumerate(pairs(load, hosts))],
    }


class RoleCpu(threading.Thread):
    """CPU seconds per role of every process of the fabric, found by command line as they
    appear."""

    def __init__(self, period_s: float = 0.1) -> None:
        super().__init__(daemon=True, name="role-cpu")
        self.period_s = period_s
        self.stop_event = threading.Event()
        self.seen: dict[int, tuple[str, object]] = {}  # pid -> (role, psutil.Process)
        self.last: dict[int, float] = {}  # pid -> its CPU seconds at the last look
        self.marks: dict[str, dict[str, float]] = {}

    def _scan(self) -> None:
        import psutil

        for p in psutil.process_iter(["pid", "cmdline"]):
            if p.pid in self.seen:
                continue
            cmd = " ".join(p.info["cmdline"] or [])
            role = next((r for r, key in ROLES.items() if key in cmd), None)
            if role is None:
                continue
            self.seen[p.pid] = (role, p)


    def totals(self) -> dict[str, float]:
        """CPU seconds per role so far (a process gone keeps its last reading)."""
        out = dict.fromkeys(ROLES, 0.0)
        for pid, (role, p) in self.seen.items():
            try:
                t = p.cpu_times()
                self.last[pid] = t.user + t.system
            except Exception:  # gone: its last reading stands
                pass
            out[role] += self.last.get(pid, 0.0)
        return out

    def mark(self, name: str) -> None:
        self._scan()
        self.marks[name] = self.totals()

    def run(self) -> None:
        while not self.stop_event.wait(self.period_s):
            self._scan()
            self.totals()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=2)


@dataclass
class Run:
    shape: str
    load: str
    rate: float
    variant: str
    faithful: bool
    reasons: list[str]
    goodput_mbps: float | None
    window_s: float
    cpu_cores: dict[str, float]
    bmv2_us_per_pass: float | None
    passes_per_s: float | None
    lossless_drops: int | None
    retransmitted: int | None
    budget: str | None
    figures: dict = field(default_factory=dict)


def _passes(run_dir: Path, t0: float, t1: float) -> float | None:
    """Packets the switches' P4 programs took in between t0 and t1 (the run's clock): each
    switch's rx_port counter, summed over its ports, between its samples nearest the two
    instants, scaled to the window; summed over the switches."""
    from testbed.results.telemetry import run_p4_counters

    series: dict[str, dict[float, int]] = {}
    for row in run_p4_counters(run_dir):
        if row.counter.split(".")[-1] == "rx_port":
            per = series.setdefault(row.switch, {})
            per[row.t_s] = per.get(row.t_s, 0) + row.packets
    total = 0.0
    for per in series.values():
        at = sorted(per)
        a, b = (min(at, key=lambda t, x=x: abs(t - x)) for x in (t0, t1))
        if b <= a:
            return None
        total += (per[b] - per[a]) * (t1 - t0) / (b - a)
    return total or None


def run_once(shape_text: str, load: str, rate: float, variant: str, seconds: float,
             root: Path) -> Run:
    from testbed.machine.state import fabric_lock
    from testbed.run.scenario import parse_scenario
    from testbed.run.scenario_run import run_scenario

    sc = parse_scenario(scenario(parse_shape(shape_text), load, rate, seconds, variant),
                        "all_host")
    with fabric_lock():  # waits for a test or another run with a fabric up
        cpu = RoleCpu()  # after the wait: only this run's processes
        cpu.start()
        window = Window(cpu, seconds)
        try:
            result = run_scenario(sc, root, progress=window.progress)
        finally:
            window.cancel()
            cpu.stop()
    summary = result.summary
    head = summary.get("headline", {})
    fid = summary.get("fidelity") or _telemetry_fidelity(result.results_dir)
    used = ({r: cpu.marks["stop"][r] - cpu.marks["start"][r] for r in ROLES}
            if {"start", "stop"} <= cpu.marks.keys() else None)
    start = next((e["t_s"] for e in summary.get("timeline", []) if e["event"] == "start"), None)
    passes = (_passes(result.results_dir, start + FLOW_START_S, start + FLOW_START_S + seconds)
              if start is not None else None)
    return Run(shape_text, load, rate, variant, fid.get("ok") is True,
               list(fid.get("reasons") or []) + [f"unknown: {u}" for u in fid.get("unknown", [])],
               head.get("goodput_mbps"), seconds,
               {r: round(v / seconds, 3) for r, v in used.items()} if used else {},
               round(used["bmv2"] * 1e6 / passes, 1) if used and passes else None,
               round(passes / seconds, 1) if passes else None,
               head.get("lossless_drops"), head.get("retransmitted"),
               (summary.get("budget") or {}).get("status"),
               {"results": str(result.results_dir)})


def _telemetry_fidelity(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "telemetry" / "summary.json").read_text())["fidelity"]
    except (OSError, KeyError, ValueError):
        return {"ok": None, "reasons": ["no fidelity verdict"]}


class Window:
    """A window of the run (from ``lead_s`` after its "running for" line, for ``seconds``; by
    default the flows' sending window): the role CPU is read at its two ends."""

    def __init__(self, cpu: RoleCpu, seconds: float, lead_s: float = FLOW_START_S) -> None:
        self.cpu, self.seconds, self.lead_s = cpu, seconds, lead_s
        self.timers: list[threading.Timer] = []

    def progress(self, line: str) -> None:
        if line.startswith("running for") and not self.timers:
            self.timers = [threading.Timer(self.lead_s, self.cpu.mark, ("start",)),
                           threading.Timer(self.lead_s + self.seconds, self.cpu.mark,
                                           ("stop",))]
            for t in self.timers:
                t.start()

    def cancel(self) -> None:
        for t in self.timers:
            t.cancel()


def ladder(shape: str, load: str, rates: list[float], variants: list[str], runs: int,
           seconds: float, log: list[dict], save, keep_going: bool = False) -> None:
    """Each rate upward, the variants interleaved run by run; a variant leaves the ladder at
    its first unfaithful run (that rate fails for it), unless ``keep_going`` (an A/B of the
    variants' costs at fixed rates: every run is made)."""
    live = list(variants)
    for rate in rates:
        if not live:
            return
        failed: set[str] = set()
        for _k in range(runs):
            for v in live:
                if v in failed:
                    continue
                with tempfile.TemporaryDirectory(prefix="allhost-") as tmp:
                    r = run_once(shape, load, rate, v, seconds, Path(tmp))
                log.append(asdict(r))
                save()
                print(f"{shape} {load} {rate} Mbit/s {v}: "
                      f"{'faithful' if r.faithful else 'FLAGGED'} goodput {r.goodput_mbps} "
                      f"cpu {r.cpu_cores} us/pass {r.bmv2_us_per_pass} {r.reasons}", flush=True)
                if not r.faithful and not keep_going:
                    failed.add(v)
        live = [v for v in live if v not in failed]


def best(runs: list[dict], shape: str, load: str, variant: str, need: int) -> float | None:
    """The highest rate at which ``need`` runs were all faithful."""
    by_rate: dict[float, list[dict]] = {}
    for r in runs:
        if (r["shape"], r["load"], r["variant"]) == (shape, load, variant):
            by_rate.setdefault(r["rate"], []).append(r)
    ok = [rate for rate, rs in by_rate.items() if len(rs) >= need and all(
        x["faithful"] for x in rs)]
    return max(ok) if ok else None


def _median(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return statistics.median(ys) if ys else None


def markdown(data: dict) -> str:
    """One row per (shape, load, variant): the best faithful rate and, at it, the median
    goodput, CPU per role and BMv2's CPU per pass; then every run's verdict."""
    runs, need = data["runs"], data["args"]["runs"]
    lines = [f"All-host traffic, PFC + ECN + DCQCN on class 3, fast BMv2 build; a rate passes "
             f"when {need} of {need} runs are faithful. Made by `{data['command']}` on "
             f"{data['machine']} ({data['started']}).", "",
             "| shape | load | variant | highest faithful rate | aggregate goodput there | "
             "BMv2 / agents / endpoints CPU (cores) | BMv2 CPU per packet pass | "
             "agents / BMv2 CPU |", "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["shape"], r["load"], r["variant"]) for r in runs},
                  key=lambda k: (k[0], LOADS.index(k[1]), VARIANTS.index(k[2])))
    for shape, load, variant in keys:
        rate = best(runs, shape, load, variant, need)
        at = [r for r in runs if (r["shape"], r["load"], r["variant"], r["rate"]) ==
              (shape, load, variant, rate)]
        cpu = {role: _median([r["cpu_cores"].get(role) for r in at]) for role in ROLES}
        ratio = (f"{cpu['agents'] / cpu['bmv2']:.2f}" if cpu["bmv2"] and cpu["agents"] is not
                 None else "-")
        lines.append(
            f"| {shape} | {load} | {variant} | "
            f"{f'{rate:g} Mbit/s' if rate is not None else 'below the lowest tried'} | "
            f"{_fmt(_median([r['goodput_mbps'] for r in at]), ' Mbit/s')} | "
            f"{' / '.join(_fmt(cpu[k], '', 2) for k in ROLES)} | "
            f"{_fmt(_median([r['bmv2_us_per_pass'] for r in at]), ' us')} | {ratio} |")
    lines += ["", "Every run, in order (rate, variant: verdict, goodput, BMv2 us per pass; why "
              "flagged):", ""]
    for r in runs:
        why = "; ".join(r["reasons"])[:300]
        lines.append(f"- {r['shape']} {r['load']} {r['rate']:g} Mbit/s, {r['variant']}: "
                     f"{'faithful' if r['faithful'] else 'flagged'}, "
                     f"{_fmt(r['goodput_mbps'], ' Mbit/s')}, "
                     f"{_fmt(r['bmv2_us_per_pass'], ' us')}" + (f" ({why})" if why else ""))
    return "\n".join(lines) + "\n"


def _fmt(x: float | None, unit: str, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="2x4x2")
    ap.add_argument("--loads", default="permutation")
    ap.add_argument("--rates", default="2,3,5,7,10")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0, help="each flow's sending time")
    ap.add_argument("--variants", default="pinned,free")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--tag", default="all_host")
    ap.add_argument("--keep-going", action="store_true", help="make every run at every rate "
                    "(compare the variants' costs) instead of leaving the ladder at a flag")
    ap.add_argument("--append", action="store_true", help="add these runs to the saved "
                    "<tag>.json's (a ladder continued to higher rates); its table covers both")
    ap.add_argument("--redraw", type=Path, help="no runs: the table of a saved json")
    args = ap.parse_args()
    if args.redraw:
        print(markdown(json.loads(args.redraw.read_text())), end="")
        return
    import platform
    import shlex
    import sys

    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown {v!r}; one of {', '.join(VARIANTS)}")
    data = {"command": "sudo .venv/bin/python -m benchmarks.all_host " + shlex.join(sys.argv[1:]),
            "machine": f"{platform.processor() or platform.machine()}, "
                       f"{len(os.sched_getaffinity(0))} cores",
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "args": {"runs": args.runs, "seconds": args.seconds}, "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    js, md = args.out / f"{args.tag}.json", args.out / f"{args.tag}.md"
    if args.append and js.exists():
        before = json.loads(js.read_text())
        if before["args"] != data["args"]:
            ap.error(f"--append: {js} was made with {before['args']}, not {data['args']}")
        data["runs"] = before["runs"]
        data["command"] = f"{before['command']}, then {data['command']}"
        data["started"] = before["started"]

    def save() -> None:
        js.write_text(json.dumps(data, indent=1) + "\n")
        md.write_text(markdown(data))

    rates = [float(x) for x in args.rates.split(",")]
    for shape in args.shapes.split(","):
        parse_shape(shape)
        for load in args.loads.split(","):
            ladder(shape, load, rates, variants, args.runs, args.seconds, data["runs"], save,
                   args.keep_going)
    save()
    print(md.read_text(), end="")


if __name__ == "__main__":
    main()
