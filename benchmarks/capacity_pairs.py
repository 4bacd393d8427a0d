"""Two agent settings at one load and rate, in interleaved pairs of capacity trials: how often
each passes every check the capacity benchmark makes (benchmarks/capacity.py), how often the
run's own fidelity guard flags it, and the figures that decide. Where the capacity benchmark
searches a rate for one setting, this holds the rate and compares the settings on the same
machine at the same hour, the order alternating pair by pair.

Why: the capacity of one setting moved by a step between runs an hour apart on this machine
(docs/PERFORMANCE.md), so a setting is judged against another in the same run.

Run as root: sudo .venv/bin/python -m benchmarks.capacity_pairs [--shape "6:1 on 2x4x2"]
[--rate 40] [--build default] [--pairs 8]. Compares the agents real-time (SCHED_FIFO 10, the
default) and at nice alone. Writes capacity_pairs.json and capacity_pairs.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from benchmarks.capacity import FRAMES, run_trial

#: label -> agent.realtime_priority
VARIANTS = {"SCHED_FIFO 10": 10, "nice alone": 0}


def markdown(trials: list[dict], setting: str) -> str:
    """A row per variant: passes, the guard's flags, and the ranges of the deciding figures."""

    def span(rs: list[dict], key: str, scale: float, fmt: str) -> str:
        xs = [r["figures"][key] * scale for r in rs if r["figures"].get(key) is not None]
        return f"{min(xs):{fmt}}-{max(xs):{fmt}}" if xs else "-"

    lines = ["| agents | passed every check | flagged by the fidelity guard | failed checks | "
             "reaction p99 (ms) | drift p99 (KB) | agents' CPU (of a core) |",
             "|---|---|---|---|---|---|---|"]
    for label in dict.fromkeys(t["agents"] for t in trials):
        rs = [t for t in trials if t["agents"] == label]
        failed = sorted({c for r in rs for c in r["failed"]})
        flagged = sum(1 for r in rs if r["figures"].get("fidelity_ok") is False)
        lines.append(f"| {label} | {sum(r['passed'] for r in rs)} of {len(rs)} | {flagged} of "
                     f"{len(rs)} | {', '.join(failed) or '-'} | "
                     f"{span(rs, 'reaction_p99_us', 1e-3, '.2f')} | "
                     f"{span(rs, 'drift_p99_bytes', 1e-3, '.1f')} | "
                     f"{span(rs, 'agents_cpu_cores', 100, '.0f')}% |")
    return f"{setting}, in interleaved pairs.\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="6:1 on 2x4x2")
    ap.add_argument("--mtu", type=int, default=9000, choices=sorted(FRAMES))
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--build", default="default")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--incast-s", type=float, default=4.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--tag", default="capacity_pairs", help="output file name")
    args = ap.parse_args()
    from testbed.run.lifecycle import interrupt_on_sigterm

    interrupt_on_sigterm()  # a stopped benchmark tears its fabric down, as Ctrl-C does
    args.out.mkdir(parents=True, exist_ok=True)
    trials: list[dict] = []
    for i in range(args.pairs):
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for label in order:
            with tempfile.TemporaryDirectory(prefix="roce-pairs-") as tmp:
                t = run_trial(args.shape, args.rate, args.mtu, args.build, args.incast_s,
                              Path(tmp), VARIANTS[label])
            trials.append({"pair": i, "agents": label, **asdict(t)})
            print(json.dumps(trials[-1]), flush=True)
    setting = (f"{args.shape}, {FRAMES[args.mtu]}, {args.rate:g} Mbit/s, {args.build} build, "
               f"{args.pairs} pairs")
    (args.out / f"{args.tag}.json").write_text(json.dumps(
        {"settings": vars(args) | {"out": str(args.out)}, "trials": trials}, indent=1) + "\n")
    md = markdown(trials, setting)
    (args.out / f"{args.tag}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
