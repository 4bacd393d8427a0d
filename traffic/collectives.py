"""Collectives as traffic: what a scenario's ``collectives:`` asks for, and the flows that carry it.

A collective runs among ranks (hosts) over their RoCE endpoints, as NCCL runs one among GPUs:

* ``all_reduce``, the ring algorithm (reduce-scatter, then all-gather): 2(n-1) steps, in each
  of which every rank sends its ring neighbour a message of S/n and starts step k+1 once it has
  received step k's message (Patarasuk and Yuan, JPDC 2009; NCCL's ring).
* ``reduce_scatter`` and ``all_gather``: one half of that, n-1 steps of S/n.
* ``all_to_all``: every rank sends S/n to every other rank at once; an iteration starts once a
  rank has received all of the previous one.

S is nccl-tests' *size* (its doc/PERFORMANCE.md): the buffer each rank reduces (all_reduce), the
whole buffer of n chunks (all_gather's output, reduce_scatter's input), or each rank's send
buffer (all_to_all). ``channels`` splits each message over that many parallel rings, each on its
own QPs (NCCL's channels). Ranks default to every host of the fabric, taken from the leaves in
turn, so every hop of the ring crosses a spine (h1 on leaf1, then leaf2's first host, ...); a
rank order can be given instead.

:func:`flows_of` writes a collective as ordinary flows (:class:`traffic.flows.FlowSpec`) whose
``after`` carries the dependency between steps (:mod:`traffic.chain`): so every part that
reads flows (the budget's load model, the runner, the headline) sees the collective's traffic.
Its figures (time per operation, algbw, busbw, efficiency) are
:mod:`testbed.analysis.collectives`'. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from traffic.flows import MAX_QPS_PER_FLOW, FlowSpec

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]

#: A collective's name: short, since its flows are named after it and their two hosts
#: (``ar-h1-h3``) within a name's 24 characters (traffic.names).
COLLECTIVE_NAME_PATTERN = r"^[a-z][a-z0-9]{0,11}$"


class CollectiveSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=COLLECTIVE_NAME_PATTERN,
                      description="Up to 12 lowercase letters and digits: its flows are "
                                  "named <name>-<src>-<dst>.")
    op: Op = "all_reduce"
    ranks: list[str] | None = Field(
        None, min_length=2,
        description="Hosts in ring order (default: every host, the leaves taken in turn so "
                    "that each ring hop crosses a spine).")
    size_bytes: int = Field(
        1 << 20, ge=1, le=1 << 30,
        description="nccl-tests' size S: each rank's buffer (all_reduce), the n chunks "
                    "(all_gather, reduce_scatter) or each rank's send buffer (all_to_all).")
    iterations: int = Field(5, ge=1, le=10_000, description="Operations, back to back.")
    channels: int = Field(1, ge=1, le=MAX_QPS_PER_FLOW,
                          description="Parallel rings (NCCL's channels), each on its own QPs.")
    start_s: float = Field(0.0, ge=0, description="Start, in seconds from the run's start.")
    tc: int = Field(3, ge=0, le=7, description="Traffic class (3: lossless RoCE).")

    @model_validator(mode="after")
    def _ranks(self) -> CollectiveSpec:
        if self.ranks is not None and len(set(self.ranks)) != len(self.ranks):
            raise ValueError("ranks: a host appears twice")
        return self


#: nccl-tests' bus bandwidth factor, busbw = algbw x factor (doc/PERFORMANCE.md): the share of
#: S each rank's link must carry, so that busbw compares with the link's rate whatever n is.
def bus_factor(op: Op, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    return (n - 1) / n  # all_gather, reduce_scatter, all_to_all


def steps(op: Op, n: int) -> int:
    """Messages each rank sends to each peer per operation (the ring's steps)."""
    return {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1,
            "all_to_all": 1}[op]


def default_ranks(hosts_by_leaf: dict[str, list[str]]) -> list[str]:
    """Every host, the leaves taken in turn: leaf1's first, leaf2's first, ..., leaf1's
    second, ...; a ring in this order crosses a spine at every hop when each leaf has a host
    at that position."""
    columns = [list(hs) for _leaf, hs in hosts_by_leaf.items()]
    out = []
    for i in range(max((len(c) for c in columns), default=0)):
        out += [c[i] for c in columns if i < len(c)]
    return out


def message_bytes(c: CollectiveSpec, n: int) -> int | None:
    """Each message's size (S / n / channels); None when S does not split evenly."""
    per = c.size_bytes // (n * c.channels)
    return per if per * n * c.channels == c.size_bytes and per > 0 else None


def flow_name(c: CollectiveSpec, src: str, dst: str) -> str:
    return f"{c.name}-{src}-{dst}"


def flows_of(c: CollectiveSpec, ranks: Sequence[str]) -> list[FlowSpec]:
    """The collective as flows: a ring op's hop r -> r+1 waits on hop r-1 -> r (its step k+1 on
    step k's arrival); all_to_all's r -> p on every flow into r (its next iteration on the
    whole previous one). ``ranks``: the resolved order. Each flow has ``channels`` QPs and
    ``iterations x steps`` messages a QP."""
    n = len(ranks)
    size = message_bytes(c, n)
    if size is None:
        raise ValueError(f"size_bytes {c.size_bytes} does not split into {n} ranks x "
                         f"{c.channels} channels")
    common = dict(qps=c.channels, message_bytes=size, count=c.iterations * steps(c.op, n),
                  start_s=c.start_s, tc=c.tc)
    if c.op == "all_to_all":
        into = {r: [flow_name(c, p, r) for p in ranks if p != r] for r in ranks}
        return [FlowSpec(name=flow_name(c, r, p), src=r, dst=p, after=into[r], **common)
                for r in ranks for p in ranks if p != r]
    return [FlowSpec(name=flow_name(c, ranks[i], ranks[(i + 1) % n]), src=ranks[i],
                     dst=ranks[(i + 1) % n],
                     after=[flow_name(c, ranks[i - 1], ranks[i])], **common)
            for i in range(n)]
