"""The command line: clear errors, never a traceback; doctor's report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.bmv2 import Bmv2Options, Bmv2Process, SwitchStartError

CLI = [sys.executable, "-m", "testbed.cli"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)


def test_bad_flags_are_named_without_traceback() -> None:
    r = run("topology", "--spines", "0", "--leaves", "300")
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
                 "qdisc tbf", "python scapy"):
        assert name in r.stdout, r.stdout
    assert r.returncode in (0, 1)


@pytest.mark.bmv2
def test_a_switch_that_fails_is_named_with_log_and_command(tmp_path: Path) -> None:
    """A second switch on a Thrift port already taken dies at start: reported by name, with
    the last lines of its log and the command line that failed."""
    first = Bmv2Process(Bmv2Options(name="leaf8", device_id=8, ports={},
                                    grpc_socket=tmp_path / "a.grpc", log_path=tmp_path / "a.log",
                                    thrift_port=39090))
    second = Bmv2Process(Bmv2Options(name="leaf9", device_id=9, ports={},
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
    from testbed.agent import EVENT_COLUMNS, TELEMETRY_COLUMNS
    from traffic.endpoint import MESSAGE_COLUMNS, QP_COLUMNS, STATS_COLUMNS, EndpointStats

    doc = (Path(__file__).parent.parent / "docs" / "RESULTS.md").read_text()
    # the stats command's counters: each documented, and the list is the dataclass's fields
    assert [n for n, _ in STATS_COLUMNS] == list(EndpointStats.__dataclass_fields__)
    for cols in (TELEMETRY_COLUMNS, EVENT_COLUMNS, QP_COLUMNS, MESSAGE_COLUMNS, STATS_COLUMNS):
        for name, meaning in cols:
            assert f"| `{name}` | {meaning} |" in doc, name
