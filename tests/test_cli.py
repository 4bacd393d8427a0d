"""The command line: clear errors, never a traceback; doctor's report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.config import bmv2_build
from testbed.fabric.bmv2 import Bmv2Options, Bmv2Process, SwitchStartError

CLI = [sys.executable, "-m", "testbed.cli"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)


def test_bad_flags_are_named_without_traceback() -> None:
    r = run("topology", "--spines=-1", "--leaves", "300")
    assert r.returncode == 2
    assert "fabric.spines" in r.stderr and "fabric.leaves" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_bad_file_is_named_without_traceback(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("fabric:\n  spines: two\n  hosts: 3\n")
    r = run("topology", str(f))
    assert r.returncode == 2
    assert "fabric.spines" in r.stderr and "fabric.hosts: unknown field" in r.stderr
    assert "Traceback" not in r.stderr


def test_messages_keep_their_square_brackets(tmp_path: Path) -> None:
    """Rich markup must not eat what a message quotes: the name's pattern, a list."""
    f = tmp_path / "bad.yaml"
    f.write_text("name: My Lab\nagent: {pfc_watchdog: {ports: [leaf1-3]}}\n")
    r = run("topology", str(f))
    assert r.returncode == 2
    assert "String should match pattern '^[a-z][a-z0-9-]{0,23}$'" in r.stderr, r.stderr
    assert "(got ['leaf1-3'])" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_topology_prints_resolved_json() -> None:
    r = run("topology", "--spines", "3", "--leaves", "3", "--hosts-per-leaf", "1",
            "--parallel-links", "2")
    assert r.returncode == 0, r.stderr
    import json

    d = json.loads(r.stdout)
    assert len(d["spines"]) == 3 and len(d["links"]) == 3 + 18


@pytest.mark.root
def test_doctor_lists_every_check() -> None:
    r = run("doctor")
    for name in ("root", "mininet", "simple_switch_grpc", "p4c-bm2-ss", "qdisc htb",
                 "qdisc tbf", "python scapy", "real-time scheduling"):
        assert name in r.stdout, r.stdout
    assert r.returncode in (0, 1)


def test_bmv2_build_tells_the_default_build_from_the_fast_one(tmp_path: Path) -> None:
    from testbed.config.bmv2_build import BMV2_LOGGING_MARKER, BMV2_NO_LOGGING_MARKER, bmv2_build

    def binary(name: str, *strings: bytes) -> Path:
        f = tmp_path / name
        f.write_bytes(b"\x7fELF" + b"\0" * 5000 + b"\0".join(strings) + b"\0" * 100)
        return f

    assert bmv2_build(binary("default", b"[{}] [cxt {}] " + BMV2_LOGGING_MARKER + b" {}")) \
        == "default"
    assert bmv2_build(binary("fast", BMV2_NO_LOGGING_MARKER + b" when building")) == "fast"
    # unoptimized, logging macros in: the warning's dead code stays, the packet log decides
    assert bmv2_build(binary("O0", BMV2_NO_LOGGING_MARKER, BMV2_LOGGING_MARKER)) == "default"
    assert bmv2_build(binary("other", b"Usage: SWITCH_NAME [options]")) == "unknown"
    assert bmv2_build(binary("empty")) == "unknown"
    (tmp_path / "zero").touch()
    assert bmv2_build(tmp_path / "zero") == "unknown"
    assert bmv2_build(tmp_path / "missing") == "unknown"


def test_bmv2_build_of_the_installed_switches() -> None:
    import shutil

    from testbed.config.bmv2_build import BMV2_FAST_PREFIX, bmv2_build

    installed = shutil.which("simple_switch_grpc")
    if installed is None:
        pytest.skip("needs BMv2: simple_switch_grpc is not installed (see `testbed doctor`)")
    assert bmv2_build(installed) in ("default", "fast")
    fast = BMV2_FAST_PREFIX / "bin" / "simple_switch_grpc"
    if fast.exists():  # the playbook's --bmv2-fast-archive
        assert bmv2_build(fast) == "fast"


