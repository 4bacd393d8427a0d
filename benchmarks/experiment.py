"""How long an experiment takes from the user's command to its exit, and whether a sweep of 8
points with 3 repeats fits in half an hour.

Run as root: sudo .venv/bin/python -m benchmarks.experiment [--reps 3] [--sweep]
                                                            [--out benchmarks/out]

* ``sudo testbed run scenarios/incast-pfc.yaml``, ``--reps`` times: the whole command (fabric
  up and programmed, the 6 s of traffic and the 2 s of settling, teardown, summary, headline
  figures, the PNG, Markdown and HTML reports), and its parts, from the time each progress
  line reached the terminal: up to "running for" (bring-up), the scenario's own duration and
  settle time, the rest up to "done" (teardown, figures, reports), and the printing after.
* with ``--sweep``: ``sudo testbed sweep scenarios/incast-pfc.yaml`` over 8 points
  (``qos.ecn.3.kmin_bytes``) with ``--repeat 3``, 24 runs, from command to exit.

Writes experiment.json and experiment.md to the output folder. Each command holds the machine's
fabric lock (testbed.machine.state.fabric_lock) while it runs.
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

import yaml

from testbed.machine.state import fabric_lock

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "incast-pfc.yaml"
CLI = [sys.executable, "-m", "testbed.cli"]
SWEEP_SET = "qos.ecn.3.kmin_bytes=5000,10000,15000,20000,25000,30000,35000,40000"
#: The goals: an incast experiment end to end, and a sweep of 8 points x 3 repeats.
GOAL_RUN_S, GOAL_SWEEP_S = 60.0, 1800.0


def timed(cmd: list[str]) -> tuple[float, dict[str, float], int]:
    """Run ``cmd``; its wall time, when each marker line first appeared, and its exit code."""
    marks: dict[str, float] = {}
    t0 = time.monotonic()
    with fabric_lock():
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        for line in proc.stdout:
            for key in ("running for", "done:", "sweep done"):
                if key in line and key not in marks:
                    marks[key] = time.monotonic() - t0
        code = proc.wait()
    return time.monotonic() - t0, marks, code


def one_run(tmp: Path) -> dict:
    total, marks, code = timed([*CLI, "run", str(SCENARIO), "--results", str(tmp)])
    if code != 0 or "running for" not in marks or "done:" not in marks:
        raise SystemExit(f"testbed run failed (exit {code})")
    timeline = yaml.safe_load(SCENARIO.read_text())
    traffic = float(timeline["duration_s"]) + float(timeline.get("settle_s", 0))
    return {"total_s": total, "up_s": marks["running for"], "traffic_s": traffic,
            "down_and_reports_s": marks["done:"] - marks["running for"] - traffic,
            "print_s": total - marks["done:"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sweep", action="store_true", help="also time an 8x3 sweep (~10 min)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (sudo): it brings fabrics up")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"scenario": str(SCENARIO.relative_to(REPO)), "goal_run_s": GOAL_RUN_S}
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_run(Path(tmp)) for _ in range(args.reps)]
        results["run"] = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
        results["run"]["total_s_all"] = [round(r["total_s"], 2) for r in runs]
        print("run", json.dumps(results["run"]), flush=True)
        if args.sweep:
            total, _marks, code = timed([*CLI, "sweep", str(SCENARIO), "--set", SWEEP_SET,
                                         "--repeat", "3", "--out", str(Path(tmp) / "sweep")])
            if code != 0:
                raise SystemExit(f"testbed sweep failed (exit {code})")
            results["sweep"] = {"set": SWEEP_SET, "repeat": 3, "runs": 24,
                                "total_s": round(total, 1), "per_run_s": round(total / 24, 2),
                                "goal_s": GOAL_SWEEP_S}
            print("sweep", json.dumps(results["sweep"]), flush=True)
    (args.out / "experiment.json").write_text(json.dumps(results, indent=2) + "\n")
    r = results["run"]
    lines = [f"# An experiment end to end: `sudo testbed run {results['scenario']}`", "",
             f"Median of {args.reps} ({', '.join(map(str, r['total_s_all']))} s); the goal is "
             f"under {GOAL_RUN_S:g} s.", "",
             "| whole command (s) | up and programmed (s) | traffic and settle (s) | "
             "teardown, figures, reports (s) | printing, exit (s) |", "|---|---|---|---|---|",
             f"| {r['total_s']} | {r['up_s']} | {r['traffic_s']} | {r['down_and_reports_s']} | "
             f"{r['print_s']} |", ""]
    if "sweep" in results:
        s = results["sweep"]
        lines += [f"Sweep of 8 points x 3 repeats (`--set {s['set']}`): {s['total_s']} s "
                  f"({s['per_run_s']} s per run) against the {GOAL_SWEEP_S:g} s goal.", ""]
    (args.out / "experiment.md").write_text("\n".join(lines))
    print(f"wrote {args.out / 'experiment.md'}")


if __name__ == "__main__":
    main()
