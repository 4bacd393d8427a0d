"""The watchdog's actions as the switch agent carries them out, on stand-ins for the port's
gates and the P4 program's registers (the real ones: tests/test_agent.py, tests/test_ports.py)."""

from __future__ import annotations

from types import SimpleNamespace

from testbed.agent.pfcwd import PfcWatchdog, StormRestored
from testbed.agent.watchdog import WatchdogMixin
from testbed.config.models import PfcWatchdogConfig
from testbed.machine.ports import ClassStats


class Gates:
    def __init__(self, backlog: int) -> None:
        self.calls: list[tuple] = []
        self.backlog = backlog

    def restore(self, tc: int) -> None:
        self.calls.append(("restore", tc))

    def stats(self) -> dict[int, ClassStats]:
        return {3: ClassStats(self.backlog, 1, 300, 1000, 10, None)}

    def rebase(self, tc: int, released: int) -> None:
        self.calls.append(("rebase", tc, released))


class Registers:
    def __init__(self, admitted: int | None) -> None:
        self.admitted = admitted
        self.calls: list[tuple] = []

    def set_pfc_ignored(self, port: int, tc: int, ignore: bool) -> int | None:
        self.calls.append((port, tc, ignore))
        return self.admitted


def restore(action: str, admitted: int | None, backlog: int = 4154,
            events: list | None = None):
    """Restore (2, 3) after a storm whose last poll counted 290 dropped packets; the gates'
    drop counter reads 300 as the gate comes off."""
    gates, p4 = Gates(backlog), Registers(admitted)
    wd = PfcWatchdog(PfcWatchdogConfig(enabled=True, action=action), [2], [3])
    wd.queues[(2, 3)].dropped = 290
    agent = SimpleNamespace(ports={2: SimpleNamespace(gates=gates)}, p4=p4, watchdog=wd,
                            _event=lambda *a: (events if events is not None else []).append(a))
    WatchdogMixin._wd_restore(agent, StormRestored(2, 3, action, 5.0, 0.9, 290))
    return gates.calls, p4.calls


def test_after_a_drop_the_released_bytes_are_what_the_program_admitted_less_the_queue() -> None:
    gates, p4 = restore("drop", admitted=1_250_000)
    assert p4 == [(2, 3, False)]
    # the gate first, then what the program admitted, read with PFC honoured again
    assert gates == [("restore", 3), ("rebase", 3, 1_250_000 - 4154)]


def test_the_restore_counts_what_the_drop_gate_discarded_since_the_last_poll() -> None:
    """The gate's drop counter, read as it comes off (300), settles the storm's count (290 at
    the last poll): the event says 300."""
    events: list = []
    restore("drop", admitted=1_250_000, events=events)
    (event,) = events
    assert event[2] == "storm_restored" and event[-1].endswith("dropped=300"), event


def test_without_an_answer_from_bmv2_nothing_is_rebased() -> None:
    gates, _p4 = restore("drop", admitted=None)
    assert gates == [("restore", 3)]


def test_forward_drops_nothing_and_rebases_nothing() -> None:
    gates, p4 = restore("forward", admitted=1_250_000)
    assert p4 == [(2, 3, False)] and gates == []
