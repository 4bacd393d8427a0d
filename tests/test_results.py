"""testbed.results.telemetry: the records are the documented columns, and what the writers write the
readers read back (docs/RESULTS.md's check is tests/test_cli.py)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from testbed.results.telemetry import (
    CPU_COLUMNS,
    EVENT_COLUMNS,
    TELEMETRY_COLUMNS,
    CpuRow,
    EventRow,
    PfcwdQueue,
    PfcwdState,
    TelemetryRow,
    cpu_writer,
    events_path,
    events_writer,
    pfcwd_path,
    pfcwd_states,
    read_events,
    read_pfcwd,
    read_telemetry,
    run_cpu,
    run_events,
    run_telemetry,
    telemetry_path,
    telemetry_writer,
    write_pfcwd,
)

SAMPLE = TelemetryRow(1.25, "leaf1", 2, 3, 9000, 2, 1, 123456, 40, True, 5, 0.5,
                      -120, 300, 0, 12000, 850)
LOSSY = TelemetryRow(1.25, "leaf1", 2, 0, 0, 0, 0, 64, 1, False, 0, 0.0)


@pytest.mark.parametrize(("kind", "columns"), [(TelemetryRow, TELEMETRY_COLUMNS),
                                               (EventRow, EVENT_COLUMNS),
                                               (CpuRow, CPU_COLUMNS)])
def test_a_records_fields_are_its_files_columns(kind, columns) -> None:
    assert [f.name for f in fields(kind)] == [name for name, _ in columns]


def test_telemetry_round_trips_and_reads_by_run(tmp_path: Path) -> None:
    tel = tmp_path / "telemetry"
    tel.mkdir()
    with telemetry_writer(tel, "leaf1") as w:
        w.write(SAMPLE)
        w.write(LOSSY)
    with telemetry_writer(tel, "spine1") as w:
        w.write(TelemetryRow(1.0, "spine1", 1, 3, 0, 0, 0, 0, 0, False, 0, 0.0))
    text = telemetry_path(tel, "leaf1").read_text().splitlines()
    assert text[0] == ",".join(name for name, _ in TELEMETRY_COLUMNS)
    assert text[1] == "1.2500,leaf1,2,3,9000,2,1,123456,40,1,5,0.5000,-120,300,0,12000,850,,,,"
    assert text[2] == "1.2500,leaf1,2,0,0,0,0,64,1,0,0,0.0000,,,,,,,,,"
    assert read_telemetry(telemetry_path(tel, "leaf1")) == [SAMPLE, LOSSY]
    assert [r.switch for r in run_telemetry(tmp_path)] == ["leaf1", "leaf1", "spine1"]
    assert SAMPLE.queue == ("leaf1", 2, 3)


def test_a_file_without_the_lossless_columns_reads_them_as_none(tmp_path: Path) -> None:
    """A results folder from before the phantom's columns existed still reads."""
    path = tmp_path / "old.telemetry.csv"
    path.write_text("t_s,switch,port,tc,backlog_bytes,backlog_packets,drops,sent_bytes,"
                    "sent_packets,paused,pfc_rx,paused_s\n0.1,leaf1,2,0,0,0,0,64,1,0,0,0.0\n")
    assert read_telemetry(path) == [replace(LOSSY, t_s=0.1)]


def test_events_round_trip(tmp_path: Path) -> None:
    rows = [EventRow(0.5, "leaf1", 1, 3, "pause", 65535, 812.4),
            EventRow(0.9, "leaf1", 1, 3, "storm_detected", 0, None, "action=drop")]
    with events_writer(tmp_path, "leaf1") as w:
        for r in rows:
            w.write(r)
    assert events_path(tmp_path, "leaf1").read_text().splitlines()[1:] == [
        "0.500000,leaf1,1,3,pause,65535,812,", "0.900000,leaf1,1,3,storm_detected,0,,action=drop"]
    back = read_events(events_path(tmp_path, "leaf1"))
    assert back[0].reaction_us == 812.0 and back[1] == rows[1]
    assert run_events(tmp_path) == []  # a run folder keeps them under telemetry/


