"""The agent's reads of the P4 program's registers, against a stand-in for BMv2's Thrift
client: what is asked of BMv2 for each sample."""

from __future__ import annotations

import pytest

from testbed.agent.registers import RegisterReader, merged, view_calls
from testbed.machine.netns import inside


class _Thrift:
    """BMv2's Thrift client, pipelined (Bmv2Thrift.send, receive): records each call; every
    register holds its cell's index plus one, or -2 for drift."""

    def __init__(self, refuse: bool = False) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.out: list[list[tuple[str, tuple]]] = []  # batches sent, not yet received
        self.sent = 0
        self.refuse = refuse
        self.socket = object()
        self.closed = False
        #: When BMv2's replies came after the ask, by the kernel's stamp (None: no stamp).
        self.answer_s: float | None = None

    def answered_after(self) -> float | None:
        return self.answer_s

    def bm_register_read(self, _ctx: int, name: str, cell: int) -> int:
        self.calls.append(("read", name, cell))
        return (1 << 32) - 2 if name == "drift" else cell + 1

    def bm_register_write(self, _ctx: int, name: str, cell: int, _value: int) -> None:
        self.calls.append(("write", name, cell))

    def send(self, calls: list[tuple[str, tuple]]) -> None:
        self.out.append(calls)
        self.sent += 1

    def receive(self, calls: list[tuple[str, tuple]]) -> list:
        assert self.out.pop(0) == calls  # the replies are those of the batch sent first
        if self.refuse:
            raise RuntimeError("InvalidRegisterOperation")
        return [getattr(self, name)(*args) for name, args in calls]

    def close(self) -> None:
        self.closed = True


def _reader(bm: _Thrift, clock=lambda: 0.0) -> RegisterReader:
    r = RegisterReader(9090, "leaf1", clock=clock)
    r.p4._client = bm  # type: ignore[assignment]
    return r


def test_the_reader_sends_a_batch_and_takes_its_replies_once_they_came() -> None:
    bm = _Thrift()
    r = _reader(bm)
    assert r.watch() is None  # nothing out: nothing to watch
    r.ask([(2, 3)])
    assert len(bm.out) == 1 and r.watch() is bm.socket
    assert r.take() == ({}, None)  # nothing came yet: the sample goes on without
    r.readable()
    assert r.watch() is None
    cell = 2 * 8 + 3
    assert r.take() == ({(2, 3): (-2, cell + 1, cell + 1, cell + 1)}, 1)
    assert r.take() == ({}, None)  # handed out once


def test_a_request_made_while_a_batch_is_out_waits_for_it_and_the_reads_merge() -> None:
    bm = _Thrift()
    r = _reader(bm)
    r.ask([(1, 3)])
    r.ask([(4, 3)])
    r.ask([(2, 3)])  # the latest replaces the one waiting
    assert len(bm.out) == 1
    r.readable()
    assert len(bm.out) == 1 and bm.out[0] == view_calls([(2, 3)])  # sent when the first came
    r.readable()
    views, _lag = r.take()
    assert set(views) == {(1, 3), (2, 3)}


def test_a_refused_batch_closes_the_connection_and_the_next_asks_on_another() -> None:
    bm = _Thrift(refuse=True)
    r = _reader(bm)
    r.ask([(2, 3)])
    r.readable()
    assert bm.closed and r.p4._client is None and r.take() == ({}, None)


def test_a_batch_never_answered_in_full_is_given_up() -> None:
    t = [0.0]
    bm = _Thrift()
    r = _reader(bm, clock=lambda: t[0])
    r.ask([(2, 3)])
    t[0] = RegisterReader.STALE_S / 2
    r.ask([(2, 3)])
    assert not bm.closed  # still waiting
    t[0] = RegisterReader.STALE_S + 1
    r.p4.connection = lambda: None  # type: ignore[method-assign]  # BMv2 gone meanwhile
    r.ask([(2, 3)])
    assert bm.closed and r.watch() is None


def test_merged_keeps_the_latest_view_and_each_maximum() -> None:
    old = ({(1, 3): (5, 6, 70, 80)}, 9)
    new = ({(1, 3): (1, 2, 30, 90), (2, 3): (0, 0, 0, 0)}, 4)
    assert merged(old, new) == ({(1, 3): (1, 2, 70, 90), (2, 3): (0, 0, 0, 0)}, 9)
    assert merged(({}, None), new) == new


def _read(r: RegisterReader, queues: list[tuple[int, int]]):
    r.ask(queues)
    r.readable()
    return r.take()


