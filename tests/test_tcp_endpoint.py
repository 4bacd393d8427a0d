"""The TCP endpoint's parts over the kernel's own TCP on the loopback (no root): a sender's
messages framed and completed once acknowledged, a receiver counting whole messages whatever
the reads cut, and a chain between them."""

from __future__ import annotations

import select
import socket
import time

from traffic.chain import Chain
from traffic.tcp_endpoint import WORD, TcpReceiver, TcpSender


def test_a_receiver_counts_whole_messages_across_any_cut() -> None:
    stream = WORD.pack(5) + b"abcde" + WORD.pack(3) + b"xyz" + WORD.pack(70000) + bytes(70000)
    for cut in (1, 2, 3, 7, 4096):
        r = TcpReceiver()
        done = sum(r.take(memoryview(stream[i:i + cut])) for i in range(0, len(stream), cut))
        assert (done, r.stats.messages, r.stats.bytes) == (3, 3, 70008), cut


def _pair() -> tuple[socket.socket, socket.socket]:
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    a = socket.create_connection(lst.getsockname())
    b, _ = lst.accept()
    lst.close()
    a.setblocking(False)
    return a, b


def test_a_sender_frames_its_messages_and_completes_them_once_acknowledged() -> None:
    a, b = _pair()
    s = TcpSender(a, WORD.pack(0x8001))
    for size in (1000, 200_000):
        s.post("write", size, 0.0)
    got = bytearray()
    deadline = time.monotonic() + 10
    while (s.pending or s.unacked) and time.monotonic() < deadline:
        s.write()
        if select.select([b], [], [], 0.01)[0]:
            got += b.recv(1 << 20)
        s.poll(time.monotonic())
    assert not s.pending and not s.unacked and s.idle
    assert [m.size for m in s.completed] == [1000, 200_000]
    assert s.stats.messages_completed == 2 and s.stats.bytes_acked == 201_000
    while len(got) < 4 + 8 + 201_000:
        got += b.recv(1 << 20)
    assert WORD.unpack(got[:4])[0] == 0x8001  # the connection's first word: the responder
    r = TcpReceiver()
    assert r.take(memoryview(bytes(got[4:]))) == 2
    a.close()
    b.close()


def test_a_chain_over_tcp_posts_each_step_once_the_previous_arrived() -> None:
    a, b = _pair()
    s = TcpSender(a, b"")
    gate = TcpReceiver()
    chain = Chain(s, "write", 100, total=3, gates=[gate])  # type: ignore[arg-type]
    assert chain.release(0.0) == 1
    gate.take(memoryview(WORD.pack(100) + bytes(100)))
    assert chain.release(0.1) == 1 and chain.posted == 2
    a.close()
    b.close()
