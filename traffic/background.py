"""Best-effort background: constant-rate UDP from a host's kernel, not RoCE, in a lossy class.

SONiC's RoCEv2 test plan (sonic-mgmt docs/testplan/, "lossless priority against best-effort
background") has the tester send line-rate best-effort traffic beside the RoCE flows, and
expects the lossless class to keep its rate and lose nothing while the background takes what
is left and loses the rest. A RoCE flow in class 0 is not that traffic: it would slow down for
its own NAKs and (with DCQCN) for CNPs. This is what a hardware tester's UDP stream is: a
constant rate that obeys nothing, from the host's own IP stack (a socket, ``IP_TOS`` carrying
the class's DSCP), as iperf's ``-u -b RATE`` sends it.

Each background flow is two processes in the hosts' namespaces, ``python -m traffic.background
send`` on its source and ``... recv`` on its destination. The sender waits for the run's clock
on its standard input (one line, the run's t0 on CLOCK_MONOTONIC, which every namespace
shares), sends from ``t0 + start_s`` for ``duration_s`` (or until it is told to stop), and
writes what it sent as JSON when it ends; the receiver counts what arrives until it is told to
stop, and writes the same, with what had arrived every :data:`SAMPLE_S`. Each datagram
carries its sequence number (8 bytes, big-endian) so the receiver can tell loss from
reordering.

The sender paces itself as a NIC does, one frame every ``frame_bytes * 8 / rate`` seconds, and
keeps no debt beyond one frame when its process comes late (a late NIC does not then burst at
more than line rate); how late it came is written beside what it sent.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from traffic.names import NAME_PATTERN
from traffic.wire import ETH_HEADER_LEN, IPV4_HEADER_LEN, UDP_HEADER_LEN

#: The first background flow's UDP port (iperf's default); flow i takes BASE_PORT + i.
BASE_PORT = 5001
#: What a frame carries beyond its UDP payload: Ethernet, IPv4, UDP headers.
FRAME_OVERHEAD = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN
#: The datagram's sequence number.
SEQ = struct.Struct("!Q")
#: The smallest frame: its headers and the sequence number.
MIN_FRAME_BYTES = FRAME_OVERHEAD + SEQ.size
#: How often a receiver with nothing arriving looks whether it was told to stop.
RECV_POLL_S = 0.2
#: How often the receiver notes what has arrived so far (its series: goodput over time).
SAMPLE_S = 0.25


class BackgroundSpec(BaseModel):
    """One background flow, as a scenario writes it (``background:``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    src: str = Field(pattern=NAME_PATTERN, description="Sending host, e.g. h2.")
    dst: str = Field(pattern=NAME_PATTERN, description="Receiving host.")
    rate_mbps: float | None = Field(
        None, gt=0, description="Offered rate on the wire (frames with their Ethernet header); "
        "default: the source host's line rate, as the plan's line-rate background.")
    tc: int = Field(0, ge=0, le=7, description="Traffic class (its DSCP as the hosts mark "
                    "it); 0: best effort. A lossless class is refused: PFC does not stop it.")
    frame_bytes: int | None = Field(
        None, ge=MIN_FRAME_BYTES, description="Each frame's size with its Ethernet header; "
        "default: the largest the fabric's MTU carries (fewer packets for BMv2 to forward).")
    start_s: float = Field(0.0, ge=0, description="Start, in seconds from the run's start.")
    duration_s: float | None = Field(
        None, gt=0, description="Send for this long; default: until the senders stop.")

    @model_validator(mode="after")
    def _two_hosts(self) -> BackgroundSpec:
        if self.src == self.dst:
            raise ValueError("src and dst are the same host")
        return self


def largest_frame(mtu: int) -> int:
    """The largest frame an IP MTU of ``mtu`` carries unfragmented, with its Ethernet header."""
    return mtu + ETH_HEADER_LEN


def frame_size(spec: BackgroundSpec, mtu: int) -> int:
    """The flow's frame size: as written, else the largest the MTU carries."""
    return spec.frame_bytes if spec.frame_bytes is not None else largest_frame(mtu)


def offered_mbps(spec: BackgroundSpec, line_rate_mbps: float) -> float:
    """The flow's offered rate: as written, else its source's line rate."""
    return spec.rate_mbps if spec.rate_mbps is not None else line_rate_mbps


def payload_bytes(frame_bytes: int) -> int:
    """A frame's UDP payload."""
    return frame_bytes - FRAME_OVERHEAD


def interval_s(frame_bytes: int, rate_bps: float) -> float:
    """The time between two frames at the rate."""
    return frame_bytes * 8 / rate_bps


def next_send(due: float, now: float, interval: float) -> float:
    """When the frame after one due at ``due`` and sent at ``now`` is due: one interval on,
    but never earlier than one interval before ``now`` (a late sender catches up by one frame,
    never by a burst). Pure."""
    return max(due + interval, now - interval) if now > due else due + interval


class _Stop:
    """Set by SIGTERM or SIGINT: the runner's way to end a sender or a receiver."""

    def __init__(self) -> None:
        self.now = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._set)

    def _set(self, *_a: object) -> None:
        self.now = True


