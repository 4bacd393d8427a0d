"""Flows: what a scenario asks the endpoints to send, and the runner that hands it to them.

A flow is a set of RC queue pairs from one host to another, each sending ``count`` messages of
``message_bytes`` (or as many as fit in ``duration_s``), starting at ``start_s`` on the run's
clock, in a traffic class, optionally under a rate cap. QP numbers are assigned here so that a
result can be traced to its flow: requester ``0x1000 + 64 * flow + i``, responder ``0x8000 +
64 * flow + i``.

A flow may wait on others (``after``): its QP i posts message m once QP i of each of those
flows, all into its source host, has delivered m messages (:mod:`traffic.chain`). That is how a
collective's steps depend on each other (:mod:`traffic.collectives` writes such flows). The
flows that start at one instant are all connected before any posts, so a gate exists before
anything waits on it, as a collective's rings are connected when its communicator is made.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from traffic.names import NAME_PATTERN

MAX_QPS_PER_FLOW = 64


class FlowSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    src: str = Field(pattern=NAME_PATTERN, description="Sending host, e.g. h1.")
    dst: str = Field(pattern=NAME_PATTERN, description="Receiving host.")
    qps: int = Field(1, ge=1, le=MAX_QPS_PER_FLOW, description="Queue pairs in this flow.")
    message_bytes: int = Field(65536, ge=1, le=1 << 30, description="Size of each message.")
    count: int | None = Field(None, ge=1, description="Messages per QP.")
    duration_s: float | None = Field(None, gt=0, description="Send for this long instead.")
    start_s: float = Field(0.0, ge=0, description="Start, in seconds from the run's start.")
    tc: int = Field(3, ge=0, le=7, description="Traffic class (3: lossless RoCE).")
    ack_tc: int | None = Field(
        None, ge=0, le=7,
        description="Class of the responder's ACKs and NAKs (default: the data's, as an RC QP "
                    "sends them in its own traffic class). SONiC's RoCEv2 test plan moves them "
                    "to a class of their own (its case 11): then a pause of the data's class "
                    "toward the requester no longer holds them back.")
    rate_cap_mbps: float | None = Field(None, gt=0, description="Per-QP rate cap.")
    kind: Literal["write", "send"] = "write"
    udp_sport: int | None = Field(
        None, ge=49152, le=65535,
        description="Fix every QP's UDP source port (default: rxe's hash of the QP numbers); "
                    "one port for all QPs reproduces ECMP polarization.")
    after: list[str] = Field(
        default_factory=list,
        description="Flows into this flow's src, starting with it and with as many QPs: QP i "
                    "posts message m once QP i of each has delivered m messages (a "
                    "collective's step waits on the previous step's arrival). Needs count.")

    @model_validator(mode="after")
    def _count_or_duration(self) -> FlowSpec:
        if (self.count is None) == (self.duration_s is None):
            raise ValueError("give exactly one of count (messages per QP) or duration_s")
        if self.src == self.dst:
            raise ValueError("src and dst are the same host")
        if self.after and self.count is None:
            raise ValueError("after needs count: a chain posts a known number of messages")
        return self


@dataclass(frozen=True)
class QpAssignment:
    flow: str
    index: int
    requester_qpn: int
    responder_qpn: int


def assign_qps(flows: list[FlowSpec]) -> dict[str, list[QpAssignment]]:
    out = {}
    for n, f in enumerate(flows):
        out[f.name] = [QpAssignment(f.name, i, 0x1000 + 64 * n + i, 0x8000 + 64 * n + i)
                       for i in range(f.qps)]
    return out


class FlowRunner:
    """Starts each flow at its time, in a background thread, through the endpoints' clients.

    ``clients`` maps a host name to an object with ``call(**request)`` (an EndpointClient);
    ``ips`` maps a host name to its IPv4 address.
    """

    def __init__(self, flows: list[FlowSpec], clients: dict, ips: dict[str, str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        unknown = sorted({h for f in flows for h in (f.src, f.dst)} - set(clients))
        if unknown:
            raise ValueError(f"flows name hosts without an endpoint: {', '.join(unknown)}")
        self.flows = sorted(flows, key=lambda f: f.start_s)
        self.clients, self.ips, self.clock = clients, ips, clock
        self.assignments = assign_qps(flows)
        self.started: dict[str, float] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def connect(self, f: FlowSpec) -> None:
        """Create the flow's QPs at both ends (responder first: it must exist when data
        arrives)."""
        src, dst = self.clients[f.src], self.clients[f.dst]
        for a in self.assignments[f.name]:
            resp = dict(cmd="qp", qpn=a.responder_qpn, role="responder",
                        peer_ip=self.ips[f.src], peer_qpn=a.requester_qpn, tc=f.tc)
            if f.ack_tc is not None:
                resp["ack_tc"] = f.ack_tc
            dst.call(**resp)
            req = dict(cmd="qp", qpn=a.requester_qpn, role="requester", peer_ip=self.ips[f.dst],
                       peer_qpn=a.responder_qpn, tc=f.tc)
            if f.udp_sport:
                req["sport"] = f.udp_sport
            if f.rate_cap_mbps:
                req["rate_cap_mbps"] = f.rate_cap_mbps
            src.call(**req)

    def post(self, f: FlowSpec) -> None:
        """Hand the flow's messages to its requesters (a chain's: with the QPs it waits on)."""
        src = self.clients[f.src]
        for a in self.assignments[f.name]:
            post = dict(cmd="post", qpn=a.requester_qpn, kind=f.kind, size=f.message_bytes)
            if f.count is not None:
                post["count"] = f.count
            else:
                post["duration_s"] = f.duration_s
            if f.after:
                post["after"] = [self.assignments[g][a.index].responder_qpn for g in f.after]
            src.call(**post)

    def run(self, t0: float) -> None:
        """Each instant's flows: all connected, then all posted (a chain's gates exist before
        it waits on them)."""
        at: dict[float, list[FlowSpec]] = {}
        for f in self.flows:
            at.setdefault(f.start_s, []).append(f)
        for start, group in at.items():
            delay = t0 + start - self.clock()
            if delay > 0 and self._stop.wait(delay):
                return
            ready = []
            for f in group:
                try:
                    self.connect(f)
                    ready.append(f)
                except Exception as exc:  # an endpoint refused: recorded, the others start
                    self.errors.append(f"flow {f.name}: {exc}")
            for f in ready:
                try:
                    self.post(f)
                    self.started[f.name] = self.clock() - t0
                except Exception as exc:
                    self.errors.append(f"flow {f.name}: {exc}")

    def start(self, t0: float | None = None) -> None:
        t0 = self.clock() if t0 is None else t0
        self._thread = threading.Thread(target=self.run, args=(t0,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def flows_done(self) -> list[str]:
        """The flows that have started and whose requester QPs have nothing left to send
        (every message acknowledged)."""
        started = [f for f in self.flows if f.name in self.started]
        qps = {src: self.clients[src].call(cmd="stats")["qps"]  # one ask per sending host
               for src in {f.src for f in started}}
        return [f.name for f in started
                if all(qps[f.src].get(str(a.requester_qpn), {}).get("idle", False)
                       for a in self.assignments[f.name])]

    def done(self) -> bool:
        """True once every flow has started and every requester QP has nothing left to send."""
        return len(self.started) == len(self.flows) and len(self.flows_done()) == len(self.flows)