def test_an_idle_sample_asks_bmv2_its_hold_alone_and_times_the_answer() -> None:
    """No queue busy: no queue's views are read, but BMv2's hold is, every sample, so that
    how long BMv2 takes to answer times a stall even while nothing waits inside it."""
    bm = _Thrift()
    reader = _reader(bm)
    assert reader.answer_max_us() is None  # nothing asked yet
    views, lag = _read(reader, [])
    assert views == {} and lag == 1
    assert bm.calls == [("read", "bmv2_lag_max", 0), ("write", "bmv2_lag_max", 0)]
    assert bm.sent == 1
    assert reader.answer_max_us() == 0  # the stand-in's clock stands still
    assert reader.answer_max_us() is None  # each answer counted once


def test_a_switch_that_answers_late_is_timed_from_the_ask_to_the_answer() -> None:
    """A batch asked at 1.0 s whose answer came at 1.4 s (BMv2 stopped meanwhile) and was
    read at once waited 400 ms for BMv2; a later prompt answer does not hide it until the
    figure is taken."""
    now = [1.0]
    bm = _Thrift()
    reader = _reader(bm, clock=lambda: now[0])
    reader.ask([(2, 3)])
    now[0] = 1.4
    bm.answer_s = 0.4
    reader.readable()
    assert reader.late_max_us() == 0
    bm.answer_s = None  # no stamp: the whole wait is counted as BMv2's
    reader.ask([])
    now[0] = 1.402
    reader.readable()
    assert reader.answer_max_us() == 400_000
    reader.ask([])
    now[0] = 1.405
    reader.readable()
    assert reader.answer_max_us() == 3000


def test_an_answer_read_late_is_the_agents_stall_not_the_switchs() -> None:
    """BMv2 answered 300 us after the ask, by the kernel's stamp, and the agent's loop read it
    400 ms after the ask (it was writing a file meanwhile): BMv2's figure is 300 us, the
    agent's 399,700 us; each is taken once."""
    now = [1.0]
    bm = _Thrift()
    reader = _reader(bm, clock=lambda: now[0])
    reader.ask([(2, 3)])
    now[0] = 1.4
    bm.answer_s = 0.0003
    reader.readable()
    assert reader.answer_max_us() == 300
    assert reader.late_max_us() == 399_700
    assert reader.answer_max_us() is None and reader.late_max_us() is None


def test_a_busy_queue_is_read_its_maxima_cleared_and_bmv2s_hold_read_once() -> None:
    bm = _Thrift()
    views, lag = _read(_reader(bm), [(2, 3)])
    cell = 2 * 8 + 3
    assert views == {(2, 3): (-2, cell + 1, cell + 1, cell + 1)} and lag == 1
    assert [c for c in bm.calls if c[0] == "write"] == [
        ("write", "below_max", cell), ("write", "occupancy_max", cell),
        ("write", "bmv2_lag_max", 0)]
    assert bm.calls.count(("read", "bmv2_lag_max", 0)) == 1
    assert bm.sent == 1  # the whole sample leaves in one send


def test_several_queues_are_read_in_one_batch_each_with_its_own_cells() -> None:
    bm = _Thrift()
    views, _ = _read(_reader(bm), [(1, 3), (4, 3)])
    assert views == {(1, 3): (-2, 12, 12, 12), (4, 3): (-2, 36, 36, 36)}
    assert bm.sent == 1


@pytest.mark.bmv2
def test_the_reader_reads_and_clears_a_real_switchs_registers_without_waiting() -> None:
    """Against a running BMv2: ask() returns at once; the socket to watch reads as readable
    once the replies have come, each call's own; the maxima and BMv2's hold are cleared; and
    a failed call leaves the next sample a working connection."""
    import select

    from testbed.agent.thrift_batch import Bmv2Thrift
    from tests.dataplane import bmv2_harness

    def read(r: RegisterReader, queues: list[tuple[int, int]]):
        r.ask(queues)
        s = r.watch()
        assert s is not None
        ready, _, _ = select.select([s], [], [], 5.0)
        assert ready == [s]
        r.readable()
        assert r.watch() is None
        return r.take()

    with bmv2_harness(2) as h:
        ns = f"/run/netns/{h.ns}"  # where `ip netns` keeps it
        r = RegisterReader(h.switch.opts.thrift_port, "t", ns)
        cell = 2 * 8 + 3
        other = 1 * 8 + 3
        with inside(ns):
            bm = Bmv2Thrift(h.switch.opts.thrift_port)
        try:
            bm.batch([("bm_register_write", (0, name, c, v)) for name, c, v in [
                ("drift", cell, (1 << 32) - 5), ("held", cell, 7), ("below_max", cell, 100),
                ("occupancy_max", cell, 200), ("bmv2_lag_max", 0, 42),
                ("drift", other, 9), ("occupancy_max", other, 300)]])
            assert read(r, [(2, 3), (1, 3)]) == (
                {(2, 3): (-5, 7, 100, 200), (1, 3): (9, 0, 0, 300)}, 42)
            # the maxima were cleared; drift and held are the last resync's, kept
            assert read(r, [(2, 3), (1, 3)]) == (
                {(2, 3): (-5, 7, 0, 0), (1, 3): (9, 0, 0, 0)}, 0)

            # a cell past the registers fails its first read, with the batch's later replies
            # unread: the next sample must not take them for its own
            assert read(r, [(600, 3), (2, 3)]) == ({}, None)
            assert read(r, [(2, 3)]) == ({(2, 3): (-5, 7, 0, 0)}, 0)
        finally:
            bm.close()
            r.stop()


