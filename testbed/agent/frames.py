"""The frames the switch agent reads and sends: PFC frames on the switch's ports (a raw socket
with kernel timestamps) and its tick frames into the switch (p4/headers.p4's tick_h)."""

from __future__ import annotations

import ctypes
import socket
import struct
import time
from collections.abc import Iterator

from testbed.config.constants import ETH_P_TICK, TICK_SENT_UNKNOWN
from traffic.packets import PFC_BODY, mac_bytes
from traffic.wire import (
    ETH_HEADER_LEN,
    ETH_P_ALL,
    ETH_P_CREDIT,
    ETH_P_MAC_CONTROL,
    NUM_TCS,
    PACKET_OUTGOING,
)

SO_ATTACH_FILTER = 26
#: Classic BPF: keep a frame whose EtherType (offset 12) is 0x8808 (PFC) or 0x88B5 (mode
#: ib-credit's flow control packets, traffic.credits), drop the rest.
PFC_BPF = [(0x28, 0, 0, 12), (0x15, 1, 0, ETH_P_MAC_CONTROL), (0x15, 0, 1, ETH_P_CREDIT),
           (0x06, 0, 0, 0xFFFF), (0x06, 0, 0, 0)]
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not name it
#: A tick's body after the EtherType (tick_h): port, class, backlog, sent.
TICK_BODY = struct.Struct("!HBII")
TICK_DST = b"\x02\x00\x00\x00\x00\xff"


def tick_frame(src_mac: str, port: int, tc: int, backlog: int,
               released: int | None = None) -> bytes:
    """The agent's tick for (port, class): the kernel's backlog, and the bytes the kernel has
    let go of (sent plus dropped) since the port was made, modulo 2^32 (None: unknown, the
    program then takes the backlog alone)."""
    src = mac_bytes(src_mac)
    if released is None:
        sent = TICK_SENT_UNKNOWN
    else:  # all ones is the one value that means unknown: off by a byte is safe
        sent = released & 0xFFFFFFFF
        if sent == TICK_SENT_UNKNOWN:
            sent -= 1
    body = TICK_BODY.pack(port, tc, min(backlog, 0xFFFFFFFF), sent)
    f = TICK_DST + src + struct.pack("!H", ETH_P_TICK) + body
    return f + b"\x00" * (60 - len(f))


#: Where a PFC frame our switch sends says on whose account (p4/headers.p4's pfc_cause_h):
#: after the Ethernet header and the opcode, class vector and eight pause times.
PFC_CAUSE = struct.Struct("!H")
PFC_CAUSE_OFFSET = ETH_HEADER_LEN + PFC_BODY.size


def pfc_cause(frame: bytes) -> tuple[int, int] | None:
    """The (port, class) of the egress queue on whose account our switch sent this PFC frame,
    or None for a frame too short to say. Only frames our own P4 program made carry it: a
    neighbour's pad bytes mean nothing."""
    if len(frame) < PFC_CAUSE_OFFSET + PFC_CAUSE.size:
        return None
    (cell,) = PFC_CAUSE.unpack_from(frame, PFC_CAUSE_OFFSET)
    return divmod(cell, NUM_TCS)


def pfc_socket(ifname: str) -> socket.socket:
    """A socket that sees every PFC frame on the port, both ways, with kernel timestamps.

    Outgoing frames matter: a PFC frame our own switch sends says a queue of ours crossed XOFF,
    which is when the ticks are needed (see the agent's tick()). Linux hands outgoing frames
    only to ETH_P_ALL sockets, not to one bound to 0x8808, so the socket takes everything and a
    BPF filter keeps only MAC control frames in the kernel.

    The socket is opened with no protocol and given ETH_P_ALL at bind: opened with it, it would
    take every port's frames until bound, and bind would have to unhook it from them, which
    waits for the kernel's RCU grace period (8-37 ms a port, measured; packet(7) sockets).
    """
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    prog = b"".join(struct.pack("HBBI", *ins) for ins in PFC_BPF)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HL", len(PFC_BPF), ctypes.addressof(buf))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    s.bind((ifname, ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return s


def receive(sock: socket.socket) -> Iterator[tuple[bytes, float, bool]]:
    """Every frame waiting on a non-blocking :func:`pfc_socket`, one at a time: the frame,
    when the kernel received it (time.time()'s clock), and whether the switch sent it."""
    while True:
        try:
            data, anc, _flags, addr = sock.recvmsg(2048, 64)
        except BlockingIOError:
            return
        except OSError:  # the port went down: nothing to read until it is up
            return
        t_kernel = time.time()
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", value[:16])
                t_kernel = sec + nsec / 1e9
        yield data, t_kernel, addr[2] == PACKET_OUTGOING