def send(args: argparse.Namespace) -> dict:
    """Send paced datagrams; returns what was sent."""
    stop = _Stop()
    t0 = float(sys.stdin.readline() or "nan")  # the run's clock, once the run starts
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, args.dscp << 2)
    sock.bind((args.src_ip, 0))
    sock.connect((args.dst_ip, args.port))
    body = bytearray(payload_bytes(args.frame_bytes))
    gap = interval_s(args.frame_bytes, args.rate_bps)
    out = {"sent_packets": 0, "sent_bytes": 0, "send_errors": 0, "late_max_s": 0.0,
           "first_s": None, "last_s": None}
    due = t0 + args.start_s
    end = due + args.duration_s if args.duration_s else float("inf")
    while not stop.now and t0 == t0:
        now = time.monotonic()
        if now >= end:
            break
        if now < due:
            time.sleep(min(due - now, RECV_POLL_S))
            continue
        SEQ.pack_into(body, 0, out["sent_packets"])
        try:
            sock.send(body)
        except OSError:  # ENOBUFS: the frame is lost at the host, counted
            out["send_errors"] += 1
        else:
            out["sent_packets"] += 1
            out["sent_bytes"] += args.frame_bytes
        out["first_s"] = out["first_s"] if out["first_s"] is not None else now - t0
        out["last_s"] = now - t0
        out["late_max_s"] = max(out["late_max_s"], now - due)
        due = next_send(due, now, gap)
    sock.close()
    return out


def receive(args: argparse.Namespace) -> dict:
    """Count arriving datagrams until told to stop; returns what arrived."""
    stop = _Stop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.dst_ip, args.port))
    sock.settimeout(RECV_POLL_S)
    buf = bytearray(65536)
    out: dict = {"received_packets": 0, "received_bytes": 0, "highest_seq": -1, "reordered": 0,
                 "series": []}  # [monotonic s, bytes received so far], every SAMPLE_S
    next_sample = time.monotonic()
    while not stop.now:
        now = time.monotonic()
        if now >= next_sample:
            out["series"].append([now, out["received_bytes"]])
            next_sample = now + SAMPLE_S
        try:
            n = sock.recv_into(buf)
        except (TimeoutError, InterruptedError):
            continue
        if n < SEQ.size:
            continue
        seq = SEQ.unpack_from(buf)[0]
        out["received_packets"] += 1
        out["received_bytes"] += n + FRAME_OVERHEAD
        if seq < out["highest_seq"]:
            out["reordered"] += 1
        out["highest_seq"] = max(out["highest_seq"], seq)
    out["series"].append([time.monotonic(), out["received_bytes"]])
    sock.close()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m traffic.background", description=__doc__)
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("send", help="send paced UDP (reads the run's t0 on stdin)")
    s.add_argument("--src-ip", required=True)
    s.add_argument("--dst-ip", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--dscp", type=int, required=True)
    s.add_argument("--frame-bytes", type=int, required=True)
    s.add_argument("--rate-bps", type=float, required=True)
    s.add_argument("--start-s", type=float, default=0.0)
    s.add_argument("--duration-s", type=float, default=0.0, help="0: until told to stop")
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("recv", help="count arriving UDP until told to stop")
    r.add_argument("--dst-ip", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.role == "send" and args.frame_bytes < MIN_FRAME_BYTES:
        p.error(f"--frame-bytes must be at least {MIN_FRAME_BYTES}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = send(args) if args.role == "send" else receive(args)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
