"""A path impairment for endpoint tests: a bridge between two interfaces that drops or
CE-marks RoCE data packets going one way. Run in its own namespace:

    python -m tests.pathsim IN OUT [--drop P] [--mark P] [--mark-for S] [--seed N]

Frames from IN go to OUT (impaired), frames from OUT go back to IN untouched. Counts are
printed as JSON on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import random
import select
import signal
import socket
import struct
import sys
import time

from traffic.packets import DATA_OPCODES, ipv4_checksum
from traffic.wire import ETH_P_ALL, ETH_P_IP, IP_PROTO_UDP, PACKET_OUTGOING, ROCEV2_UDP_PORT


def is_roce_data(f: bytes) -> bool:
    return (len(f) > 14 + 20 + 8 + 12 and f[12:14] == ETH_P_IP.to_bytes(2, "big")
            and f[23] == IP_PROTO_UDP and f[36:38] == ROCEV2_UDP_PORT.to_bytes(2, "big")
            and f[42] in DATA_OPCODES)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--drop", type=float, default=0.0)
    ap.add_argument("--mark", type=float, default=0.0)
    ap.add_argument("--mark-for", type=float, default=1e9,
                    help="mark only during the first S seconds after the first data packet")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    socks = {}
    for name in (a.inp, a.out):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind((name, 0))
        socks[name] = s
    peer = {socks[a.inp]: socks[a.out], socks[a.out]: socks[a.inp]}
    counts = {"forwarded": 0, "dropped": 0, "marked": 0, "data": 0}
    first = None
    running = True

    def stop(*_):
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    while running:
        r, _, _ = select.select(list(peer), [], [], 0.2)
        for s in r:
            f, addr = s.recvfrom(65536)
            if addr[2] == PACKET_OUTGOING:
                continue
            if s is socks[a.inp] and is_roce_data(f):
                counts["data"] += 1
                now = time.monotonic()
                first = first or now
                if rng.random() < a.drop:
                    counts["dropped"] += 1
                    continue
                if now - first < a.mark_for and f[15] & 3 in (1, 2) and rng.random() < a.mark:
                    b = bytearray(f)
                    b[15] |= 3
                    b[24:26] = b"\x00\x00"
                    b[24:26] = struct.pack("!H", ipv4_checksum(bytes(b[14:34])))
                    f = bytes(b)
                    counts["marked"] += 1
            peer[s].send(f)
            counts["forwarded"] += 1
    print(json.dumps(counts), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
