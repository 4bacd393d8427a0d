"""BMv2's Thrift API ("standard" service) with calls sent as one batch.

Why not the generated client's calls one by one: each one is a send() and a recv() on loopback
TCP, and the agent made six per busy lossless queue per sample. Measured on one BMv2 with four
queues' worth (24 calls and BMv2's hold): 4.6 ms of the agent's CPU and 10.7 ms of wall time a
sample one call at a time, 0.7 ms and 1.5 ms as one batch. Almost all of it was the kernel's
loopback work per call, not Python's.

A batch is Thrift pipelining with the generated client's own halves: every request's
``send_<call>`` is written into the transport's buffer, the buffer leaves in one send(), then
every ``recv_<call>`` reads its reply in order. BMv2 serves a connection on one thread that
reads the next request from the stream after answering the last (TThreadedServer), so the
replies come back in the order the requests went. Imported only where Thrift is installed.

The replies are read once they are all there. BMv2 writes each reply on its own, so reading
them as they came woke the agent's register thread once a reply: a batch of 26 calls cost
750 us of its CPU, most of it those wake-ups. The socket's receive low-water mark
(SO_RCVLOWAT, socket(7)) is set to the size the replies have when every call succeeds, which
the generated code's own encoding gives: the socket reads as readable only once that many
bytes are there, to one poll() (:meth:`Bmv2Thrift.batch`) or to the agent's loop, which goes on
meanwhile (:class:`testbed.agent.registers.RegisterReader`). A reply that is an error can
only be as long or longer (a call's exception is a field more than its result), so the wait
never outlasts the replies; if it did, ``batch`` ends it after :data:`REPLIES_WAIT_S` and the
loop gives the batch up after ``RegisterReader.STALE_S``. The protocol is Thrift's
C-accelerated binary protocol (fastbinary), the same bytes as the pure Python one.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

from bm_runtime.standard import Standard
from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
from thrift.Thrift import TMessageType
from thrift.transport import TSocket, TTransport

#: One call of the "standard" service: its name (``bm_register_read``) and arguments.
Call = tuple[str, tuple[Any, ...]]
#: How long a batch waits for all its replies at once before it reads them as they come.
REPLIES_WAIT_S = 1.0
#: SO_TIMESTAMPNS (socket(7); SO_TIMESTAMPNS_OLD in the kernel's asm-generic/socket.h, which
#: x86-64 and arm64 use; Python's socket module does not name it): the kernel stamps every
#: segment it receives with the time it came (CLOCK_REALTIME), and recvmsg() hands out the
#: stamp of the last one it read, also when it only peeks (TCP, tcp_recvmsg).
SO_TIMESTAMPNS = 35
_STAMP = struct.Struct("qq")  # struct timespec: seconds, nanoseconds


@cache
def reply_bytes(name: str) -> int:
    """The bytes of ``name``'s reply when the call succeeds, as the generated code encodes it
    (a value of the result's width, so as long as any); BMv2's multiplexed server names its
    reply after the call alone, without the service."""
    buf = TTransport.TMemoryBuffer()
    proto = TBinaryProtocol.TBinaryProtocol(buf)
    proto.writeMessageBegin(name, TMessageType.REPLY, 0)
    result = getattr(Standard, f"{name}_result")()
    if "success" in result.__dict__:
        result.success = 0
    result.write(proto)
    proto.writeMessageEnd()
    return len(buf.getvalue())


class _CorkedTransport(TTransport.TBufferedTransport):
    """Buffers what the generated ``send_<call>`` flushes while ``corked``."""

    corked = False

    def flush(self) -> None:
        if not self.corked:
            super().flush()


class Bmv2Thrift:
    """A connection to one BMv2's Thrift port (opened at once, in the caller's namespace)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self._socket = TSocket.TSocket(host, port)
        self._transport = _CorkedTransport(self._socket)
        proto = TMultiplexedProtocol.TMultiplexedProtocol(
            TBinaryProtocol.TBinaryProtocolAccelerated(self._transport), "standard")
        self._client = Standard.Client(proto)
        self._transport.open()
        self._poll = select.poll()
        self._poll.register(self._socket.handle, select.POLLIN)
        self.socket.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._sent_at = 0.0  # CLOCK_REALTIME, the stamps' clock, when the last batch left
        self._reply_size = 0

    @property
    def socket(self) -> socket.socket:
        """The connection, for a loop that waits for its replies (see :meth:`send`)."""
        return self._socket.handle

    def send(self, calls: Sequence[Call]) -> None:
        """Send every call in one send(), and set the socket's low-water mark to the size of
        their replies: it reads as readable (poll, epoll) once every reply has come. Then
        :meth:`receive` reads them, the same calls in the same order."""
        self._transport.corked = True
        try:
            for name, args in calls:
                getattr(self._client, f"send_{name}")(*args)
        finally:
            self._transport.corked = False
        self._sent_at = time.clock_gettime(time.CLOCK_REALTIME)
        self._transport.flush()
        size = sum(reply_bytes(name) for name, _ in calls)
        self._reply_size = size
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)

    def answered_after(self) -> float | None:
        """How long after :meth:`send` the replies there now came, by the kernel's stamp on
        the last of them: BMv2's own answer time, however late its caller gets to read them
        (a loop busy elsewhere, or a process that waited for a core). None when no reply is
        there or it carries no stamp."""
        try:
            _data, anc, _flags, _addr = self.socket.recvmsg(
                max(1, self._reply_size), socket.CMSG_SPACE(_STAMP.size),
                socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return None
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= _STAMP.size:
                sec, ns = _STAMP.unpack_from(raw)
                return sec + ns / 1e9 - self._sent_at
        return None

    def receive(self, calls: Sequence[Call]) -> list[Any]:
        """Every reply of the calls :meth:`send` sent: each call's result, in order. A call
        that fails raises its error (e.g. ``InvalidRegisterOperation``) with the later
        replies unread, so the caller closes this connection and opens another."""
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
        return [getattr(self._client, f"recv_{name}")() for name, _ in calls]

    def batch(self, calls: Sequence[Call]) -> list[Any]:
        """Send every call, wait until every reply has come (at most :data:`REPLIES_WAIT_S`,
        then they are read as they come), and return each call's result, in order; a failed
        call raises, as :meth:`receive` says."""
        self.send(calls)
        self._poll.poll(REPLIES_WAIT_S * 1000)
        return self.receive(calls)

    def close(self) -> None:
        self._transport.close()
