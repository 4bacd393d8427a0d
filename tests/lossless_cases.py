"""Seeded random incasts for the lossless property test: any shape and incast that the buffers
are sized for must lose nothing in the lossless class with PFC on.

A case is drawn from its seed alone (:func:`make_case`), so a failure replays with
``pytest tests/test_lossless_property.py --seed N`` (see that file). Shapes: 2-4 spines, 2-6
leaves, 1-3 hosts per leaf, sometimes two parallel links; an incast of degree 2 up to every
other host, senders anywhere, message sizes and counts random; PFC only (no ECN, no DCQCN), so
PFC alone must keep the class lossless.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.analysis.fidelity import verdict_problem
from testbed.config.constants import DROP_PFC_CONSUMED
from testbed.config.models import FabricConfig
from testbed.fabric.measure import fabric_counters, hidden_loss, kernel_drops
from testbed.topology.graph import build_topology
from traffic.flows import FlowRunner, FlowSpec

#: Bytes each case pushes into its receiver: about 1.3 s of a 10 Mbit/s link, enough for every
#: queue on the way to cross XOFF many times over, short enough for 20 cases in minutes.
BYTES_PER_CASE = 1_600_000
MESSAGE_SIZES = (4096, 8192, 16384, 65536)


@dataclass(frozen=True)
class IncastCase:
    seed: int
    spines: int
    leaves: int
    hosts_per_leaf: int
    parallel_links: int
    receiver: str
    senders: tuple[str, ...]
    message_bytes: int
    count: int
    qps: int

    def config(self) -> FabricConfig:
        return FabricConfig.model_validate({
            "name": f"prop{self.seed % 100000}",
            "fabric": {"spines": self.spines, "leaves": self.leaves,
                       "hosts_per_leaf": self.hosts_per_leaf,
                       "parallel_links": self.parallel_links},
            "qos": {"pfc_enable": [3], "ecn": {}},
        })

    def flows(self) -> list[FlowSpec]:
        return [FlowSpec(name=f"f{i}", src=s, dst=self.receiver, qps=self.qps,
                         message_bytes=self.message_bytes, count=self.count)
                for i, s in enumerate(self.senders)]

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.spines}x{self.leaves}x{self.hosts_per_leaf}"
                f"{' (2 parallel links)' if self.parallel_links > 1 else ''}, "
                f"{len(self.senders)}:1 into {self.receiver} from {','.join(self.senders)}, "
                f"{self.qps} QP x {self.count} x {self.message_bytes} B each")


def make_case(seed: int) -> IncastCase:
    """The case a seed stands for (pure: the same seed gives the same case anywhere)."""
    rng = random.Random(seed)
    spines = rng.randint(2, 4)
    leaves = rng.randint(2, 6)
    hpl = rng.randint(1, 3)
    while leaves * hpl < 3:  # an incast needs two senders and a receiver
        hpl += 1
    parallel = 2 if rng.random() < 0.25 else 1
    hosts = [f"h{i}" for i in range(1, leaves * hpl + 1)]
    receiver = rng.choice(hosts)
    others = [h for h in hosts if h != receiver]
    senders = tuple(sorted(rng.sample(others, rng.randint(2, len(others))),
                           key=lambda h: int(h[1:])))
    msg = rng.choice(MESSAGE_SIZES)
    qps = rng.choice((1, 1, 2))
    count = max(1, BYTES_PER_CASE // (len(senders) * qps * msg))
    count = rng.randint(max(1, count // 2), count)
    return IncastCase(seed, spines, leaves, hpl, parallel, receiver, senders, msg, count, qps)


def run_case(case: IncastCase, tmp: Path, timeout_s: float = 120) -> dict:
    """Bring the case's fabric up, run its incast to the end, and read what every part counted:
    the receiver's QPs, the switches' kernel queues and P4 counters, the fidelity verdict."""
    import json

    from testbed.run.bringup import Fabric

    cfg = case.config()
    topo = build_topology(cfg)
    with Fabric(cfg, topo, tmp) as fabric:
        # the endpoints' own retransmission timer (IB's Local ACK Timeout scaled to the link):
        # with a fixed 0.5 s one, an incast of many QPs that each put a 64 KB message in
        # flight at once (seeds 1003, 1018) resent packets that were never lost
        eps = fabric.start_endpoints(["--no-dcqcn"])
        runner = FlowRunner(case.flows(), eps, {h.name: h.ip for h in topo.hosts})
        runner.start()
        deadline = time.monotonic() + timeout_s
        while not runner.done() and time.monotonic() < deadline:
            time.sleep(0.25)
        time.sleep(0.5)  # the last XON settles
        counters = fabric_counters(fabric)
        recv = eps[case.receiver].call(cmd="stats")
        sent = [q for s in case.senders for q in eps[s].call(cmd="stats")["qps"].values()
                if q.get("role") == "requester"]
        done = runner.done()
        assignments = runner.assignments
    tel = json.loads((tmp / "telemetry" / "summary.json").read_text())
    qps = [recv["qps"][str(a.responder_qpn)] for a in
           (x for v in assignments.values() for x in v)]
    p4_drops = {f"{s}:{p}:{r}": v for s, sc in counters.items()
                for (p, r), v in sc.drops.items() if r != DROP_PFC_CONSUMED and v}
    return {
        "case": case.describe(), "done": done,
        "expected_bytes": case.message_bytes * case.count,
        "qps": qps,
        "resent": sum(q["retransmitted"] for q in sent),
        "timeouts": sum(q["timeouts"] for q in sent),
        "kernel_drops_lossless": kernel_drops(counters, 3),
        "p4_drops": p4_drops,
        "hidden_loss": sum(hidden_loss(counters).values()),
        "pfc_frames": sum(sum(sc.pfc_tx.values()) for sc in counters.values()),
        "fidelity": tel.get("fidelity"),
        "drift_bytes": tel.get("drift_bytes"),
        "held_bytes": tel.get("held_bytes"),
    }


def lossless_failures(r: dict) -> list[str]:
    """What a user would check: a faithful run (the fidelity guard's every check measured and
    passed), everything delivered once and in order with nothing resent, nothing dropped in
    the lossless class by the kernel or the program, nothing lost in front of BMv2."""
    out = []
    if (problem := verdict_problem(r["fidelity"])) is not None:
        out.append(f"not a faithful run: {problem}")
    if r["resent"] or r["timeouts"]:
        out.append(f"the senders resent {r['resent']} packets ({r['timeouts']} timeouts) in a "
                   "run that lost nothing")
    if not r["done"]:
        out.append("flows did not complete")
    for q in r["qps"]:
        if q["bytes"] != r["expected_bytes"] or q["corrupt"]:
            out.append(f"QP received {q['bytes']} of {r['expected_bytes']} bytes "
                       f"({q['corrupt']} corrupt)")
        if q["out_of_order"] or q["naks_sent"]:
            out.append(f"QP saw {q['out_of_order']} out-of-order packets, sent "
                       f"{q['naks_sent']} NAKs")
        if q["duplicates"]:  # a resend of what had arrived: a timeout in a run that lost nothing
            out.append(f"QP received {q['duplicates']} packets twice (the sender resent them)")
    if r["kernel_drops_lossless"]:
        out.append(f"{r['kernel_drops_lossless']} lossless-class drops in the kernel queues")
    if r["p4_drops"]:
        out.append(f"P4 drops {r['p4_drops']}")
    if r["hidden_loss"]:
        out.append(f"{r['hidden_loss']} frames lost in front of BMv2")
    return out
