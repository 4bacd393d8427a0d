"""A collective's figures, as nccl-tests defines them (its doc/PERFORMANCE.md), from the messages
its ranks completed.

* **time per operation** ``t``: from the first step's post to the last step's completion, over
  the operations completed, as nccl-tests times ``iters`` operations back to back and divides;
* **algbw** = S / t, the buffer size over the time;
* **busbw** = algbw x the operation's factor (2(n-1)/n for all-reduce, (n-1)/n for all-gather,
  reduce-scatter and all-to-all: :func:`traffic.collectives.bus_factor`): what each rank's
  link carried, so it compares with the link's rate whatever the number of ranks;
* **efficiency** = busbw / the hosts' link rate: 1 is a link busy with the collective all the
  time. The published figures for NCCL all-reduce ("% of theoretical") are this ratio.
* **step times**: each rank's step, from its first channel's post to its last channel's
  completion (the ACK of its last byte), median and 99th percentile;
* **the straggler**: in each step, the rank whose message completed last set the pace; the rank
  that was last most often, how often, and what its traffic met (resends, timeouts, CNPs, the
  time PFC paused its NIC), which says why.

A message completes when its last packet is acknowledged, so a step's time includes one ACK's
trip back; at the emulated rates that is a few hundred microseconds against steps of tens of
milliseconds. Pure: :func:`collective_figures` takes what :mod:`testbed.analysis.headline`
read.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from testbed.analysis.quantiles import percentile
from testbed.results.endpoints import MessageRow
from traffic.collectives import CollectiveSpec, bus_factor, flow_name, flows_of, steps
from traffic.flows import FlowSpec


def _round(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(v, digits)


def rank_steps(flow: FlowSpec, messages: list[MessageRow], qpns: list[int]
               ) -> dict[int, tuple[float, float]]:
    """A rank's sends on one flow, per message index (0 up): (first channel's post, last
    channel's completion), for the indices every channel completed."""
    by_qp: dict[int, dict[int, MessageRow]] = {q: {} for q in qpns}
    for m in messages:
        if m.qpn in by_qp:
            by_qp[m.qpn][m.msg_id - 1] = m  # msg_id counts from 1 on each QP
    done = set.intersection(*(set(d) for d in by_qp.values())) if by_qp else set()
    return {i: (min(by_qp[q][i].posted_s for q in qpns),
                max(by_qp[q][i].completed_s for q in qpns)) for i in sorted(done)}


def collective_figures(c: CollectiveSpec, link_mbps: float,
                       sends: dict[str, dict[int, tuple[float, float]]],
                       flow_heads: dict[str, dict], paused_s: dict[str, float]) -> dict:
    """``sends``: per flow of the collective (traffic.collectives.flows_of), its
    :func:`rank_steps`; ``flow_heads``: the headline's figures of those flows (resends,
    timeouts, CNPs); ``paused_s``: per host, the longest its NIC stood paused in a class."""
    ranks = list(c.ranks or [])
    n = len(ranks)
    per_op = steps(c.op, n)
    flows = flows_of(c, ranks)
    want = c.iterations * per_op
    done_msgs = min((len(sends.get(f.name, {})) for f in flows), default=0)
    ops = min(done_msgs, want) // per_op
    out: dict = {"op": c.op, "ranks": ranks, "size_bytes": c.size_bytes,
                 "channels": c.channels, "iterations": c.iterations, "ops_completed": ops,
                 "link_mbps": link_mbps, "bus_factor": round(bus_factor(c.op, n), 6)}
    if ops == 0:
        return {**out, "time_per_op_s": None, "algbw_mbps": None, "busbw_mbps": None,
                "efficiency": None, "step_median_s": None, "step_p99_s": None,
                "straggler": None}
    last = ops * per_op
    start = min(sends[f.name][0][0] for f in flows)
    end = max(sends[f.name][last - 1][1] for f in flows)
    t = (end - start) / ops
    algbw = c.size_bytes * 8 / t / 1e6 if t > 0 else None
    busbw = algbw * bus_factor(c.op, n) if algbw is not None else None
    # A rank's step: all its sends of that index (all_to_all: to every peer) as one.
    by_rank: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for f in flows:
        for i, (posted, completed) in sends[f.name].items():
            if i < last:
                p0, c0 = by_rank[f.src].get(i, (posted, completed))
                by_rank[f.src][i] = (min(p0, posted), max(c0, completed))
    durations = [cmp - post for r in by_rank.values() for post, cmp in r.values()]
    last_in: Counter[str] = Counter()
    for i in range(last):
        last_in[max(ranks, key=lambda r: by_rank[r][i][1])] += 1
    slow, times = last_in.most_common(1)[0]
    mine = [flow_heads.get(flow_name(c, slow, f.dst), {}) for f in flows if f.src == slow]
    return {**out,
            "time_per_op_s": _round(t, 6),
            "algbw_mbps": _round(algbw),
            "busbw_mbps": _round(busbw),
            "efficiency": _round(busbw / link_mbps) if busbw is not None else None,
            "step_median_s": _round(percentile(durations, 0.5), 6),
            "step_p99_s": _round(percentile(durations, 0.99), 6),
            "straggler": {"rank": slow, "last_share": round(times / last, 4),
                          "retransmitted": sum(h.get("retransmitted", 0) for h in mine),
                          "timeouts": sum(h.get("timeouts", 0) for h in mine),
                          "cnps_received": sum(h.get("cnps_received", 0) for h in mine),
                          "paused_s": round(paused_s.get(slow, 0.0), 4)}}
