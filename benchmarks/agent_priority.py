"""What real-time scheduling buys the switch agents: the pause reaction (PFC frame received by
the kernel -> gate command issued) and the agents' CPU under a 4:1 incast on 2x4x2, with the
agents SCHED_FIFO (``agent.realtime_priority`` = 10) and with nice alone (the default), in
interleaved pairs so that both see the same machine.

Run as root: sudo .venv/bin/python benchmarks/agent_priority.py [--rates 10,15] [--pairs 3]
Writes agent_priority.json and agent_priority.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lossless import fabric_measures  # noqa: E402
from testbed.state import fabric_lock  # noqa: E402

#: The real-time priority tried against none (any value above the hosts' and BMv2's, which
#: run SCHED_OTHER, acts the same).
RT = 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--rates", default="10,15", help="link rates (Mbit/s)")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    runs = []
    for rate in (float(r) for r in args.rates.split(",")):
        for i in range(args.pairs):
            for prio in ((RT, 0) if i % 2 else (0, RT)):  # alternate which goes first
                with fabric_lock():
                    m = fabric_measures(6.0, agent={"realtime_priority": prio}, rate_mbps=rate)
                runs.append({"rate_mbps": rate, "realtime_priority": prio, **m})
                print(json.dumps(runs[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "agent_priority.json").write_text(json.dumps(runs, indent=1) + "\n")
    lines = ["| link rate | agents | pause reaction median (us) | p99 (us) | agents' CPU, "
             "incast (of a core) |", "|---|---|---|---|---|"]
    for rate in dict.fromkeys(r["rate_mbps"] for r in runs):
        for prio in (RT, 0):
            rs = [r for r in runs if r["rate_mbps"] == rate and r["realtime_priority"] == prio]

            def med(key: str, rs: list = rs) -> float:
                return statistics.median(r[key] for r in rs)

            def span(key: str, rs: list = rs) -> str:
                return f"{min(r[key] for r in rs):.0f}-{max(r[key] for r in rs):.0f}"

            who = f"SCHED_FIFO {prio}" if prio else "nice alone"
            lines.append(f"| {rate:g} Mbit/s | {who} | {med('pause_reaction_us_median'):.0f} "
                         f"({span('pause_reaction_us_median')}) | "
                         f"{med('pause_reaction_us_p99'):.0f} ({span('pause_reaction_us_p99')}) "
                         f"| {med('agent_cpu_incast_cores'):.1%} |")
    (args.out / "agent_priority.md").write_text(
        f"Medians over {args.pairs} interleaved runs each (the range in brackets).\n\n"
        + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
