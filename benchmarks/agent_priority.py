"""What real-time scheduling buys the switch agents: the pause reaction and the agents' CPU
under a 4:1 incast on 2x4x2, with the agents SCHED_FIFO (``agent.realtime_priority`` = 10)
and with nice alone (the default), interleaved (benchmarks/agent_ab.py).

Run as root: sudo .venv/bin/python -m benchmarks.agent_priority [--rates 10,15] [--pairs 3]
Writes agent_priority.json and agent_priority.md to benchmarks/out.
"""

from __future__ import annotations

from benchmarks.agent_ab import main

#: The real-time priority tried against none (any value above the hosts' and BMv2's, which
#: run SCHED_OTHER, acts the same).
RT = 10
VARIANTS = {f"SCHED_FIFO {RT}": {"realtime_priority": RT}, "nice alone": {"realtime_priority": 0}}


if __name__ == "__main__":
    main("agent_priority", VARIANTS, rates="10,15")
