"""Queue statistics of every qdisc in a namespace, in one netlink dump parsed by hand.

The agent reads these every tick and every sample; pyroute2's general parser costs about 1 ms
per port (a third of a core at the agent's tick rate), this one a fraction of that. It reads
only what the port model needs: each qdisc's interface, handle, kind, and the basic and queue
statistics (TCA_STATS2).
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from testbed.config.constants import gate_class, gate_major
from traffic.wire import NUM_TCS

NETLINK_ROUTE = 0
RTM_GETQDISC = 38
RTM_NEWQDISC = 36
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_DONE = 3
NLMSG_ERROR = 2
TCA_KIND = 1
TCA_STATS2 = 7
TCA_STATS_BASIC = 1
TCA_STATS_QUEUE = 3
TCA_OPTIONS = 2
TCA_TBF_PARMS = 1

_NLMSG = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BxxxiIII")
_RTA = struct.Struct("=HH")


@dataclass(frozen=True)
class QdiscStats:
    ifindex: int
    handle: int
    kind: str
    bytes: int
    packets: int
    qlen: int
    backlog: int
    drops: int
    rate_bps: int = 0  # tbf only: its configured rate

    @property
    def tc(self) -> int | None:
        """The traffic class whose gate (a tbf under the port's htb) this is; None for any
        other qdisc. The one reading of a dump entry the agent and a run's counters share."""
        return gate_class(self.handle >> 16) if self.kind == "tbf" else None


def _attrs(buf: bytes, off: int, end: int):
    while off + 4 <= end:
        length, kind = _RTA.unpack_from(buf, off)
        if length < 4:
            return
        yield kind & 0x3FFF, off + 4, off + length
        off += (length + 3) & ~3


class QdiscReader:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.seq = 0

    def dump(self, majors: range | frozenset[int] | None = None) -> list[QdiscStats]:
        """Every class gate's statistics, or only those whose handle major is in ``majors``
        (the agent's resync ticks need the lossless classes alone: parsing is most of a dump's
        cost, about 18 us a gate)."""
        wanted = self.handle_majors if majors is None else majors
        self.seq += 1
        req = _NLMSG.pack(_NLMSG.size + _TCMSG.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP,
                          self.seq, os.getpid()) + _TCMSG.pack(0, 0, 0, 0, 0)
        self.sock.send(req)
        out: list[QdiscStats] = []
        while True:
            data = self.sock.recv(1 << 16)
            off = 0
            while off + _NLMSG.size <= len(data):
                length, mtype, _flags, seq, _pid = _NLMSG.unpack_from(data, off)
                if length < _NLMSG.size:
                    return out
                if mtype == NLMSG_DONE:
                    return out
                if mtype == NLMSG_ERROR:
                    raise OSError("netlink error while dumping qdiscs")
                if mtype == RTM_NEWQDISC and seq == self.seq and self._wanted(data, off,
                                                                              wanted):
                    out.append(self._parse(data, off + _NLMSG.size, off + length))
                off += (length + 3) & ~3

    #: Only the port model's class gates (handles 10: to 17:) are parsed; the rest of a dump
    #: (htb roots, the control and kick classes, other devices) is skipped unread.
    handle_majors = range(gate_major(0), gate_major(NUM_TCS))

    @staticmethod
    def _wanted(buf: bytes, off: int, majors: range | frozenset[int]) -> bool:
        handle = struct.unpack_from("=I", buf, off + _NLMSG.size + 8)[0]
        return (handle >> 16) in majors

    @staticmethod
    def _parse(buf: bytes, off: int, end: int) -> QdiscStats:
        _fam, ifindex, handle, _parent, _info = _TCMSG.unpack_from(buf, off)
        kind = ""
        b = p = qlen = backlog = drops = rate = 0
        for t, s, e in _attrs(buf, off + _TCMSG.size, end):
            if t == TCA_KIND:
                kind = buf[s:e].rstrip(b"\0").decode()
            elif t == TCA_OPTIONS and kind == "tbf":
                for t2, s2, _e2 in _attrs(buf, s, e):
                    if t2 == TCA_TBF_PARMS:
                        rate = struct.unpack_from("=I", buf, s2 + 8)[0] * 8
            elif t == TCA_STATS2:
                for t2, s2, _e2 in _attrs(buf, s, e):
                    if t2 == TCA_STATS_BASIC:
                        b, p = struct.unpack_from("=QI", buf, s2)
                    elif t2 == TCA_STATS_QUEUE:
                        qlen, backlog, drops = struct.unpack_from("=III", buf, s2)
        return QdiscStats(ifindex, handle, kind, b, p, qlen, backlog, drops, rate)

    def close(self) -> None:
        self.sock.close()


def by_ifindex(dump: list[QdiscStats]) -> dict[int, list[QdiscStats]]:
    """A dump's entries per interface: each port then reads its own few, not the whole dump
    (a switch's eight ports each went through every port's gates, each sample)."""
    out: dict[int, list[QdiscStats]] = {}
    for q in dump:
        out.setdefault(q.ifindex, []).append(q)
    return out
