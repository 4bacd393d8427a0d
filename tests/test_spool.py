"""The agent's file writes leave its loop for a thread (traffic.spool): a write that
waits for the file system does not hold the loop, and every write lands, in order, by the
time the agent closes."""

from __future__ import annotations

import threading
from pathlib import Path

from testbed.results.telemetry import EventRow, events_path, events_writer, read_events
from traffic.spool import Spool, SpooledFile


def test_a_write_that_waits_does_not_hold_the_loop_and_lands_in_order(tmp_path: Path) -> None:
    """The spool's thread is stuck in a write (the journal busy); meanwhile the loop writes
    and flushes two events and a state file without waiting; once the write returns, all of
    it is in the files, in the order given."""
    spool = Spool("leaf1")
    stuck, done = threading.Event(), []
    spool.submit(lambda: (stuck.wait(5), done.append("stuck")))
    log = events_writer(tmp_path, "leaf1", lambda p: SpooledFile(p, spool))  # type: ignore[arg-type,return-value]
    for t in (1.0, 1.2):
        log.write(EventRow(t, "leaf1", 1, 3, "pause", 65535, 800))
        log.flush()
    state = tmp_path / "leaf1.pfcwd.json"
    spool.submit(lambda: (state.write_text("{}"), done.append("state")))
    assert done == [] and not state.exists()  # the loop went on; nothing written yet
    stuck.set()
    log.close()
    spool.close()
    assert done == ["stuck", "state"]
    assert [e.t_s for e in read_events(events_path(tmp_path, "leaf1"))] == [1.0, 1.2]


def test_rows_leave_for_the_file_only_at_a_flush(tmp_path: Path) -> None:
    spool = Spool("s")
    f = SpooledFile(tmp_path / "x.csv", spool)
    f.write("a,b\n")
    f.flush()
    f.write("1,2\n")  # not flushed: still in memory
    spool.submit(lambda: None)
    spool.close()
    assert (tmp_path / "x.csv").read_text() == "a,b\n"


def test_a_failed_write_is_said_and_the_thread_goes_on(tmp_path: Path, capsys) -> None:
    spool = Spool("leaf2")
    spool.submit(lambda: (tmp_path / "missing" / "x").write_text("x"))
    later = tmp_path / "later"
    spool.submit(lambda: later.write_text("ok"))
    spool.close()
    assert later.read_text() == "ok"
    assert "leaf2: a write failed" in capsys.readouterr().err
