"""The P4 program's registers the switch agent reads and writes, over BMv2's Thrift API inside
the switch's namespace (see the registers in p4/lossless.p4)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from testbed.constants import port_tc_cell
from testbed.netns import inside

if TYPE_CHECKING:  # Thrift is imported where a switch is served
    from testbed.agent.thrift_batch import Bmv2Thrift, Call

#: A lossless queue as the program saw it at the last resync: drift, held, the most the
#: program's occupancy stood below the resync's since the last read, the largest occupancy.
QueueView = tuple[int, int, int, int]


def _signed(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


class P4Registers:
    """BMv2's registers over Thrift (connected on first use; None without a port)."""

    def __init__(self, thrift_port: int | None, switch: str, netns: str | None = None) -> None:
        self.thrift_port = thrift_port
        self.switch = switch
        self.netns = netns  # the switch's namespace, where BMv2's Thrift port is
        self._client: Bmv2Thrift | None = None

    def _bm(self) -> Bmv2Thrift | None:
        """BMv2's Thrift connection inside this namespace (None without a port)."""
        if self._client is None and self.thrift_port:
            from testbed.agent.thrift_batch import Bmv2Thrift

            with inside(self.netns):
                self._client = Bmv2Thrift(self.thrift_port)
        return self._client

    def _drop(self) -> None:
        """After a failed call: the connection may hold replies not read; the next call opens
        another."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        self._client = None

    def queue_views(self, queues: list[tuple[int, int]]
                    ) -> tuple[dict[tuple[int, int], QueueView], int | None]:
        """The P4 program's view at the last resync of each given lossless (port, class) (the
        maxima read and cleared) and BMv2's longest hold of a packet since the last call (read
        and cleared), in one batch of Thrift calls, one cell at a time (the whole 4096-cell
        array costs 12 ms to decode). Empty, and None, without Thrift. Each read also costs
        BMv2 a turn of its Thrift thread, so the caller names only the queues that were busy.
        With none busy no lossless packet went through since the last call, so BMv2's hold is
        not read either: an idle agent made two calls a sample for nothing.

        Each maximum is cleared by the call right after its read, whatever it read: in one
        batch the value is not known when the clear is sent, and BMv2 serves the two back to
        back, so a packet raising the maximum between them is no likelier than between a read
        and a clear sent one round trip later."""
        if not self.thrift_port or not queues:
            return {}, None
        calls: list[Call] = []
        for n, tc in queues:
            cell = port_tc_cell(n, tc)
            calls += [("bm_register_read", (0, "drift", cell)),
                      ("bm_register_read", (0, "held", cell)),
                      ("bm_register_read", (0, "below_max", cell)),
                      ("bm_register_write", (0, "below_max", cell, 0)),
                      ("bm_register_read", (0, "occupancy_max", cell)),
                      ("bm_register_write", (0, "occupancy_max", cell, 0))]
        calls += [("bm_register_read", (0, "bmv2_lag_max", 0)),
                  ("bm_register_write", (0, "bmv2_lag_max", 0, 0))]
        try:
            bm = self._bm()
            if bm is None:
                return {}, None
            got = bm.batch(calls)
        except Exception:  # BMv2 gone or no Thrift module: the columns stay empty
            self._drop()
            return {}, None
        out = {}
        for i, key in enumerate(queues):
            d, held, below, _, peak, _ = got[6 * i:6 * i + 6]
            out[key] = (_signed(d), _signed(held), below, peak)
        return out, got[-2]

    def set_pfc_ignored(self, port: int, tc: int, ignore: bool) -> None:
        """Tell the P4 program whether the watchdog has (port, class) ignore PFC: while it
        does, the phantom must keep draining, or the program would XOFF upstream on the storm's
        account and spread it (secondary storms)."""
        idx = port_tc_cell(port, tc)
        calls: list[Call] = [("bm_register_write", (0, "pfc_ignored", idx, int(ignore)))]
        if ignore:
            calls.append(("bm_register_write", (0, "paused_until", idx, 0)))
        try:
            bm = self._bm()
            if bm is None:
                return
            bm.batch(calls)
        except Exception as exc:  # BMv2 gone: nothing left to tell
            self._drop()
            print(f"{self.switch}: pfc_ignored[{idx}] not written: {exc}", file=sys.stderr)


class RegisterReader(threading.Thread):
    """Reads the queue views on a thread of its own, with a Thrift connection of its own.

    A Thrift read waits for BMv2's Thrift thread, which a busy switch serves late: done in the
    agent's loop, a sample's reads held the loop (and so the PFC pauses it must apply) for up
    to a quarter of a second on saturated cores. Here the loop asks for the reads of the busy
    queues and takes what the previous request returned, one sample later."""

    def __init__(self, thrift_port: int | None, switch: str, netns: str | None = None) -> None:
        super().__init__(daemon=True, name=f"registers:{switch}")
        self.p4 = P4Registers(thrift_port, switch, netns)
        self._cond = threading.Condition()
        self._want: list[tuple[int, int]] | None = None
        self._result: tuple[dict[tuple[int, int], QueueView], int | None] = ({}, None)
        self._stop = False

    def ask(self, queues: Iterable[tuple[int, int]]) -> None:
        with self._cond:
            self._want = list(queues)
            self._cond.notify()

    def take(self) -> tuple[dict[tuple[int, int], QueueView], int | None]:
        """The views the last completed read found (each handed out once)."""
        with self._cond:
            result, self._result = self._result, ({}, None)
        return result

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()

    def run(self) -> None:
        while True:
            with self._cond:
                while self._want is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                want, self._want = self._want, None
            views, lag = self.p4.queue_views(want)
            with self._cond:
                prev, prev_lag = self._result
                # a read not yet taken is merged: the latest drift and held, each maximum kept
                for key, (d, held, below, peak) in views.items():
                    if key in prev:
                        _d, _h, pb, pp = prev[key]
                        views[key] = (d, held, max(below, pb), max(peak, pp))
                prev.update(views)
                if prev_lag is not None and (lag is None or prev_lag > lag):
                    lag = prev_lag
                self._result = (prev, lag)
