"""The P4 program's registers the switch agent reads and writes, over BMv2's Thrift API inside
the switch's namespace (see the registers in p4/lossless.p4)."""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from testbed.config.constants import port_tc_cell
from testbed.machine.netns import inside

if TYPE_CHECKING:  # Thrift is imported where a switch is served
    from testbed.agent.thrift_batch import Bmv2Thrift, Call

#: A lossless queue as the program saw it at the last resync: drift, held, the most the
#: program's occupancy stood below the resync's since the last read, the largest occupancy.
QueueView = tuple[int, int, int, int]


def _signed(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def view_calls(queues: list[tuple[int, int]]) -> list[Call]:
    """The calls that read the P4 program's view at the last resync of each given lossless
    (port, class), the maxima read and cleared, and BMv2's longest hold of a packet since the
    last read (read and cleared), one cell at a time (the whole 4096-cell array costs 12 ms to
    decode). Each read also costs BMv2 a turn of its Thrift thread, so the caller names only
    the queues that were busy; with none busy no lossless packet went through since the last
    read, so BMv2's hold is not read either (an idle agent made two calls a sample for nothing).

    Each maximum is cleared by the call right after its read, whatever it read: in one batch
    the value is not known when the clear is sent, and BMv2 serves the two back to back, so a
    packet raising the maximum between them is no likelier than between a read and a clear
    sent one round trip later."""
    calls: list[Call] = []
    for n, tc in queues:
        cell = port_tc_cell(n, tc)
        calls += [("bm_register_read", (0, "drift", cell)),
                  ("bm_register_read", (0, "held", cell)),
                  ("bm_register_read", (0, "below_max", cell)),
                  ("bm_register_write", (0, "below_max", cell, 0)),
                  ("bm_register_read", (0, "occupancy_max", cell)),
                  ("bm_register_write", (0, "occupancy_max", cell, 0))]
    return calls + [("bm_register_read", (0, "bmv2_lag_max", 0)),
                    ("bm_register_write", (0, "bmv2_lag_max", 0, 0))]


def views_of(queues: list[tuple[int, int]], got: list
             ) -> tuple[dict[tuple[int, int], QueueView], int | None]:
    """What :func:`view_calls`' replies say: each queue's view, and BMv2's hold."""
    out = {}
    for i, key in enumerate(queues):
        d, held, below, _, peak, _ = got[6 * i:6 * i + 6]
        out[key] = (_signed(d), _signed(held), below, peak)
    return out, got[-2]


def merged(prev: tuple[dict[tuple[int, int], QueueView], int | None],
           new: tuple[dict[tuple[int, int], QueueView], int | None]
           ) -> tuple[dict[tuple[int, int], QueueView], int | None]:
    """A read not yet taken, merged with a newer one: the latest drift and held, each maximum
    kept."""
    views, lag = dict(prev[0]), prev[1]
    for key, (d, held, below, peak) in new[0].items():
        if key in views:
            _d, _h, pb, pp = views[key]
            below, peak = max(below, pb), max(peak, pp)
        views[key] = (d, held, below, peak)
    if new[1] is not None and (lag is None or new[1] > lag):
        lag = new[1]
    return views, lag


class P4Registers:
    """BMv2's registers over Thrift (connected on first use; None without a port)."""

    def __init__(self, thrift_port: int | None, switch: str, netns: str | None = None) -> None:
        self.thrift_port = thrift_port
        self.switch = switch
        self.netns = netns  # the switch's namespace, where BMv2's Thrift port is
        self._client: Bmv2Thrift | None = None

    def connection(self) -> Bmv2Thrift | None:
        """BMv2's Thrift connection inside this namespace (None without a port)."""
        if self._client is None and self.thrift_port:
            from testbed.agent.thrift_batch import Bmv2Thrift

            with inside(self.netns):
                self._client = Bmv2Thrift(self.thrift_port)
        return self._client

    def drop(self) -> None:
        """After a failed call: the connection may hold replies not read; the next call opens
        another."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        self._client = None

    def set_pfc_ignored(self, port: int, tc: int, ignore: bool) -> int | None:
        """Tell the P4 program whether the watchdog has (port, class) ignore PFC: while it
        does, the phantom must keep draining, or the program would XOFF upstream on the storm's
        account and spread it (secondary storms). Returns the bytes the program has admitted
        to the queue so far (modulo 2^32), read in the same round trip; None if BMv2 did not
        answer."""
        idx = port_tc_cell(port, tc)
        calls: list[Call] = [("bm_register_write", (0, "pfc_ignored", idx, int(ignore)))]
        if ignore:
            calls.append(("bm_register_write", (0, "paused_until", idx, 0)))
        calls.append(("bm_register_read", (0, "admitted", idx)))
        try:
            bm = self.connection()
            if bm is None:
                return None
            return bm.batch(calls)[-1]
        except Exception as exc:  # BMv2 gone: nothing left to tell
            self.drop()
            print(f"{self.switch}: pfc_ignored[{idx}] not written: {exc}", file=sys.stderr)
            return None


class RegisterReader:
    """Reads the queue views without waiting for BMv2: :meth:`ask` sends a sample's batch and
    returns; the agent's loop watches :meth:`watch`'s socket, which reads as readable once
    every reply has come (its low-water mark is their size, :meth:`Bmv2Thrift.send`), and
    calls :meth:`readable`; :meth:`take` hands out what came, one sample later.

    Why not wait, or a thread: a Thrift read waits for BMv2's Thrift thread, which a busy
    switch serves late, and done in the agent's loop a sample's reads held the PFC pauses it
    must apply for up to a quarter of a second on saturated cores. A thread per switch waited
    instead, but it woke once a reply, and in one process serving every switch its Python
    held the interpreter's lock while the loop had a PFC frame to apply.

    Each answer's wait is split in two by the kernel's arrival stamp on the replies
    (:meth:`Bmv2Thrift.answered_after`): BMv2's part, ask to arrival (``bmv2_stall``), and the
    loop's, arrival to read (``agent_stall``). As one figure, a loop that stood still read as
    every switch of the fabric stalling at once."""

    #: A batch whose replies have not all come after this long is given up: the connection
    #: is closed and the next sample asks again on another.
    STALE_S = 5.0

    def __init__(self, thrift_port: int | None, switch: str, netns: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.p4 = P4Registers(thrift_port, switch, netns)
        self.clock = clock
        self._asked: tuple[list[tuple[int, int]], list[Call], float] | None = None
        self._want: list[tuple[int, int]] | None = None  # asked while a batch was out
        self._result: tuple[dict[tuple[int, int], QueueView], int | None] = ({}, None)
        #: The longest BMv2 took to answer a batch, among those answered since the last
        #: :meth:`answer_max_us`: a switch that stalls answers late.
        self._answer_max_s: float | None = None
        #: The longest a batch's answer waited for this agent's loop to read it, since the
        #: last :meth:`late_max_us`: an agent busy elsewhere, or stalled, reads late.
        self._late_max_s: float | None = None

    def ask(self, queues: Iterable[tuple[int, int]]) -> None:
        """Read these queues' views: now, or once the batch still out has come back (the
        latest request replaces one waiting)."""
        queues = list(queues)
        if self._asked is not None and self.clock() - self._asked[2] > self.STALE_S:
            self.p4.drop()  # BMv2 never answered in full: start over on a new connection
            self._asked = None
        if self._asked is not None:
            self._want = queues
            return
        self._send(queues)

    def _send(self, queues: list[tuple[int, int]]) -> None:
        if not self.p4.thrift_port:
            return
        calls = view_calls(queues)  # no queue: BMv2's hold alone, which times its answer
        try:
            bm = self.p4.connection()
            if bm is None:
                return
            bm.send(calls)
        except Exception:  # BMv2 gone or no Thrift module: the columns stay empty
            self.p4.drop()
            return
        self._asked = (queues, calls, self.clock())

    def watch(self) -> socket.socket | None:
        """The socket to watch while a batch is out (None otherwise): readable once all its
        replies have come, or the connection closed."""
        client = self.p4._client
        return client.socket if client is not None and self._asked is not None else None

    def readable(self) -> None:
        """The batch's replies have all come: read them, keep the views for :meth:`take`,
        and send a request that waited."""
        if self._asked is None:
            return
        queues, calls, when = self._asked
        self._asked = None
        answered = None
        try:
            bm = self.p4.connection()
            if bm is not None:
                answered = bm.answered_after()  # before reading: the kernel's stamp on them
            got = bm.receive(calls) if bm is not None else None
        except Exception:  # BMv2 gone, or a call refused: the next sample opens another
            self.p4.drop()
            got = None
        if got is not None:
            self._result = merged(self._result, views_of(queues, got))
            waited = self.clock() - when
            # Split by the kernel's stamp: BMv2's part, then the loop's. Without a stamp the
            # whole wait is counted as BMv2's, which can only overstate a stall.
            bmv2 = min(waited, max(answered, 0.0)) if answered is not None else waited
            self._answer_max_s = max(self._answer_max_s or 0.0, bmv2)
            self._late_max_s = max(self._late_max_s or 0.0, waited - bmv2)
        want, self._want = self._want, None
        if want:
            self._send(want)

    def take(self) -> tuple[dict[tuple[int, int], QueueView], int | None]:
        """The views the reads that came found (each handed out once)."""
        result, self._result = self._result, ({}, None)
        return result

    def answer_max_us(self) -> int | None:
        """The longest BMv2 took to answer a batch since the last call, by the kernel's stamp
        on the replies (None: none came)."""
        waited, self._answer_max_s = self._answer_max_s, None
        return None if waited is None else round(waited * 1e6)

    def late_max_us(self) -> int | None:
        """The longest an answer waited for this agent's loop to read it since the last call
        (None: none came)."""
        late, self._late_max_s = self._late_max_s, None
        return None if late is None else round(late * 1e6)

    def stop(self) -> None:
        self.p4.drop()
        self._asked = None
