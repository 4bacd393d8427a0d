"""`testbed sweep` and `testbed compare` on real runs: the PFC-only incast swept between a
lossless class and none (2 points x 1 run, through the command line), the table's rows, the
figures that must differ, one run's headline checked against its raw counters, and the two
runs compared."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.bmv2


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=600)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "incast"
    r = cli("sweep", "scenarios/incast.yaml", "--set", "qos.pfc_enable=[3],[]", "--out",
            str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def _table(out: Path) -> list[dict]:
    with open(out / "table.csv") as fh:
        return list(csv.DictReader(fh))


def _runs(out: Path) -> dict[str, Path]:
    sweep = json.loads((out / "sweep.json").read_text())
    return {r["label"]: out / r["run_dir"] for r in sweep["runs"]}


def test_sweep_table_has_a_row_per_point_and_pfc_changes_the_outcome(sweep: Path) -> None:
    rows = _table(sweep)
    assert [(r["point"], r["qos.pfc_enable"], r["runs"]) for r in rows] == [
        ("1", "[3]", "1"), ("2", "[]", "1")]
    lossless, lossy = rows
    fig = lambda row, key: float(row[f"{key}_median"])  # noqa: E731
    # PFC on: pause frames, nothing dropped or resent; off: no pause, drops and Go-Back-N
    assert fig(lossless, "pfc_frames") > 0 and fig(lossy, "pfc_frames") == 0
    assert fig(lossless, "lossless_drops") == 0 and fig(lossless, "drops") == 0
    assert fig(lossless, "retransmitted") == 0
    assert fig(lossy, "drops") > 0 and fig(lossy, "retransmitted") > 0
    assert fig(lossless, "goodput_mbps") > fig(lossy, "goodput_mbps")
    assert (sweep / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 1 | [3] | 1 |" in (sweep / "table.md").read_text()


def _last_telemetry(run: Path) -> dict[tuple[str, int, int], dict]:
    last = {}
    for f in (run / "telemetry").glob("*.telemetry.csv"):
        with open(f) as fh:
            for r in csv.DictReader(fh):
                last[(r["switch"], int(r["port"]), int(r["tc"]))] = r
    return last


def test_headline_agrees_with_the_raw_counters(sweep: Path) -> None:
    run = _runs(sweep)["qos.pfc_enable=[3]"]
    summary = json.loads((run / "summary.json").read_text())
    head = summary["headline"]
    last = _last_telemetry(run)
    topo = json.loads((run / "topology.json").read_text())
    peer = {(s["name"], p["number"]): p["peer"] for s in topo["spines"] + topo["leaves"]
            for p in s["ports"]}
    links = {lk["link"]: lk for lk in head["links"]}
    for (sw, port), name in {(q[0], q[1]): f"{q[0]}->{peer[q[:2]]}" for q in last}.items():
        frames = sum(int(r["pfc_rx"]) for q, r in last.items() if q[:2] == (sw, port))
        if frames:
            assert links[name]["pfc_frames"] == frames, name
            assert links[name]["paused_s"] == max(float(r["paused_s"]) for q, r in
                                                  last.items() if q[:2] == (sw, port))
    # every PFC frame a P4 program sent: to a switch (its agent counted it) or to a host
    assert head["pfc_frames"] == sum(summary["pfc_frames_sent"].values()) > 0
    assert head["drops"] == sum(int(r["drops"]) for r in last.values())
    assert head["lossless_drops"] == summary["kernel_drops_lossless"]
    assert head["hidden_loss"] == sum(summary["hidden_loss"].values())
    for name, f in summary["flows"].items():
        h = head["flows"][name]
        assert h["bytes"] == f["bytes_received"] > 0
        assert h["goodput_mbps"] * h["active_s"] * 1e6 / 8 == pytest.approx(h["bytes"], rel=1e-3)
        assert h["retransmitted"] == sum(q["retransmitted"] for q in f["qps"])
    # four senders into one port: the port toward h1 is the busiest, never past its rate
    config = json.loads((run / "scenario.json").read_text())["config"]
    assert links["leaf1->h1"]["utilization"] == head["max_utilization"] <= 1.05
    assert head["goodput_mbps"] <= config["fabric"]["host_link_mbps"] * 1.05
    assert "## Headline figures" in (run / "report.md").read_text()


def test_compare_the_two_runs(sweep: Path, tmp_path: Path) -> None:
    runs = _runs(sweep)
    r = cli("compare", *map(str, runs.values()), "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    with open(tmp_path / "compare.csv") as fh:
        rows = {row[0]: row[1:] for row in csv.reader(fh)}
    heads = [json.loads((d / "summary.json").read_text())["headline"] for d in runs.values()]
    assert rows["pfc_frames"] == [str(h["pfc_frames"]) for h in heads]
    assert int(rows["pfc_frames"][0]) > 0 and rows["pfc_frames"][1] == "0"
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"
    # the sweep's folder stands for its runs, labelled by point
    r = cli("compare", str(sweep))
    assert r.returncode == 0 and "qos.pfc_enable=[3]" in r.stderr + r.stdout
