"""Agent settings compared on the same machine: the pause reaction (PFC frame received by the
kernel -> gate command issued) and the agents' CPU, idle and under a 4:1 incast on 2x4x2, each
variant run in turn (the order alternating), so that all see the same machine. Used by
agent_priority.py and agent_process.py."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def interleaved(variants: dict[str, dict], rates: list[float], rounds: int) -> list[dict]:
    """One run per variant per round at each rate; ``variants``: label -> agent settings."""
    from benchmarks.lossless import fabric_measures
    from testbed.machine.state import fabric_lock

    runs = []
    for rate in rates:
        for i in range(rounds):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for label in order:
                with fabric_lock():
                    m = fabric_measures(6.0, agent=variants[label], rate_mbps=rate)
                runs.append({"rate_mbps": rate, "agents": label, **variants[label], **m})
                print(json.dumps(runs[-1]), flush=True)
    return runs


def markdown(runs: list[dict], labels: list[str]) -> str:
    """Medians per rate and variant, the range over the runs in brackets."""
    lines = ["| link rate | agents | pause reaction median (us) | p99 (us) | agents' CPU, idle "
             "| agents' CPU, incast (of a core) |", "|---|---|---|---|---|---|"]
    for rate in dict.fromkeys(r["rate_mbps"] for r in runs):
        for label in labels:
            rs = [r for r in runs if r["rate_mbps"] == rate and r["agents"] == label]
            if not rs:
                continue

            def med(key: str, rs: list = rs) -> float:
                return statistics.median(r[key] for r in rs)

            def span(key: str, rs: list = rs) -> str:
                return f"{min(r[key] for r in rs):.0f}-{max(r[key] for r in rs):.0f}"

            lines.append(f"| {rate:g} Mbit/s | {label} | {med('pause_reaction_us_median'):.0f} "
                         f"({span('pause_reaction_us_median')}) | "
                         f"{med('pause_reaction_us_p99'):.0f} ({span('pause_reaction_us_p99')}) "
                         f"| {med('agent_cpu_idle_cores'):.1%} "
                         f"| {med('agent_cpu_incast_cores'):.1%} |")
    n = max(sum(1 for r in runs if r["agents"] == lb and r["rate_mbps"] == runs[0]["rate_mbps"])
            for lb in labels)
    return (f"Medians over {n} interleaved runs each (the range in brackets).\n\n"
            + "\n".join(lines) + "\n")


def write(out: Path, name: str, runs: list[dict], labels: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(runs, indent=1) + "\n")
    md = markdown(runs, labels)
    (out / f"{name}.md").write_text(md)
    print(md)


def main(name: str, variants: dict[str, dict], rates: str) -> None:
    """A benchmark's command line: ``--rates`` (Mbit/s, comma-separated), ``--pairs`` (runs
    of each variant), ``--out``; writes ``name``.json and ``name``.md."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--rates", default=rates, help="link rates (Mbit/s)")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    runs = interleaved(variants, [float(r) for r in args.rates.split(",")], args.pairs)
    write(args.out, name, runs, list(variants))