def test_cpu_rows_and_a_run_without_them(tmp_path: Path) -> None:
    assert run_cpu(tmp_path) is None
    (tmp_path / "telemetry").mkdir()
    with cpu_writer(tmp_path / "telemetry" / "cpu.csv") as w:
        w.write(CpuRow(0.2, 99.04, 75.54))
    assert run_cpu(tmp_path) == [CpuRow(0.2, 99.0, 75.5)]  # to a tenth of a percent


def test_watchdog_state_round_trips(tmp_path: Path) -> None:
    state = PfcwdState("leaf1", 3.25, "drop",
                       [PfcwdQueue(1, 3, True, 1, False, 6, 0),
                        PfcwdQueue(2, 3, False, 0, True, 0, 300)])
    write_pfcwd(pfcwd_path(tmp_path, "leaf1"), state)
    assert read_pfcwd(pfcwd_path(tmp_path, "leaf1")) == state
    assert not list(tmp_path.glob("*.tmp"))  # written whole, then renamed
    assert pfcwd_states(tmp_path) == [state]


def test_p4_counters_are_read_one_way(tmp_path: Path) -> None:
    """p4_counters.csv has one reader (testbed.results.telemetry.last_p4_counters): the
    headline, the phenomena and the labs' evidence see the same last sample of every cell."""
    from testbed.analysis.headline import last_counters
    from testbed.analysis.phenomena import read_p4_counters
    from testbed.labs.evidence import RunData
    from testbed.results.files import P4_COUNTERS_FILE
    from testbed.results.telemetry import P4_COUNTER_COLUMNS, last_p4_counters

    path = tmp_path / P4_COUNTERS_FILE
    rows = [(0.5, "leaf1", "RoceEgress.tx_port", 3, 10, 40960),
            (0.5, "leaf1", "RoceIngress.drops", 21, 1, 64),
            (1.0, "leaf1", "RoceEgress.tx_port", 3, 25, 102400)]
    path.write_text(",".join(c for c, _ in P4_COUNTER_COLUMNS) + "\n"
                    + "".join(",".join(map(str, r)) + "\n" for r in rows))
    cells = last_p4_counters(path)
    assert cells == {("leaf1", "RoceEgress.tx_port", 3): (25, 102400),
                     ("leaf1", "RoceIngress.drops", 21): (1, 64)}
    assert read_p4_counters(path) == cells
    assert RunData(tmp_path).counters == cells
    assert last_counters(path) == {cell: packets for cell, (packets, _) in cells.items()}
    # a folder without the file (a `testbed up` run) has no counters, where absence is allowed
    assert last_counters(tmp_path / "none.csv") == {} and RunData(tmp_path / "x").counters == {}


def test_the_run_summary_type_has_every_key_a_run_writes() -> None:
    """testbed.results.summary.RunSummary (and its flows' and QPs' types) name every key
    testbed/run/scenario_run.py writes into summary.json: read from its source with ast."""
    import ast

    from testbed.results.summary import FlowSummary, QpSummary, RunSummary

    source = Path(__file__).resolve().parent.parent / "testbed" / "run" / "scenario_run.py"
    tree = ast.parse(source.read_text())
    written: set[str] = set()
    dicts: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                and ast.unparse(node.value) in ("summary", "res.summary")
                and isinstance(node.slice, ast.Constant)):
            written.add(node.slice.value)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                "res.summary.setdefault", "res.summary.update", "summary.update"):
            written |= {c.value for c in ast.walk(node.args[0])
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if isinstance(node, ast.Dict) and node.keys and all(
                isinstance(k, ast.Constant) for k in node.keys):
            keys = {k.value for k in node.keys}
            dicts[min(keys)] = keys
    summary = next(k for k in dicts.values() if "scenario" in k)
    flow = next(k for k in dicts.values() if "qps" in k)
    qp = next(k for k in dicts.values() if "qpn" in k)
    assert "headline" in written and "fidelity" in written  # the scan finds them
    assert written | summary <= set(RunSummary.__annotations__)
    assert flow == set(FlowSummary.__annotations__) and qp == set(QpSummary.__annotations__)
