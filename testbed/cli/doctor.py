"""`testbed doctor`: what this machine lacks for the testbed, and how to get each piece."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass

from testbed.config import bmv2_build

QDISCS = ("htb", "tbf", "pfifo", "bfifo", "netem", "red")
#: Qdiscs the port model cannot do without; the others only widen what experiments can show.
REQUIRED_QDISCS = ("htb", "tbf", "bfifo")
PY_MODULES = ("pydantic", "yaml", "typer", "rich", "p4runtime_sh", "scapy", "pyroute2", "psutil",
              "matplotlib", "grpc")
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


def _bmv2_checks(fix: str) -> list[Check]:
    """Each BMv2 build installed, and which one `testbed up` starts (switch.build: auto)."""
    found = bmv2_build.installed()
    if not found:
        return [Check("simple_switch_grpc", False, "not found", fix)]
    checks = [Check(f"bmv2 {build} build", True, f"{path} ({bmv2_build.BMV2_BUILDS[build]})",
                    required=False) for build, path in found.items()]
    chosen = bmv2_build.select("auto", log=False, found=found)
    note = ("" if chosen.build == "fast" else "; the fast build (several times the packet rate) "
            "comes from `testbed provision` (built online, or --bmv2-fast-archive PATH, or "
            "--bmv2-fast-url URL --bmv2-fast-sha256 HEX)")
    checks.insert(0, Check("simple_switch_grpc", True, f"testbed up starts {chosen.binary} "
                           f"({chosen.build} build; --log or switch.build: default picks the "
                           f"default build){note}"))
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


def probe_realtime() -> Check:
    """Whether a process may take SCHED_FIFO, as each switch agent (agent.realtime_priority)
    and each BMv2 (switch.realtime_priority) asks; tried in a child, so that this process
    keeps its own scheduling."""
    r = subprocess.run([sys.executable, "-c", "import os; os.sched_setscheduler(0, "
                        "os.SCHED_FIFO, os.sched_param(1))"], capture_output=True, text=True)
    ok = r.returncode == 0
    return Check("real-time scheduling", ok, "SCHED_FIFO allowed" if ok else
                 (r.stderr.strip().splitlines() or ["refused"])[-1],
                 "" if ok else "agent.realtime_priority and switch.realtime_priority cannot take "
                 "effect: the switch agents run at agent.nice and BMv2 at switch.nice; in a "
                 "container, allow real-time scheduling (docker run --cap-add SYS_NICE "
                 "--cpu-rt-runtime 950000)", required=False)


def calibration_check() -> Check:
    """This machine's measured budget (testbed calibrate): what it holds, or how to get it.
    Optional: runs work without it, but their budget is unknown and `auto` rates refused."""
    from testbed.budget.calibration_store import load_profile, profile_path

    p, reason = load_profile()
    if p is None:
        return Check("calibration", False, reason, "`sudo testbed calibrate` (a minute) "
                     "measures this machine's CPU budget; `auto` link rates need it",
                     required=False)
    builds = "; ".join(f"{b} build {c.us_per_pass:.0f} us a packet pass, {c.idle_cores:.1%} "
                       f"of a core idle" for b, c in sorted(p.builds.items()))
    return Check("calibration", True, (
        f"{profile_path()}, {p.measured_at}: {p.cores} cores, {p.background_cores:.2f} busy "
        f"with other work then; BMv2 {builds}; endpoint {p.endpoint_us_per_frame:.0f} us a "
        f"frame (+{p.endpoint_us_per_frame_per_qp:.1f} us each further QP); agent "
        f"{p.agent_us_per_wakeup:.0f} us a wake-up, "
        f"{p.agent_wakeups_per_s:.0f} wake-ups/s"), required=False)


def steal_check() -> Check:
    """How much of this machine's CPU time its hypervisor has given to others since boot
    (steal, proc(5)). Optional: a run measures it again over its own bring-up and flows; a
    machine that loses a share of its cores this way has that much less budget."""
    from pathlib import Path

    from testbed.config.models import FidelityConfig
    from testbed.run.cpuload import Jiffies, read_jiffies, steal_share

    cores = read_jiffies(Path("/proc/stat").read_text())
    pct = steal_share([Jiffies(0, 0)] * len(cores), cores)  # since boot
    limit = FidelityConfig().steal_note_pct
    return Check("cpu steal", pct < limit, (
        f"{pct:.1f}% of the cores' time since boot went to other work on this machine's host "
        "(steal); each run measures it again over its bring-up and says it from "
        f"{limit:g}% (fidelity.steal_note_pct)"),
        "" if pct < limit else "a virtual machine on a contended host: runs may be flagged "
        "in its busy hours; prefer a quieter host or dedicated cores", required=False)


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
    if os.geteuid() == 0:
        checks.append(probe_realtime())
    checks.append(calibration_check())
    checks.append(steal_check())
    for mod in PY_MODULES:
        try:
            importlib.import_module(mod)
            checks.append(Check(f"python {mod}", True, "importable"))
        except ImportError:
            checks.append(Check(f"python {mod}", False, "missing",
                                "pip install -e '.[test]' in the project's virtual environment"))
    return checks
