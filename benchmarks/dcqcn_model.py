"""How long DCQCN takes to share a link fairly when nothing but DCQCN is at work: the reaction
points of traffic/dcqcn.py (each profile scaled to the link, as the endpoints run them) over an
ideal bottleneck, with no switch, agent or kernel in the way. It says what a fabric run can
show at best, and so how long the dcqcn-fairness scenarios must run.

Run: .venv/bin/python -m benchmarks.dcqcn_model [--seconds 120] [--seeds 3] [--out benchmarks/out]

The model: three senders join a link of the default rate (10 Mbit/s) 0, 1 and 2 s apart (as
in the scenarios), each sending 4 KB frames at its current rate RC; a FIFO drains at the link
rate; a frame arriving at a queue above Kmin is marked with RED's probability (the testbed's
default WRED profile); the receiver sends at most one CNP per QP per scaled CNP interval, and a
CNP reaches the sender 0.2 ms after the marked frame leaves the queue. Pure Python, no root.
Writes dcqcn_model.json and dcqcn_model.md: Jain's index over each 5 s window, per profile and
seed, and when it first passes 0.97.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
from collections import deque
from pathlib import Path

from testbed.analysis.phenomena import jain_index
from testbed.config.models import DEFAULT_LINK_MBPS, EcnProfile
from traffic.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint

LINE_BPS = DEFAULT_LINK_MBPS * 1e6
FRAME = 4096 + 78  # payload and RoCEv2 headers, as the endpoints send
STARTS = (0.0, 1.0, 2.0)
CNP_DELAY_S = 0.0002
WINDOW_S = 5.0


def run(seconds: float, profile: str, seed: int) -> list[float]:
    """Jain's index of the senders' delivered rates over each WINDOW_S window."""
    rnd = random.Random(seed)
    ecn = EcnProfile()
    p = DcqcnParams.scaled(LINE_BPS, profile)
    notify = NotificationPoint(p.cnp_interval_s)
    rps: list[ReactionPoint | None] = [None] * len(STARTS)
    queue: deque[tuple[int, bool]] = deque()
    qbytes = 0
    busy = False
    delivered: list[list[float]] = [[] for _ in STARTS]
    events: list[tuple[float, int, str, int]] = []  # (time, seq, kind, sender)
    seq = 0

    def push(t: float, kind: str, who: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, who))

    for i, t in enumerate(STARTS):
        push(t, "send", i)
    while events:
        t, _, kind, who = heapq.heappop(events)
        if t > seconds:
            break
        if kind == "send":
            rp = rps[who] = rps[who] or ReactionPoint(p, now=t)
            rp.advance(t)
            if qbytes > ecn.kmax_bytes:
                mark = True
            elif qbytes > ecn.kmin_bytes:
                mark = rnd.random() < ecn.pmax * (qbytes - ecn.kmin_bytes) / (
                    ecn.kmax_bytes - ecn.kmin_bytes)
            else:
                mark = False
            queue.append((who, mark))
            qbytes += FRAME
            rp.on_sent(FRAME, t)
            push(t + FRAME * 8 / rp.rc, "send", who)
            if not busy:
                busy = True
                push(t + FRAME * 8 / LINE_BPS, "leave", -1)
        elif kind == "leave":
            sender, mark = queue.popleft()
            qbytes -= FRAME
            delivered[sender].append(t)
            if mark and notify.should_send(sender, t):
                push(t + CNP_DELAY_S, "cnp", sender)
            if queue:
                push(t + FRAME * 8 / LINE_BPS, "leave", -1)
            else:
                busy = False
        elif kind == "cnp":
            rps[who].on_cnp(t)  # type: ignore[union-attr]
    out = []
    end = WINDOW_S
    while end <= seconds + 1e-9:
        rates = [sum(1 for x in d if end - WINDOW_S <= x < end) for d in delivered]
        out.append(round(jain_index(rates), 3))
        end += WINDOW_S
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    args = ap.parse_args()
    results = {prof: {seed: run(args.seconds, prof, seed) for seed in range(1, args.seeds + 1)}
               for prof in ("paper", "connectx")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dcqcn_model.json").write_text(json.dumps(results, indent=1) + "\n")
    ends = [int(WINDOW_S * (i + 1)) for i in range(len(results["paper"][1]))]
    lines = ["# DCQCN alone: Jain's index over 5 s windows (benchmarks/dcqcn_model.py)", "",
             f"Three senders joining a {LINE_BPS / 1e6:g} Mbit/s link 0, 1 and 2 s apart, the "
             "reaction points of traffic/dcqcn.py over an ideal queue with the default RED "
             "marking.", "",
             "| profile | seed | first window >= 0.97 ends at (s) | " +
             " | ".join(f"{e} s" for e in ends if e % 10 == 0) + " |",
             "|---|---|---|" + "---|" * len([e for e in ends if e % 10 == 0])]
    for prof, seeds in results.items():
        for seed, js in seeds.items():
            first = next((e for e, j in zip(ends, js, strict=True) if j >= 0.97), None)
            lines.append(f"| {prof} | {seed} | {first} | " + " | ".join(
                str(j) for e, j in zip(ends, js, strict=True) if e % 10 == 0) + " |")
    (args.out / "dcqcn_model.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
