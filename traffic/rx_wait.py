"""How long the frames that reached a host waited for its endpoint's process: the receive side of
the host's own lag (:mod:`traffic.pacing` measures the send side).

A real NIC handles a frame as it arrives. Here the frame waits in the raw socket's receive
queue until the endpoint's process has a core, and its ACK, its CNP, its delivery (and a
collective's next step) all come that much later; the switches' counterpart is ``bmv2_lag``.
The kernel stamps each frame as it arrives (``SIOCGSTAMPNS``, socket(7): the receive time of
the last frame read, on CLOCK_REALTIME), so the wait is read once per batch the loop takes,
after its first frame, the one that waited longest: one ioctl a wake-up, not one a frame.

Also here: the frames the kernel dropped at the socket (``PACKET_STATISTICS``, packet(7)).
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import struct
import time

SIOCGSTAMPNS = 0x8907  # linux/sockios.h: struct timespec of the last frame read
_TIMESPEC = struct.Struct("qq")
_EMPTY = bytes(_TIMESPEC.size)
SOL_PACKET = 263
PACKET_STATISTICS = 6


def arrival_time(sock: socket.socket) -> float | None:
    """When the kernel received the last frame read from ``sock`` (CLOCK_REALTIME seconds);
    None if it cannot say. The first call turns the socket's stamping on (it then stamps
    every frame it queues) and answers with the time of the call."""
    try:
        sec, nsec = _TIMESPEC.unpack(fcntl.ioctl(sock.fileno(), SIOCGSTAMPNS, _EMPTY))
    except (OSError, ValueError):  # ValueError: a closed socket
        return None
    return sec + nsec * 1e-9


class RxWaitMeter:
    """The longest a frame waited in the socket before the process read it, into the stats'
    ``rx_wait_max_s``."""

    __slots__ = ("stats",)

    def __init__(self, stats, sock: socket.socket | None = None) -> None:
        self.stats = stats
        stats.rx_wait_max_s = 0.0
        if sock is not None:
            arrival_time(sock)  # stamping on from now: the first frame's wait is then real

    def first(self, sock: socket.socket) -> None:
        """The first frame of a batch was just read from ``sock``: how long it waited."""
        at = arrival_time(sock)
        if at is not None:
            wait = time.time() - at
            if wait > self.stats.rx_wait_max_s:
                self.stats.rx_wait_max_s = wait


def socket_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped at the packet socket's receive buffer since the last call
    (``PACKET_STATISTICS``: reading it resets it); 0 if it cannot say."""
    with contextlib.suppress(OSError):
        _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        return drops
    return 0