@pytest.mark.bmv2
def test_a_switch_that_fails_is_named_with_log_and_command(tmp_path: Path) -> None:
    """A second switch on a Thrift port already taken dies at start: reported by name, with
    the last lines of its log and the command line that failed."""
    binary = bmv2_build.select("auto", log=False).binary
    first = Bmv2Process(Bmv2Options(name="leaf8", device_id=8, ports={}, binary=binary,
                                    grpc_socket=tmp_path / "a.grpc", log_path=tmp_path / "a.log",
                                    thrift_port=39090))
    second = Bmv2Process(Bmv2Options(name="leaf9", device_id=9, ports={}, binary=binary,
                                     grpc_socket=tmp_path / "b.grpc",
                                     log_path=tmp_path / "b.log", thrift_port=39090))
    spawn = lambda cmd, **kw: subprocess.Popen(cmd, **kw)  # noqa: E731
    first.start(spawn)
    try:
        first.wait_ready(15)
        second.start(spawn)
        with pytest.raises(SwitchStartError) as info:
            second.wait_ready(15)
    finally:
        second.stop()
        first.stop()
    msg = str(info.value)
    assert "switch leaf9 failed to start" in msg and "Could not bind" in msg
    assert "command: " in msg and "--thrift-port 39090" in msg
    assert "last lines of" in msg and "Could not bind" in msg

def test_image_build_without_docker_engine_is_a_clear_error() -> None:
    import os

    r = subprocess.run([*CLI, "image", "build"], capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).parent.parent,
                       env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert r.returncode == 1
    assert "no Docker engine answers" in r.stderr and "Traceback" not in r.stderr


def test_results_doc_names_every_column() -> None:
    from testbed.analysis.tester import PORT_COUNTERS, TESTER_COUNTERS
    from testbed.results.telemetry import CPU_COLUMNS, EVENT_COLUMNS, TELEMETRY_COLUMNS
    from traffic.endpoint import MESSAGE_COLUMNS, QP_COLUMNS, STATS_COLUMNS, EndpointStats

    doc = (Path(__file__).parent.parent / "docs" / "RESULTS.md").read_text()
    # the stats command's counters: each documented, and the list is the dataclass's fields
    assert [n for n, _ in STATS_COLUMNS] == list(EndpointStats.__dataclass_fields__)
    for cols in (TELEMETRY_COLUMNS, EVENT_COLUMNS, QP_COLUMNS, MESSAGE_COLUMNS, STATS_COLUMNS,
                 CPU_COLUMNS, TESTER_COUNTERS, PORT_COUNTERS):
        for name, meaning in cols:
            assert f"| `{name}` | {meaning} |" in doc, name


def test_exec_runs_each_command_on_its_node_and_keeps_the_first_failure(capsys) -> None:
    """`testbed up --exec 'NODE COMMAND'`, without a fabric: a stand-in node answers as a
    Mininet node's cmd() does (the output, then the exit status the CLI appended)."""
    import typer

    from testbed.cli.commands import _run_exec

    ran = []

    class Node:
        def __init__(self, rc: int) -> None:
            self.rc = rc

        def cmd(self, line: str) -> str:
            ran.append(line)
            return f"out of {line.split(' ;')[0]}\n__rc={self.rc}\n"

    nodes = {"h1": Node(0), "h2": Node(3), "h3": Node(5)}
    fabric = type("F", (), {"host": staticmethod(lambda name: nodes[name])})
    assert _run_exec(fabric, ["h1 true", "h2 false", "h3 exit 5"], 0) == 3
    assert ran == ["true ; echo __rc=$?", "false ; echo __rc=$?", "exit 5 ; echo __rc=$?"]
    assert "out of true\nout of false\n" in capsys.readouterr().out
    assert _run_exec(fabric, ["h1 true"], 0) == 0
    assert _run_exec(fabric, ["h1 true"], 1) == 1  # pingall had failed already
    with pytest.raises(typer.Exit):
        _run_exec(fabric, ["h9 true"], 0)
