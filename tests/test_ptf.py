"""Runs the PTF data-plane suite (tests/ptf) against a real BMv2 with our program.

The cases must not depend on one another: each resets the switch's registers in setUp. To show
it, one switch runs the suite in file order, then has registers dirtied on purpose (a phantom
queue full for ever, ports paused on a queue's account, a watchdog flag) and runs the suite in
reverse order. A short control run on the same dirty switch with the reset turned off shows the
dirt would have broken the cases it targets. ``--ptf-order-seed N`` adds a run in a random
order (PTF's --test-order rand) with that seed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.config.constants import AGENT_PORT
from tests.dataplane import Harness, bmv2_harness

PTF_DIR = Path(__file__).parent / "ptf"
REPO = Path(__file__).resolve().parent.parent
#: The cases import testbed from this checkout: the ptf script's own sys.path would otherwise
#: find whichever checkout the venv has installed (editable), not the one under test.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
MODULE = "roce_switch_test"
#: Register cells (port * 8 + class) set to what a crashed or careless case could leave:
#: port 1 class 3 holds a megabyte and never drains (paused until the end of time), so the
#: next packet there is marked CE and triggers XOFF; the slow port's class 3 has ports 2 and 3
#: paused on its account, port 2 only just sent XOFF, so no new XOFF goes there; the watchdog
#: has port 3 class 0 ignore PFC.
DIRT = [("q_bytes", 1 * 8 + 3, 10**6), ("paused_until", 1 * 8 + 3, 2**48 - 1),
        ("paused_by", 5 * 8 + 3, 0b1100), ("xoff_sent_at", 2 * 8 + 3, 2**48 - 1),
        ("pfc_ignored", 3 * 8 + 0, 1)]
#: The cases that dirt breaks when setUp does not reset it.
DIRT_BREAKS = ["Forwarding", "PfcGeneration", "WatchdogIgnoredPfc"]


def ptf_path() -> str:
    ptf = shutil.which("ptf") or str(Path(sys.executable).parent / "ptf")
    if not Path(ptf).exists():
        pytest.skip("needs PTF: pip install ptf")
    return ptf


def case_names(ptf: str, log: Path) -> list[str]:
    """The cases, in file order, as PTF names them."""
    r = subprocess.run([sys.executable, ptf, "--test-dir", str(PTF_DIR), "--log-file", str(log),
                        "--list-test-names"], capture_output=True, text=True, timeout=120,
                       check=True, env=ENV, cwd=REPO)
    names = [ln.strip() for ln in r.stdout.splitlines() if ln.startswith(f"{MODULE}.")]
    assert len(names) >= 10, r.stdout
    return names


def run_ptf(h: Harness, ptf: str, log: Path, specs: list[str], *, reset: bool = True,
            extra: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, list[str]]:
    """One PTF run against the harness's switch; returns it and the cases in the order run."""
    params = f"grpc_addr='{h.grpc_addr}';device_id={h.device_id};reset={reset}"
    cmd = ["ip", "netns", "exec", h.ns, sys.executable, ptf, "--test-dir", str(PTF_DIR),
           "--log-file", str(log), "--test-params", params, *extra]
    for p in h.ports:
        cmd += ["-i", f"{p}@{h.ptf_intf(p)}"]
    r = subprocess.run(cmd + specs, capture_output=True, text=True, timeout=600, env=ENV,
                       cwd=REPO)
    # PTF names a case module.Class (plain unittest: "runTest (module.Class.runTest)")
    ran = re.findall(rf"^(?:runTest \()?{MODULE}\.(\w+)(?:\.runTest\))? \.\.\. ", r.stderr,
                     re.MULTILINE)
    return r, ran


def failed(r: subprocess.CompletedProcess) -> set[str]:
    return set(re.findall(rf"^(?:FAIL|ERROR): (?:runTest \()?{MODULE}\.(\w+)", r.stderr,
                          re.MULTILINE))


def dirty(h: Harness) -> None:
    cmds = "".join(f"register_write {name} {index} {value}\n" for name, index, value in DIRT)
    r = subprocess.run(["ip", "netns", "exec", h.ns, "simple_switch_CLI", "--thrift-port",
                        "9090"], input=cmds, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Error" not in r.stdout, r.stdout + r.stderr


def report(what: str, r: subprocess.CompletedProcess) -> None:
    print(f"--- {what}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


@pytest.mark.bmv2
def test_ptf_suite_in_any_order(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    ptf = ptf_path()
    names = case_names(ptf, tmp_path / "list.log")
    short = [n.split(".", 1)[1] for n in names]
    seeds = request.config.getoption("--ptf-order-seed")
    with bmv2_harness(5, extra_ports=(AGENT_PORT,)) as h:
        h.session.close()  # the PTF tests become the primary controller
        first, ran_first = run_ptf(h, ptf, tmp_path / "ptf.log", names)
        report("file order", first)
        assert first.returncode == 0 and "OK" in first.stderr, \
            f"PTF failed in file order:\n{first.stderr[-6000:]}"
        assert ran_first == short

        dirty(h)
        control, ran_control = run_ptf(h, ptf, tmp_path / "control.log",
                                       [f"{MODULE}.{n}" for n in DIRT_BREAKS], reset=False)
        report("dirty switch, no reset (must fail)", control)
        assert ran_control == DIRT_BREAKS
        assert failed(control) == set(DIRT_BREAKS), \
            "the dirt does not break the cases it targets: the reverse run proves nothing"

        dirty(h)
        back, ran_back = run_ptf(h, ptf, tmp_path / "reverse.log", names[::-1])
        report("reverse order, dirty switch", back)
        assert ran_back == short[::-1]
        assert back.returncode == 0 and "OK" in back.stderr, \
            f"PTF failed in reverse order on a dirty switch:\n{back.stderr[-6000:]}"

        for seed in seeds:
            dirty(h)
            rand, ran_rand = run_ptf(h, ptf, tmp_path / f"rand{seed}.log", names,
                                     extra=("--test-order", "rand",
                                            "--test-order-seed", str(seed)))
            report(f"random order, seed {seed}: {' '.join(ran_rand)}", rand)
            assert sorted(ran_rand) == sorted(short)
            assert rand.returncode == 0 and "OK" in rand.stderr, \
                f"PTF failed in random order (seed {seed}):\n{rand.stderr[-6000:]}"
        alive = h.switch.alive()
    assert alive, "BMv2 died during the data-plane tests"


@pytest.mark.bmv2
def test_ptf_suite_on_the_default_build(tmp_path: Path) -> None:
    """The p4lang packages' build (the one a user without the fast build runs) passes the same
    suite, started as the fabric starts it without a log: at log level off, which halves its
    instructions per packet."""
    from testbed.config.bmv2_build import installed

    if "default" not in installed():
        pytest.skip("needs BMv2's default build (simple_switch_grpc on the PATH)")
    ptf = ptf_path()
    names = case_names(ptf, tmp_path / "list.log")
    with bmv2_harness(5, extra_ports=(AGENT_PORT,), build="default") as h:
        cmd = h.switch.opts.command()
        assert cmd[cmd.index("--log-level") + 1] == "off"
        h.session.close()
        r, ran = run_ptf(h, ptf, tmp_path / "ptf.log", names)
        report("default build, file order", r)
        assert r.returncode == 0 and "OK" in r.stderr, \
            f"PTF failed on the default build:\n{r.stderr[-6000:]}"
        assert ran == [n.split(".", 1)[1] for n in names]
