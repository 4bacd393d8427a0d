"""Changing a tbf gate over rtnetlink, from the agent's own socket: no `tc` process between a
PFC frame and the gate.

A request to NETLINK_ROUTE is carried out inside the sendmsg() call that hands it to the
kernel (rtnetlink(7) requests run in the sender's context), so when :meth:`QdiscSocket.request`
returns, the gate is closed or open: the kick that follows an opening needs no wait. Through a
`tc -batch` process the change waited for that process to be scheduled, which on two saturated
cores is milliseconds in which the kernel queue and the phantom disagree.

The message is the one `tc qdisc change ... tbf rate R burst B limit L` sends (iproute2's
q_tbf.c): TCA_TBF_PARMS (struct tc_tbf_qopt), TCA_TBF_BURST and TCA_TBF_RTAB. With
TCA_TBF_BURST the kernel takes the burst in bytes as the largest frame the gate admits
(net/sched/sch_tbf.c, tbf_change); pyroute2's request has none, and at 1 kbit/s with a jumbo
burst the kernel then derived a largest size under one frame and dropped every frame at
enqueue. The rate table is ignored for a rate spec with a link layer (ours: Ethernet) but sent
as tc sends it. Pure functions build the bytes; :class:`QdiscSocket` sends them.
"""

from __future__ import annotations

import os
import socket
import struct
from functools import cache

RTM_NEWQDISC = 36
RTM_DELQDISC = 37
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLMSG_ERROR = 2
TCA_KIND = 1
TCA_OPTIONS = 2
TCA_TBF_PARMS = 1
TCA_TBF_RTAB = 2
TCA_TBF_BURST = 6
TC_LINKLAYER_ETHERNET = 1
#: tc's default for the rate table's cells when no mtu is given (iproute2 tc_core.c).
RTAB_MTU = 2047

#: What `tc qdisc add|change|replace` asks of the kernel (iproute2 tc/tc_qdisc.c).
FLAGS = {"add": NLM_F_EXCL | NLM_F_CREATE, "change": 0, "replace": NLM_F_CREATE | NLM_F_REPLACE}


@cache
def ticks_per_us() -> float:
    """The kernel's packet-scheduler ticks per microsecond (/proc/net/psched: its first two
    words, ns per us over ns per tick; 15.625 on every kernel since 2.6.32's 64 ns ticks)."""
    try:
        with open("/proc/net/psched") as f:
            t2us, us2t = (int(w, 16) for w in f.read().split()[:2])
        return t2us / us2t
    except (OSError, ValueError):
        return 1000 / 64


def xmit_ticks(rate_bytes: int, size: int) -> int:
    """How long ``size`` bytes take at the rate, in scheduler ticks, rounded as tc rounds
    (whole microseconds first: iproute2's tc_calc_xmittime). Pure."""
    return int(int(1_000_000 * size / rate_bytes) * ticks_per_us())


def _attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    n = 4 + len(payload)
    return struct.pack("HH", n, kind) + payload + bytes(-n % 4)


@cache
def tbf_options(rate_bps: int, burst: int, limit: int) -> bytes:
    """TCA_OPTIONS of a tbf qdisc, as tc builds it for ``rate RATEbit burst B limit L``.
    Pure."""
    rate = rate_bps // 8
    cell_log = 0
    while (RTAB_MTU >> cell_log) > 255:
        cell_log += 1
    # struct tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, rate
    ratespec = struct.pack("BBHhHI", cell_log, TC_LINKLAYER_ETHERNET, 0, -1, 0, rate)
    # struct tc_tbf_qopt: rate, peakrate (none), limit, buffer (ticks), mtu (none). The
    # kernel takes the burst from TCA_TBF_BURST, in bytes, where buffer's 32 bits of ticks end
    # at 274 s of the rate (34 KB at a closed gate's 1 kbit/s, less than a credit grant):
    # buffer is clamped, as tc would fail to say it.
    ticks = min(xmit_ticks(rate, burst), 0xFFFFFFFF)
    qopt = ratespec + bytes(12) + struct.pack("III", limit, ticks, 0)
    rtab = struct.pack("256I", *(xmit_ticks(rate, (i + 1) << cell_log) for i in range(256)))
    return _attr(TCA_OPTIONS, _attr(TCA_TBF_PARMS, qopt)
                 + _attr(TCA_TBF_BURST, struct.pack("I", burst)) + _attr(TCA_TBF_RTAB, rtab))


def _message(kind: int, flags: int, ifindex: int, parent: int, handle: int,
             attrs: bytes, seq: int = 0) -> bytes:
    tcmsg = struct.pack("BxxxiIII", socket.AF_UNSPEC, ifindex, handle, parent, 0)
    body = tcmsg + attrs
    return struct.pack("IHHII", 16 + len(body), kind, NLM_F_REQUEST | NLM_F_ACK | flags,
                       seq, 0) + body


def tbf_request(how: str, ifindex: int, parent: int, handle: int, rate_bps: int, burst: int,
                limit: int, seq: int = 0) -> bytes:
    """``tc qdisc <how> dev IF parent P handle H: tbf rate .. burst .. limit ..``. Pure."""
    attrs = _attr(TCA_KIND, b"tbf\0") + tbf_options(rate_bps, burst, limit)
    return _message(RTM_NEWQDISC, FLAGS[how], ifindex, parent, handle, attrs, seq)


def delete_request(ifindex: int, parent: int, handle: int, seq: int = 0) -> bytes:
    """``tc qdisc del dev IF parent P handle H:``. Pure."""
    return _message(RTM_DELQDISC, 0, ifindex, parent, handle, b"", seq)


def ack_error(reply: bytes) -> int:
    """The errno of the acknowledgement (0: done), from the kernel's NLMSG_ERROR. Pure."""
    if len(reply) < 20:
        raise ValueError(f"a netlink reply of {len(reply)} bytes")
    _n, kind = struct.unpack_from("IH", reply)
    if kind != NLMSG_ERROR:
        raise ValueError(f"netlink message type {kind}, not an acknowledgement")
    return -struct.unpack_from("i", reply, 16)[0]


class QdiscSocket:
    """A NETLINK_ROUTE socket in the namespace it is made in (it stays there when the thread
    leaves), carrying one qdisc request at a time."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.seq = 0

    def request(self, message: bytes) -> None:
        """Carry out one request (made with seq 0): done when this returns, or OSError."""
        self.seq += 1
        self.sock.send(message[:8] + struct.pack("I", self.seq) + message[12:])
        err = ack_error(self.sock.recv(65536))
        if err:
            raise OSError(err, os.strerror(err))

    def close(self) -> None:
        self.sock.close()
