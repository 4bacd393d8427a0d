"""`testbed doctor`: what this machine lacks for the testbed, and how to get each piece."""

from __future__ import annotations

import importlib
import mmap
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

QDISCS = ("htb", "tbf", "pfifo", "bfifo", "netem", "red")
#: Qdiscs the port model cannot do without; the others only widen what experiments can show.
REQUIRED_QDISCS = ("htb", "tbf", "bfifo")
PY_MODULES = ("pydantic", "yaml", "typer", "rich", "p4runtime_sh", "scapy", "pyroute2", "psutil",
              "matplotlib", "grpc")
#: Where the playbook unpacks BMv2's fast build (role p4, p4_bmv2_fast_prefix).
BMV2_FAST_PREFIX = Path("/opt/bmv2-fast")
#: A packet-log message of simple_switch (BMLOG_DEBUG_PKG): the preprocessor drops it from a
#: build configured with --disable-logging-macros, so only a build that can log holds it.
BMV2_LOGGING_MARKER = b"Processing packet received on port"
#: The warning such a build prints when asked to log at debug level; an optimized build with
#: the logging macros compiled in drops it as dead code.
BMV2_NO_LOGGING_MARKER = b"You disabled logging macros"
BMV2_BUILDS = {"default": "default build: logging macros compiled in, --log works",
               "fast": "fast build: logging macros compiled out, no packet log",
               "unknown": "build not recognised"}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _which(binary: str, fix: str) -> Check:
    path = shutil.which(binary)
    return Check(binary, path is not None, path or "not found", "" if path else fix)


def bmv2_build(binary: str | Path) -> str:
    """Which BMv2 build ``binary`` is: "default" (logging macros compiled in, the p4lang
    packages' and a plain ``./configure``'s), "fast" (``--disable-logging-macros``), or
    "unknown". Both report the same ``--version`` and ``--help``, so this reads the binary's
    own strings instead of running it."""
    try:
        with open(binary, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m.find(BMV2_LOGGING_MARKER) >= 0:
                return "default"
            if m.find(BMV2_NO_LOGGING_MARKER) >= 0:
                return "fast"
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses length 0)
        pass
    return "unknown"


def _bmv2_checks(fix: str) -> list[Check]:
    """simple_switch_grpc on the PATH (the one `testbed up` starts) and which build it is; the
    fast build, when it is installed but not the one on the PATH."""
    path = shutil.which("simple_switch_grpc")
    if path is None:
        return [Check("simple_switch_grpc", False, "not found", fix)]
    checks = [Check("simple_switch_grpc", True, f"{path} ({BMV2_BUILDS[bmv2_build(path)]})")]
    fast = BMV2_FAST_PREFIX / "bin" / "simple_switch_grpc"
    if fast.is_file() and Path(path).resolve() != fast.resolve():
        checks.append(Check("bmv2 fast build", True, f"{fast} ({BMV2_BUILDS[bmv2_build(fast)]}), "
                            f"not on the PATH: PATH={fast.parent}:$PATH selects it",
                            required=False))
    return checks


def probe_qdiscs() -> dict[str, bool]:
    """Try each qdisc on a veth inside a throwaway namespace; touches nothing else."""
    ns = f"roce-doctor-{uuid.uuid4().hex[:6]}"
    found: dict[str, bool] = {}
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
        return {q: False for q in QDISCS}
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"],
                       capture_output=True)
        args = {"htb": ["htb"], "tbf": ["tbf", "rate", "1mbit", "burst", "4500", "limit", "9000"],
                "pfifo": ["pfifo"], "bfifo": ["bfifo"], "netem": ["netem", "delay", "1ms"],
                "red": ["red", "limit", "400000", "min", "30000", "max", "90000", "avpkt", "1000",
                        "burst", "55", "bandwidth", "10mbit"]}
        for q in QDISCS:
            r = subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", "d0", "root", *args[q]],
                               capture_output=True)
            found[q] = r.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return found


def run_checks() -> list[Check]:
    apt = "sudo apt-get install -y"
    checks = [Check("root", os.geteuid() == 0, f"uid {os.geteuid()}",
                    "run the testbed with sudo (namespaces, veths and qdiscs need root)")]
    try:
        importlib.import_module("mininet.net")
        checks.append(Check("mininet", True, "importable"))
    except ImportError:
        checks.append(Check("mininet", False, "not importable",
                            f"{apt} mininet, and make the venv with --system-site-packages"))
    p4fix = ("`sudo testbed provision` (the p4lang packages, Ubuntu 22.04/24.04 and Debian 12), "
             "or without internet `sudo testbed provision --skip-tags p4repo "
             "--toolchain-archive FILE.tar.zst` (README: The P4 toolchain without internet)")
    checks += _bmv2_checks(p4fix)
    checks.append(_which("simple_switch_CLI", p4fix))
    c = _which("p4c-bm2-ss", p4fix)
    c.required = False
    c.detail += " (only needed to change the P4 program; the compiled program is in p4/compiled)"
    checks.append(c)
    for tool, pkg in (("ip", "iproute2"), ("tc", "iproute2"), ("ethtool", "ethtool"),
                      ("tshark", "tshark"), ("tcpdump", "tcpdump")):
        chk = _which(tool, f"{apt} {pkg}")
        chk.required = tool in ("ip", "tc", "ethtool")
        checks.append(chk)
    if os.geteuid() == 0 and shutil.which("tc"):
        q = probe_qdiscs()
        for name, ok in q.items():
            checks.append(Check(f"qdisc {name}", ok, "available" if ok else "missing",
                                "" if ok else f"load or install the kernel module sch_{name} "
                                "(Debian/Ubuntu: linux-modules-extra for your kernel)",
                                required=name in REQUIRED_QDISCS))
    for mod in PY_MODULES:
        try:
            importlib.import_module(mod)
            checks.append(Check(f"python {mod}", True, "importable"))
        except ImportError:
            checks.append(Check(f"python {mod}", False, "missing",
                                "pip install -e '.[test]' in the project's virtual environment"))
    return checks