@pytest.mark.bmv2
def test_a_batch_waits_for_exactly_the_bytes_a_real_switch_replies() -> None:
    """The batch sleeps until its replies' size is queued (SO_RCVLOWAT): it is computed from
    the generated code's encoding, and must be what BMv2 really sends for a call that
    succeeds. Larger, every sample would wait out REPLIES_WAIT_S; smaller, it would wake
    early (and still read right)."""
    import fcntl
    import struct
    import termios
    import time

    from testbed.agent.thrift_batch import Bmv2Thrift, reply_bytes
    from tests.dataplane import bmv2_harness

    def queued(bm: Bmv2Thrift) -> int:
        raw = fcntl.ioctl(bm._socket.handle.fileno(), termios.FIONREAD, b"\0" * 4)
        return struct.unpack("i", raw)[0]

    with bmv2_harness(2) as h:
        with inside(f"/run/netns/{h.ns}"):
            bm = Bmv2Thrift(h.switch.opts.thrift_port)
        try:
            for name, args in [("bm_register_read", (0, "drift", 19)),
                               ("bm_register_write", (0, "below_max", 19, 0))]:
                getattr(bm._client, f"send_{name}")(*args)
                deadline = time.monotonic() + 5
                while queued(bm) < reply_bytes(name) and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(0.05)  # anything more would have come by now
                assert queued(bm) == reply_bytes(name), name
                getattr(bm._client, f"recv_{name}")()
            # a call that fails replies with more than its success would: the wait is over
            # at once, and the error comes back
            with pytest.raises(Exception, match="InvalidRegisterOperation|Invalid"):
                bm.batch([("bm_register_read", (0, "drift", 99999)),
                          ("bm_register_read", (0, "drift", 19))])
        finally:
            bm.close()


def test_the_kernels_stamp_times_bmv2s_answer_however_late_it_is_read() -> None:
    """Over real loopback TCP, against a stand-in server that answers 50 ms after the ask:
    read 300 ms after the ask, the replies still say when they came (SO_TIMESTAMPNS), to
    within the server's own send call, not when they were read."""
    import contextlib
    import socket
    import threading
    import time

    pytest.importorskip("bm_runtime.standard", reason="needs BMv2's Thrift module (bm_runtime)")
    from testbed.agent.thrift_batch import Bmv2Thrift, reply_bytes

    calls = [("bm_register_read", (0, "bmv2_lag_max", 0)),
             ("bm_register_write", (0, "bmv2_lag_max", 0, 0))]
    size = sum(reply_bytes(name) for name, _ in calls)
    sent: list[float] = []
    with socket.create_server(("127.0.0.1", 0)) as srv:
        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(4096)
                time.sleep(0.05)
                sent.append(time.clock_gettime(time.CLOCK_REALTIME))
                conn.sendall(b"\0" * size)
                sent.append(time.clock_gettime(time.CLOCK_REALTIME))
                with contextlib.suppress(ConnectionResetError):  # replies left unread
                    conn.recv(1)  # until the client closes

        server = threading.Thread(target=serve)
        server.start()
        bm = Bmv2Thrift(srv.getsockname()[1])
        try:
            assert bm.answered_after() is None  # nothing asked, nothing there
            bm.send(calls)
            time.sleep(0.3)  # the agent's loop busy elsewhere
            answered = bm.answered_after()
            read = time.clock_gettime(time.CLOCK_REALTIME) - bm._sent_at
        finally:
            bm.close()
            server.join()
    assert answered is not None and read >= 0.3
    before, after = (t - bm._sent_at for t in sent)
    assert before <= answered <= after, (before, answered, after)
