"""Bring-up time and memory per switch for several fabric shapes.

Run as root: sudo .venv/bin/python benchmarks/bringup.py [--reps 3] [--out benchmarks/out]
Measures, per shape, the wall time from start to every switch programmed (median of the reps,
with each step), and the resident memory of each BMv2 process once programmed. Writes
bringup.json and bringup.md to the output folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from testbed.config import FabricConfig
from testbed.fabric import Fabric
from testbed.topology import build_topology

SHAPES = [(2, 2, 2), (2, 4, 2), (4, 8, 2)]


def one(shape: tuple[int, int, int]) -> dict:
    s, lf, h = shape
    cfg = FabricConfig.model_validate(
        {"name": f"bench-{s}x{lf}x{h}", "fabric": {"spines": s, "leaves": lf, "hosts_per_leaf": h}})
    topo = build_topology(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        fabric = Fabric(cfg, topo, Path(tmp))
        t0 = time.monotonic()
        fabric.start()
        total = time.monotonic() - t0
        try:
            rss = [psutil.Process(fabric.net.get(sw.name).bmv2.pid).memory_info().rss
                   for sw in topo.switches]
            ok, sent = fabric.pingall()
        finally:
            t1 = time.monotonic()
            fabric.stop()
            teardown = time.monotonic() - t1
    return {"total_s": total, "steps": fabric.timings.steps, "rss_mib": [r / 2**20 for r in rss],
            "teardown_s": teardown, "ping": f"{ok}/{sent}"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
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
            "teardown_s_median": round(statistics.median(r["teardown_s"] for r in runs), 3),
            "pingall": [r["ping"] for r in runs],
        }
        print(name, json.dumps(results[name]))
    (args.out / "bringup.json").write_text(json.dumps(results, indent=2))
    lines = ["| fabric | switches | bring-up median (s) | per switch (s) | steps (s) | "
             "RSS per switch (MiB) | teardown (s) |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        steps = ", ".join(f"{k} {v}" for k, v in r["steps_median"].items())
        lines.append(f"| {name} | {r['switches']} | {r['bringup_s_median']} | "
                     f"{r['per_switch_s']} | {steps} | {r['rss_mib_per_switch_median']} | "
                     f"{r['teardown_s_median']} |")
    (args.out / "bringup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
