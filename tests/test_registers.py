"""The agent's reads of the P4 program's registers, against a stand-in for BMv2's Thrift
client: what is asked of BMv2 for each sample."""

from __future__ import annotations

from testbed.agent.registers import P4Registers


class _Thrift:
    """Records each call; every register holds its cell's index plus one, or -2 for drift."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def bm_register_read(self, _ctx: int, name: str, cell: int) -> int:
        self.calls.append(("read", name, cell))
        return (1 << 32) - 2 if name == "drift" else cell + 1

    def bm_register_write(self, _ctx: int, name: str, cell: int, _value: int) -> None:
        self.calls.append(("write", name, cell))


def _registers() -> tuple[P4Registers, _Thrift]:
    r = P4Registers(9090, "leaf1")
    r._client = bm = _Thrift()  # type: ignore[assignment]
    return r, bm


def test_an_idle_sample_asks_bmv2_nothing() -> None:
    r, bm = _registers()
    assert r.queue_views([]) == ({}, None)
    assert bm.calls == []


def test_a_busy_queue_is_read_its_maxima_cleared_and_bmv2s_hold_read_once() -> None:
    r, bm = _registers()
    views, lag = r.queue_views([(2, 3)])
    cell = 2 * 8 + 3
    assert views == {(2, 3): (-2, cell + 1, cell + 1, cell + 1)} and lag == 1
    assert [c for c in bm.calls if c[0] == "write"] == [
        ("write", "below_max", cell), ("write", "occupancy_max", cell),
        ("write", "bmv2_lag_max", 0)]
    assert bm.calls.count(("read", "bmv2_lag_max", 0)) == 1
