"""What each fabric mode costs the machine: the CPU of the switches, their agents and the
endpoints while a scenario runs, per mode, at rest and under its traffic.

Mode ib-credit's agents wake every credit period (``qos.credit.period_ms``, 10 ms) and read
the kernel's gates and input FIFOs, whether traffic flows or not; under PFC an agent at rest
wakes only for its samples and slow checks. This benchmark runs one scenario in each mode
asked for, twice: as written, and "at rest", its flows and collectives taken out, and reads
each role's CPU (user + system, from the kernel) over the run's "running for" window, in cores
(CPU seconds per second). Every run's fidelity verdict is recorded beside its figures.

Run as root: sudo .venv/bin/python -m benchmarks.mode_cpu [SCENARIO] [--modes a,b] [--runs N]
Writes mode_cpu.json and mode_cpu.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.all_host import ROLES, RoleCpu, Window

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"


def at_rest(data: dict) -> dict:
    """The scenario with nothing to send: the same fabric, modes and timers."""
    return {k: v for k, v in data.items() if k not in ("flows", "collectives", "background")}


def run_once(data: dict, label: str, root: Path) -> dict:
    """One run of ``data``: each role's CPU in cores over its running window, its verdict."""
    from testbed.analysis.fidelity import verdict_problem
    from testbed.machine.state import fabric_lock
    from testbed.run.scenario import parse_scenario
    from testbed.run.scenario_run import run_scenario

    sc = parse_scenario(data, label)
    seconds = float(data["duration_s"])
    with fabric_lock():
        cpu = RoleCpu()
        cpu.start()
        window = Window(cpu, seconds, lead_s=0.0)  # the whole "running for" window
        try:
            res = run_scenario(sc, root / label, progress=window.progress)
        finally:
            window.cancel()
            cpu.stop()
    marks = cpu.marks
    used = ({r: round((marks["stop"][r] - marks["start"][r]) / seconds, 3) for r in ROLES}
            if {"start", "stop"} <= marks.keys() else {})
    return {"label": label, "cores": used,
            "faithful": verdict_problem(res.summary.get("fidelity")) is None,
            "why_not": verdict_problem(res.summary.get("fidelity"))}


def markdown(data: dict) -> str:
    lines = ["# CPU per role, per fabric mode", "",
             f"`{data['command']}`", "",
             f"{data['scenario']}, {data['runs']} run(s) a row (median); cores = CPU seconds "
             "per second of the run's window, from the kernel's counters of each process.", "",
             "| mode | traffic | BMv2 | agents | endpoints | faithful |",
             "|---|---|---|---|---|---|"]
    for row in data["rows"]:
        def med(role: str, rs: list[dict] = row["runs"]) -> str:
            xs = [r["cores"].get(role) for r in rs if r["cores"].get(role) is not None]
            return f"{statistics.median(xs):.3f}" if xs else "-"
        ok = sum(r["faithful"] for r in row["runs"])
        lines.append(f"| {row['mode']} | {row['traffic']} | {med('bmv2')} | {med('agents')} | "
                     f"{med('endpoints')} | {ok} of {len(row['runs'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default="scenarios/allreduce.yaml")
    ap.add_argument("--modes", default="roce-lossless,ib-credit")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    base = yaml.safe_load((REPO / args.scenario).read_text())
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for mode in args.modes.split(","):
            for traffic in ("as written", "at rest"):
                data = {**base, "mode": mode}
                if traffic == "at rest":
                    data = at_rest(data)
                runs = [run_once(data, f"{mode}-{traffic.replace(' ', '-')}-{i}",
                                 Path(scratch)) for i in range(args.runs)]
                rows.append({"mode": mode, "traffic": traffic, "runs": runs})
                print(mode, traffic, [r["cores"] for r in runs], flush=True)
    out = {"command": "sudo .venv/bin/python -m benchmarks.mode_cpu " + " ".join(sys.argv[1:]),
           "scenario": args.scenario, "runs": args.runs, "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mode_cpu.json").write_text(json.dumps(out, indent=1) + "\n")
    (OUT / "mode_cpu.md").write_text(markdown(out))
    print(markdown(out))


if __name__ == "__main__":
    main()
