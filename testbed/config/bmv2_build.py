"""Which BMv2 build a switch runs: the one definition of the two builds and how one is chosen.

BMv2's own performance notes (behavioral-model, docs/performance.md) say the build flags have "a
massive impact": a build configured with ``--disable-logging-macros --disable-elogger`` and
``-O3`` forwards several times as many packets per second as the default build (the p4lang
packages' and a plain ``./configure``'s), but has no packet log. The testbed's capacity (the
link rate at which a fabric stays faithful, ``benchmarks/capacity.py``) is BMv2's packet rate,
so a run takes the fast build whenever it is installed and no log was asked for.
"""

from __future__ import annotations

import mmap
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

BINARY = "simple_switch_grpc"
#: Where the playbook unpacks BMv2's fast build (role p4, p4_bmv2_fast_prefix).
BMV2_FAST_PREFIX = Path("/opt/bmv2-fast")
FAST_BINARY = BMV2_FAST_PREFIX / "bin" / BINARY
#: A packet-log message of simple_switch (BMLOG_DEBUG_PKG): the preprocessor drops it from a
#: build configured with --disable-logging-macros, so only a build that can log holds it.
BMV2_LOGGING_MARKER = b"Processing packet received on port"
#: The warning such a build prints when asked to log at debug level; an optimized build with
#: the logging macros compiled in drops it as dead code.
BMV2_NO_LOGGING_MARKER = b"You disabled logging macros"
BMV2_BUILDS = {"default": "default build: logging macros compiled in, --log works",
               "fast": "fast build: logging macros compiled out, no packet log",
               "unknown": "build not recognised"}

#: What ``switch.build`` may say: ``auto`` takes the fast build when it is installed and no log
#: was asked for, else the default one.
BuildChoice = Literal["auto", "default", "fast"]


class BuildError(Exception):
    """The build the config asks for cannot run here; the message names the field and the fix."""


@dataclass(frozen=True)
class Selected:
    binary: str
    build: str  # "default", "fast" or "unknown"


def bmv2_build(binary: str | Path) -> str:
    """Which BMv2 build ``binary`` is: "default" (logging macros compiled in), "fast"
    (``--disable-logging-macros``), or "unknown". Both report the same ``--version`` and
    ``--help``, so this reads the binary's own strings instead of running it."""
    try:
        with open(binary, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m.find(BMV2_LOGGING_MARKER) >= 0:
                return "default"
            if m.find(BMV2_NO_LOGGING_MARKER) >= 0:
                return "fast"
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses length 0)
        pass
    return "unknown"


def installed() -> dict[str, str]:
    """Each build found on this machine -> its binary: the PATH's simple_switch_grpc under its
    own build's name, and the playbook's fast build under /opt/bmv2-fast."""
    found: dict[str, str] = {}
    if FAST_BINARY.is_file():
        found["fast"] = str(FAST_BINARY)
    on_path = shutil.which(BINARY)
    if on_path is not None:
        found.setdefault(bmv2_build(on_path), on_path)
    return found


def select(choice: BuildChoice, log: bool, found: dict[str, str] | None = None) -> Selected:
    """The binary a switch starts for ``switch.build`` = ``choice`` and ``switch.log``.

    Pure given ``found`` (build -> binary, as :func:`installed` returns), so the rules are
    tested without the builds."""
    found = installed() if found is None else found
    if not found:
        raise BuildError(f"{BINARY} is not installed; run `testbed doctor` for how to get BMv2")
    if choice == "fast" and log:
        raise BuildError("switch.log: the fast BMv2 build has no packet log; set switch.build "
                         "to default (or auto) to log, or leave switch.log off")
    if choice == "auto":
        choice = "default" if log else "fast"
        if choice not in found:  # auto takes what there is; --log needs a build that logs
            other = next(iter(found))
            if log and other == "fast":
                raise BuildError("switch.log: only BMv2's fast build is installed and it has no "
                                 "packet log; install the default build (`testbed provision`) "
                                 "or leave switch.log off")
            return Selected(found[other], other)
        return Selected(found[choice], choice)
    if choice not in found:
        how = ("`sudo testbed provision` builds it online (half an hour), or installs it from "
               "--bmv2-fast-archive PATH or --bmv2-fast-url URL --bmv2-fast-sha256 HEX (see "
               "README: BMv2's fast build)" if choice == "fast" else
               "`sudo testbed provision` installs it")
        raise BuildError(f"switch.build: BMv2's {choice} build is not installed; {how}, or set "
                         f"switch.build: auto")
    return Selected(found[choice], choice)
