"""Chained posting: a requester that posts its next message only once messages have arrived.

A collective's rank does not send its step k+1 until it has received step k: in a ring
all-reduce, the chunk it forwards is the one its left neighbour just sent it, reduced with its
own (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009; NCCL's ring). A :class:`Chain` holds that rule for one requester:
message ``i`` (counting from 0, across the collective's iterations) is posted once each of its
*gates* (responders on the same host) has delivered ``i`` whole messages. So step 0 goes at
once, and an operation's first step waits for the whole previous operation to have arrived, as
consecutive NCCL operations on one stream do. The reduction itself costs nothing here: a GPU's
arithmetic is not what the fabric emulates.

Pure: the endpoint calls :meth:`Chain.release` when a gate delivers a message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traffic.qp import Requester, Responder


@dataclass(slots=True)
class Chain:
    requester: Requester
    kind: str  # write | send
    size: int  # bytes a message
    total: int  # messages to post in all
    gates: list[Responder] = field(default_factory=list)
    posted: int = 0

    def release(self, now: float) -> int:
        """Post every message whose gates have delivered enough; how many were posted."""
        n = 0
        while self.posted < self.total and all(g.stats.messages >= self.posted
                                               for g in self.gates):
            self.requester.post(self.kind, self.size, now)
            self.posted += 1
            n += 1
        return n

    @property
    def waiting(self) -> bool:
        """Messages are left to post (the requester may be idle between steps)."""
        return self.posted < self.total
