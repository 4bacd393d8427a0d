"""Bring-up time and memory per switch for several fabric shapes, and what a user waits for.

Run as root: sudo .venv/bin/python -m benchmarks.bringup [--reps 3] [--out benchmarks/out]
[--tag bringup]
Measures, per shape, the wall time from start to every switch programmed (median of the reps,
with each step), the ping of every pair, the teardown, and the resident memory of each BMv2
process once programmed; and the whole round trip of the command a user types,
`testbed up --spines 2 --leaves 4 --hosts-per-leaf 2 --pingall` (up, programmed, every pair
pinged, torn down), from command to exit. Writes TAG.json and TAG.md to the output folder.
Each fabric holds the machine's fabric lock (testbed.machine.state.fabric_lock).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from testbed.config.models import FabricConfig
from testbed.machine.state import fabric_lock
from testbed.run.bringup import Fabric
from testbed.topology.graph import build_topology

ROUND_TRIP = ["up", "--spines", "2", "--leaves", "4", "--hosts-per-leaf", "2", "--pingall"]

SHAPES = [(2, 2, 2), (2, 4, 2), (4, 8, 2)]


def one(shape: tuple[int, int, int]) -> dict:
    s, lf, h = shape
    cfg = FabricConfig.model_validate(
        {"name": f"bench-{s}x{lf}x{h}", "fabric": {"spines": s, "leaves": lf, "hosts_per_leaf": h}})
    topo = build_topology(cfg)
    with fabric_lock(), tempfile.TemporaryDirectory() as tmp:
        fabric = Fabric(cfg, topo, Path(tmp))
        t0 = time.monotonic()
        fabric.start()
        total = time.monotonic() - t0
        try:
            rss = [psutil.Process(fabric.net.get(sw.name).bmv2.pid).memory_info().rss
                   for sw in topo.switches]
            t1 = time.monotonic()
            ok, sent = fabric.pingall()
            ping = time.monotonic() - t1
        finally:
            t1 = time.monotonic()
            fabric.stop()
            teardown = time.monotonic() - t1
    return {"total_s": total, "steps": fabric.timings.steps, "rss_mib": [r / 2**20 for r in rss],
            "ping_s": ping, "teardown_s": teardown, "ping": f"{ok}/{sent}"}


def round_trip() -> float:
    """`testbed up ... --pingall` from command to exit, as a user runs it."""
    with fabric_lock(), tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "testbed.cli", *ROUND_TRIP], cwd=tmp,
                       env={**os.environ,
                            "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
                       check=True, capture_output=True)
        return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--tag", default="bringup", help="output file name")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for shape in SHAPES:
        runs = [one(shape) for _ in range(args.reps)]
        name = "x".join(map(str, shape))
        n_sw = shape[0] + shape[1]
        med = statistics.median(r["total_s"] for r in runs)
        results[name] = {
            "switches": n_sw,
            "bringup_s_median": round(med, 3),
            "bringup_s_all": [round(r["total_s"], 3) for r in runs],
            "per_switch_s": round(med / n_sw, 3),
            "steps_median": {k: round(statistics.median(r["steps"][k] for r in runs), 3)
                             for k in runs[0]["steps"]},
            "rss_mib_per_switch_median": round(statistics.median(
                x for r in runs for x in r["rss_mib"]), 1),
            "ping_all_pairs_s_median": round(statistics.median(r["ping_s"] for r in runs), 3),
            "teardown_s_median": round(statistics.median(r["teardown_s"] for r in runs), 3),
            "pingall": [r["ping"] for r in runs],
        }
        print(name, json.dumps(results[name]))
    trips = [round_trip() for _ in range(args.reps)]
    results["round_trip"] = {"command": "testbed " + " ".join(ROUND_TRIP),
                             "s_median": round(statistics.median(trips), 3),
                             "s_all": [round(t, 3) for t in trips]}
    print("round trip", json.dumps(results["round_trip"]))
    (args.out / f"{args.tag}.json").write_text(json.dumps(results, indent=2))
    lines = ["| fabric | switches | bring-up median (s) | per switch (s) | steps (s) | "
             "RSS per switch (MiB) | teardown (s) |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name == "round_trip":
            continue
        steps = ", ".join(f"{k} {v}" for k, v in r["steps_median"].items())
        lines.append(f"| {name} | {r['switches']} | {r['bringup_s_median']} | "
                     f"{r['per_switch_s']} | {steps} | {r['rss_mib_per_switch_median']} | "
                     f"{r['teardown_s_median']} |")
    rt = results["round_trip"]
    lines += ["", f"`{rt['command']}` from command to exit (up, programmed, every pair pinged, "
              f"torn down): median {rt['s_median']} s over {args.reps} ({rt['s_all']})."]
    (args.out / f"{args.tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
