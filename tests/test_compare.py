"""`testbed compare` on synthetic results folders (tests/synthetic_run.py): the figures side
by side, the files it writes, and a one-line error for what is not a run."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli.commands import app
from testbed.report.compare import CompareError, expand, load, table
from tests.synthetic_run import write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cmp")
    a = write_run(root / "run-a")
    b = root / "run-b"
    shutil.copytree(a, b)
    s = json.loads((b / "summary.json").read_text())
    s["flows"]["a"]["qps"][0]["retransmitted"] = 30
    (b / "summary.json").write_text(json.dumps(s))
    return a, b


def test_figures_side_by_side(runs: tuple[Path, Path]) -> None:
    views = load(list(runs))
    assert [v.label for v in views] == ["run-a", "run-b"]
    header, rows = table(views)
    assert header == ["figure", "run-a", "run-b"]
    by = {r[0]: r[1:] for r in rows}
    assert by["retransmissions"] == ["3", "30"]
    assert by["goodput (Mbit/s)"] == ["7", "7"]
    assert by["a goodput (Mbit/s)"] == ["4", "4"]


def test_cli_writes_table_csv_and_plot(runs: tuple[Path, Path], tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["compare", *map(str, runs), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "retransmissions" in r.output and "run-b" in r.output
    with open(tmp_path / "compare.csv") as fh:
        rows = {row[0]: row[1:] for row in csv.reader(fh)}
    assert rows["retransmitted"] == ["3", "30"]
    assert rows["pfc_frames"] == ["49", "49"]
    assert "| retransmissions | 3 | 30 |" in (tmp_path / "compare.md").read_text()
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_a_sweep_folder_stands_for_its_runs(runs: tuple[Path, Path], tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for i, r in enumerate(runs, 1):
        shutil.copytree(r, sweep / "runs" / f"p0{i}-r1" / r.name)
    (sweep / "sweep.json").write_text(json.dumps({"runs": [
        {"point": i, "repeat": 1, "label": f"k={i}", "run_dir": f"runs/p0{i}-r1/{r.name}"}
        for i, r in enumerate(runs, 1)]}))
    assert [label for label, _ in expand([sweep])] == ["p1-r1 k=1", "p2-r1 k=2"]


@pytest.mark.parametrize("make, says", [
    (lambda t: t / "missing", "no such folder"),
    (lambda t: t, "not a run's results folder"),
])
def test_not_a_run_is_one_line(runs: tuple[Path, Path], tmp_path: Path, make, says) -> None:
    bad = make(tmp_path)
    with pytest.raises(CompareError, match=says):
        expand([runs[0], bad])
    r = CliRunner().invoke(app, ["compare", str(runs[0]), str(bad)])
    assert r.exit_code == 2 and r.output.startswith("error: ") and says in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_one_run_is_not_a_comparison(runs: tuple[Path, Path]) -> None:
    with pytest.raises(CompareError, match="at least two runs"):
        expand([runs[0]])
