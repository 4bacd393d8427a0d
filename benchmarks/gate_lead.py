"""How far a kernel port gets ahead of the P4 phantom at each pause: the bytes a lossless class
sends, over a run of pauses, beyond its link rate over the time it was not paused and the gate
leak the phantom already drains as a pause begins (``testbed.topology.qos.gate_leak_roce_bytes``).

Why: the phantom drains at the link rate while the class is not paused, and a resync sets it
to the real occupancy every resync period. A port that sends more than that after a pause makes
the phantom stand above the real queue until the next resync, by the excess times the pauses
since: the positive drift that decides the fabric's capacity with 1 KB frames
(``benchmarks/capacity.py``'s ``drift_p99``: 10 of the largest 1 KB RoCE frames, 11 KB). The
suspect is htb: while the class's gate is closed its buckets fill
(``testbed.machine.ports.HTB_BURST_BYTES``), and at the reopening the class sends what they hold at
once, then a frame whenever its tokens are not negative, so up to a frame more than the link
rate would have.

The port is the product's (``testbed.machine.ports``: htb, a tbf gate per class), on a veth in a
fresh namespace, with a backlog of full-size RoCE data frames (a write's middle packets, as the
capacity benchmark's flows send) in class 3; the gate is opened and closed ``--cycles`` times
and the class's sent bytes are read from the kernel.

Run as root: sudo .venv/bin/python -m benchmarks.gate_lead [--reps 3]
Writes gate_lead.json and gate_lead.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from pathlib import Path

from testbed.machine.netns import inside
from testbed.machine.ports import HTB_BURST_BYTES
from testbed.topology.qos import gate_leak_roce_bytes, roce_mtu
from tests.portrig import port
from traffic.packets import WRITE_MIDDLE, RoceFrameBuilder

TC = 3  # the class RoCE's DSCP maps to (tests.portrig.DSCP_TO_TC, as by default)
#: (link Mbit/s, interface MTU): 1 KB and 4 KB RoCE frames at the rates capacity.py tries.
POINTS = ((7.5, 1500), (10, 1500), (20, 1500), (10, 9000), (20, 9000), (40, 9000))


def excess_per_pause(sent_bytes: int, open_s: float, rate_mbps: float, cycles: int,
                     leak_bytes: int) -> float:
    """Bytes a pause cycle sent beyond the phantom's model of it: the link rate over the time
    open, and the gate leak as each pause begins."""
    return (sent_bytes - open_s * rate_mbps * 1e6 / 8) / cycles - leak_bytes


def data_frame(mtu: int) -> bytes:
    """A full-size RoCE write's middle packet at this interface MTU, as an endpoint sends it."""
    builder = RoceFrameBuilder("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                               50000)
    return builder.frame(WRITE_MIDDLE, 0x100, 0, bytes(roce_mtu(mtu)))


def measure(rate_mbps: float, mtu: int, cycles: int, open_s: float, closed_s: float) -> dict:
    f = data_frame(mtu)
    size = len(f)
    need = int(rate_mbps * 1e6 / 8 * open_s * cycles * 1.5) + 20 * size  # never runs dry
    with port(rate_mbps, 4_000_000, mtu) as (ns, gates):
        gates.close(TC)
        with inside(f"/run/netns/{ns}"):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)
        s.bind(("pa", 0))
        for _ in range(need // size + 1):
            s.send(f)
        s.close()
        time.sleep(0.05)  # the closing gate's leak has gone
        before = gates.stats()[TC]
        opened = 0.0
        for _ in range(cycles):
            # each change takes effect within its call (a netlink request is carried out in
            # its send): the middle of each call is when, to within half its length
            a = time.monotonic()
            gates.open(TC)
            b = time.monotonic()
            time.sleep(open_s)
            c = time.monotonic()
            gates.close(TC)
            d = time.monotonic()
            opened += (c + d) / 2 - (a + b) / 2
            time.sleep(closed_s)
        after = gates.stats()[TC]
    if after.backlog_packets == 0:
        raise RuntimeError("the backlog ran dry: the excess would be understated")
    sent = after.sent_bytes - before.sent_bytes
    leak = gate_leak_roce_bytes(mtu)
    excess = excess_per_pause(sent, opened, rate_mbps, cycles, leak)
    return {"rate_mbps": rate_mbps, "mtu": mtu, "frame_bytes": size, "cycles": cycles,
            "sent_bytes": sent, "open_s": round(opened, 4), "modeled_leak_bytes": leak,
            "excess_per_pause_bytes": round(excess)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--open-ms", type=float, default=10.0)
    ap.add_argument("--closed-ms", type=float, default=10.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for rate, mtu in POINTS:
        runs = [measure(rate, mtu, args.cycles, args.open_ms / 1e3, args.closed_ms / 1e3)
                for _ in range(args.reps)]
        ex = [r["excess_per_pause_bytes"] for r in runs]
        rows.append({"rate_mbps": rate, "mtu": mtu, "frame_bytes": runs[0]["frame_bytes"],
                     "excess_median_bytes": statistics.median(ex), "excess_range": [min(ex),
                                                                                    max(ex)],
                     "runs": runs})
    (args.out / "gate_lead.json").write_text(json.dumps(
        {"htb_burst_bytes": HTB_BURST_BYTES, "settings": vars(args) | {"out": str(args.out)},
         "points": rows}, indent=2))
    md = [f"A port's lossless class, paused and resumed {args.cycles} times ({args.open_ms:g} ms "
          f"open, {args.closed_ms:g} ms closed), medians of {args.reps} runs: what it sent at "
          "each pause beyond the P4 phantom's model (the link rate while open, and the gate "
          f"leak as a pause begins). htb's bucket: {HTB_BURST_BYTES} bytes.", "",
          "| link | frames | beyond the phantom, per pause (range) | in frames |",
          "|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['rate_mbps']:g} Mbit/s | {r['frame_bytes']} bytes | "
                  f"{r['excess_median_bytes']:.0f} bytes ({r['excess_range'][0]}-"
                  f"{r['excess_range'][1]}) | {r['excess_median_bytes'] / r['frame_bytes']:.2f} |")
    (args.out / "gate_lead.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
