"""A process's file writes done by a thread of their own, so that its loop never waits for the
file system: the switch agent's (telemetry, events, the watchdog's state file) and the
endpoint's (its QP samples and message completions).

Why: a write that creates, renames or grows a file on a journaling file system (ext4, XFS)
waits for a handle on the journal, and while the journal commits a transaction (another
process's fsync, a batch of deletions discarded on an SSD) that wait can be long. Measured on
this project's 2-core VM (ext4, ``discard``), a loop of ``dd ... conv=fsync`` beside
``storm-watchdog-on``: the watchdog's state file, written each 100 ms poll, held each agent's
loop up to 213 ms, all four at once; the switches answered in 0.1-0.4 ms meanwhile. The same
signature flagged whole-suite runs, where earlier tests' files are written and deleted. An
endpoint's send loop flushes its samples the same way, and a host late by as much is a NIC idle.

The loop hands over whole writes (a sample's rows, an event, a state file) and goes on; the
thread writes them in the order given. A write that fails is said on the agent's log and the
loop goes on, as a failed write in the loop would have told it nothing it could act on.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO

Job = Callable[[], object]


class Spool:
    """One thread that runs the file writes handed to it, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"spool-{name}", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Run ``job`` on the thread, after every job submitted before it."""
        self._jobs.put(job)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except OSError as exc:
                print(f"{self.name}: a write failed: {exc}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Wait until every write submitted has been done, then end the thread."""
        self._jobs.put(None)
        self._thread.join()


class SpooledFile:
    """A text file for a csv writer, opened at once, whose writes gather in memory and leave
    for the spool's thread at each flush."""

    def __init__(self, path: Path | str, spool: Spool) -> None:
        self._fh: IO[str] = open(path, "w", newline="")  # noqa: SIM115  # closed by close()
        self._spool = spool
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        if self._parts:
            text, self._parts = "".join(self._parts), []
            self._spool.submit(partial(self._write, text))

    def _write(self, text: str) -> None:
        self._fh.write(text)
        self._fh.flush()

    def close(self) -> None:
        self.flush()
        self._spool.submit(self._fh.close)
