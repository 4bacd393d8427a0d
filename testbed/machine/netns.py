"""Entering a switch's network namespace for a moment, on the calling thread.

One agent process serves every switch: each switch's sockets (PFC, tick, netlink, Thrift) are
made while the thread is inside that switch's namespace, and keep it after the thread leaves
(setns(2): a socket belongs to the namespace it was created in). A port's gates opened for a
test from outside the port's namespace make their netlink socket the same way. Python 3.11
has no os.setns, hence libc's.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000  # linux/sched.h

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextmanager
def inside(netns: str | None) -> Iterator[None]:
    """Run the block in the network namespace at path ``netns`` (e.g. /proc/PID/ns/net; None:
    where the thread already is), then return the thread to the namespace it was in."""
    if not netns:
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(netns, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)
