"""The agent loop's watch on each switch's register reads (testbed.agent.switch._watch_reads):
a real epoll and real sockets, no switch. A connection is watched only while a batch is out,
and a closed one's number, taken by another switch's new connection, stays that switch's."""

from __future__ import annotations

import select
import socket
from types import SimpleNamespace

from testbed.agent.switch import _watch_reads


def _agent(sock: socket.socket | None) -> SimpleNamespace:
    return SimpleNamespace(registers=SimpleNamespace(watch=lambda: sock))


def _readable(ep: select.epoll) -> set[int]:
    return {fd for fd, _ in ep.poll(0)}


class _Loop:
    """What run_agents keeps: its epoll, each fd's owner, each switch's watched connection."""

    def __init__(self, ep: select.epoll) -> None:
        self.ep, self.owner, self.watched = ep, {}, {}

    def watch(self, i: int, agent: SimpleNamespace) -> None:
        _watch_reads(self.ep, self.owner, self.watched, i, agent)


def test_a_connection_is_watched_while_a_batch_is_out_and_only_then() -> None:
    a_end, bmv2_end = socket.socketpair()
    with select.epoll() as ep:
        loop = _Loop(ep)
        agent = _agent(a_end)
        loop.watch(0, agent)
        assert loop.owner == {a_end.fileno(): (agent, None)}
        bmv2_end.send(b"replies")
        assert _readable(ep) == {a_end.fileno()}
        loop.watch(0, agent)  # the same batch: nothing changes
        agent.registers.watch = lambda: None  # the replies were read
        loop.watch(0, agent)
        assert loop.owner == {} and loop.watched == {}
        assert _readable(ep) == set()  # unread bytes no longer wake the loop
    a_end.close()
    bmv2_end.close()


def test_a_closed_connections_number_reused_by_another_switch_stays_that_switchs() -> None:
    a_old, peer_a = socket.socketpair()
    with select.epoll() as ep:
        loop = _Loop(ep)
        a = _agent(a_old)
        loop.watch(0, a)
        fd = a_old.fileno()
        a_old.close()  # switch a's connection failed (epoll drops it on close)
        b_new = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # takes the lowest free number
        assert b_new.fileno() == fd
        b = _agent(b_new)
        loop.watch(1, b)  # switch b watches its new connection
        a.registers.watch = lambda: None
        loop.watch(0, a)  # switch a forgets its closed one
        assert loop.owner == {fd: (b, None)} and loop.watched == {1: (b_new, fd)}
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        b_new.connect(lst.getsockname())
        conn, _ = lst.accept()
        conn.send(b"replies")
        assert fd in {f for f, _ in ep.poll(1.0)}  # still watched for switch b
        conn.close()
        lst.close()
    b_new.close()
    peer_a.close()
