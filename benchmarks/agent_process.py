"""One agent process for every switch (``agent.one_process``) against one process per switch
(the default), and the one process real-time: the agents' CPU, idle and under a 4:1 incast on
2x4x2, and the pause reaction, interleaved (benchmarks/agent_ab.py).

Run as root: sudo .venv/bin/python benchmarks/agent_process.py [--rates 10] [--pairs 3]
Writes agent_process.json and agent_process.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.agent_ab import interleaved, write  # noqa: E402

VARIANTS = {"a process per switch": {"one_process": False},
            "one process": {"one_process": True},
            "one process, SCHED_FIFO 10": {"one_process": True, "realtime_priority": 10}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--rates", default="10", help="link rates (Mbit/s)")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    runs = interleaved(VARIANTS, [float(r) for r in args.rates.split(",")], args.pairs)
    write(args.out, "agent_process", runs, list(VARIANTS))


if __name__ == "__main__":
    main()
