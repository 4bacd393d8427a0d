"""Endpoint cost and accuracy: CPU while pacing 1,000 packets/s, pacing accuracy, top send rate
beside a bare raw-socket send loop, all measured in the same run.

The goal's bare loop sends into a peer where nothing listens. For context the run also times the
same loop while a bare Python receiver (a packet socket and a held UDP 4791, as an endpoint has)
drains the peer, and how many frames per second that receiver takes: the kernel's work for a
listening peer falls on the sender's core, and the endpoint's peer must receive what it sends.

Run as root: sudo .venv/bin/python -m benchmarks.endpoint [--out benchmarks/out]
Writes endpoint.json and endpoint.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.hostpair import IPS, MACS, host_pair
from traffic.packets import WRITE_MIDDLE, RoceFrameBuilder

PAYLOAD = 4096


def endpoint_proc(hp, host: str) -> psutil.Process:
    for p in hp.procs:
        for c in psutil.Process(p.pid).children(recursive=True) + [psutil.Process(p.pid)]:
            if "traffic.endpoint" in " ".join(c.cmdline()) and f"{host}.ep" in " ".join(
                    c.cmdline()):
                return c
    raise RuntimeError("endpoint process not found")


def qp_pair(a, b, **kw) -> int:
    b.call(cmd="qp", qpn=0x200, role="responder", peer_ip=IPS["a"], peer_qpn=0x100)
    a.call(cmd="qp", qpn=0x100, role="requester", peer_ip=IPS["b"], peer_qpn=0x200, **kw)
    return 0x100


def pacing(seconds: float, pps: float) -> dict:
    frame_bytes = len(RoceFrameBuilder(MACS["a"], MACS["b"], IPS["a"], IPS["b"], 1).frame(
        WRITE_MIDDLE, 1, 0, b"\0" * PAYLOAD))
    cap_mbps = pps * frame_bytes * 8 / 1e6
    with tempfile.TemporaryDirectory() as tmp, host_pair(Path(tmp), line_mbps=1000) as hp:
        a, b = hp.endpoint("a", "--no-dcqcn"), hp.endpoint("b")
        q = qp_pair(a, b, rate_cap_mbps=cap_mbps, max_outstanding=256)
        a.call(cmd="post", qpn=q, kind="write", size=PAYLOAD * 100, count=int(pps * seconds))
        time.sleep(1.0)  # settle
        proc = endpoint_proc(hp, "a")
        s0, c0, t0 = a.call(cmd="stats"), proc.cpu_times(), time.monotonic()
        time.sleep(seconds)
        s1, c1, t1 = a.call(cmd="stats"), proc.cpu_times(), time.monotonic()
    sent = s1["qps"][str(q)]["packets_sent"] - s0["qps"][str(q)]["packets_sent"]
    cpu = (c1.user + c1.system - c0.user - c0.system) / (t1 - t0)
    achieved = sent / (t1 - t0)
    return {"target_pps": pps, "achieved_pps": round(achieved, 1),
            "pacing_error": round(achieved / pps - 1, 4), "cpu_core_fraction": round(cpu, 4)}


BARE = """
import socket, time, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
f = bytes.fromhex(sys.argv[1])
n = 0
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        s.send(f)
        n += 1
    except OSError:
        pass
print(n / float(sys.argv[2]))
"""

SINK = """
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind(("eth0", 0))
q = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
q.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
q.bind((sys.argv[1], 4791))
s.settimeout(1.0)
n, first, last = 0, None, None
print("ready", flush=True)
try:
    while True:
        s.recv(65536)
        last = time.monotonic()
        first = first or last
        n += 1
except socket.timeout:
    pass
print(n / (last - first) if n > 1 else 0.0)
"""


def top_rate(seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp, host_pair(Path(tmp), line_mbps=100_000) as hp:
        frame = RoceFrameBuilder(MACS["a"], MACS["b"], IPS["a"], IPS["b"], 50000).frame(
            WRITE_MIDDLE, 0x200, 0, b"\0" * PAYLOAD)
        r = hp.run("a", sys.executable, "-c", BARE, frame.hex(), str(seconds),
                   stdout=subprocess.PIPE, text=True)
        bare = float(r.communicate(timeout=seconds + 30)[0].strip())
        sink = hp.run("b", sys.executable, "-c", SINK, IPS["b"], stdout=subprocess.PIPE, text=True)
        sink.stdout.readline()
        r = hp.run("a", sys.executable, "-c", BARE, frame.hex(), str(seconds),
                   stdout=subprocess.PIPE, text=True)
        bare_rx = float(r.communicate(timeout=seconds + 30)[0].strip())
        drained = float(sink.communicate(timeout=30)[0].strip())
        a, b = hp.endpoint("a", "--no-dcqcn"), hp.endpoint("b")
        q = qp_pair(a, b, max_outstanding=256)
        a.call(cmd="post", qpn=q, kind="write", size=PAYLOAD * 1000, count=1000)
        time.sleep(1.0)
        s0, t0 = a.call(cmd="stats"), time.monotonic()
        time.sleep(seconds)
        s1, t1 = a.call(cmd="stats"), time.monotonic()
    ep = (s1["qps"][str(q)]["packets_sent"] - s0["qps"][str(q)]["packets_sent"]) / (t1 - t0)
    return {"bare_raw_socket_pps": round(bare), "endpoint_pps": round(ep),
            "ratio": round(ep / bare, 3), "bare_into_receiver_pps": round(bare_rx),
            "bare_receiver_drained_pps": round(drained)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pace = [pacing(args.seconds, 1000) for _ in range(args.reps)]
    top = [top_rate(args.seconds / 2) for _ in range(args.reps)]
    res = {
        "pacing_1000pps": {
            "cpu_core_fraction_median": statistics.median(p["cpu_core_fraction"] for p in pace),
            "achieved_pps_median": statistics.median(p["achieved_pps"] for p in pace),
            "pacing_error_median": statistics.median(p["pacing_error"] for p in pace),
            "runs": pace},
        "top_rate": {"ratio_median": statistics.median(t["ratio"] for t in top),
                     "endpoint_pps_median": statistics.median(t["endpoint_pps"] for t in top),
                     "bare_pps_median": statistics.median(t["bare_raw_socket_pps"] for t in top),
                     "bare_into_receiver_pps_median": statistics.median(
                         t["bare_into_receiver_pps"] for t in top),
                     "bare_receiver_drained_pps_median": statistics.median(
                         t["bare_receiver_drained_pps"] for t in top),
                     "runs": top},
    }
    (args.out / "endpoint.json").write_text(json.dumps(res, indent=2))
    p, t = res["pacing_1000pps"], res["top_rate"]
    md = ("| measure | median | goal |\n|---|---|---|\n"
          f"| CPU while pacing 1,000 pps | {p['cpu_core_fraction_median']:.1%} of a core | < 5% |\n"
          f"| pacing: achieved / target | {p['achieved_pps_median']} / 1000 pps "
          f"({p['pacing_error_median']:+.2%}) | within 2% |\n"
          f"| top send rate | {t['endpoint_pps_median']} pps vs bare loop "
          f"{t['bare_pps_median']} pps: ratio {t['ratio_median']} | >= 0.5 |\n"
          f"| context: bare loop into a peer where a bare Python receiver listens | "
          f"{t['bare_into_receiver_pps_median']} pps sent, "
          f"{t['bare_receiver_drained_pps_median']} pps received | - |\n")
    (args.out / "endpoint.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
