"""One agent process for every switch (``agent.one_process``) against one process per switch
(the default), and the one process real-time: the agents' CPU, idle and under a 4:1 incast on
2x4x2, and the pause reaction, interleaved (benchmarks/agent_ab.py).

Run as root: sudo .venv/bin/python -m benchmarks.agent_process [--rates 10] [--pairs 3]
Writes agent_process.json and agent_process.md to benchmarks/out.
"""

from __future__ import annotations

from benchmarks.agent_ab import main

VARIANTS = {"a process per switch": {"one_process": False, "realtime_priority": 0},
            "one process": {"one_process": True, "realtime_priority": 0},
            "one process, SCHED_FIFO 10": {"one_process": True, "realtime_priority": 10}}


if __name__ == "__main__":
    main("agent_process", VARIANTS, rates="10")
