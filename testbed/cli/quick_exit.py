"""Leaving the process once a command is done, without the interpreter's teardown.

After ``testbed up --pingall`` had printed its verdict, the interpreter spent 0.25 s of a
3.5 s round trip tearing itself down (freeing every module: gRPC, protobuf, pydantic, Mininet,
matplotlib), work whose result nobody sees. :func:`leave` does what that exit still owes a
user (atexit handlers, such as the Mininet CLI's history; threads still running; files not
closed flushed; the exit status) and ends the process with ``os._exit``.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import sys
import threading


def leave(code: int | str | None) -> None:
    """End the process with ``code`` as ``sys.exit(code)`` would: None is 0, a string is
    printed to stderr and exits 1."""
    atexit._run_exitfuncs()
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    for obj in gc.get_objects():  # a file left open: its buffer, which the teardown would write
        if isinstance(obj, io.IOBase):
            with contextlib.suppress(Exception):
                if not obj.closed:
                    obj.flush()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code or 0)
