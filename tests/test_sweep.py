"""`testbed sweep`'s pure parts: the --set options, the points, a dotted path applied to a
scenario, the validation of every point before a run, the table, and what an interrupted sweep
keeps (with a stand-in for the fabric run that writes synthetic results folders)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from testbed.cli.commands import app
from testbed.run.sweep import (
    RunRecord,
    SweepError,
    aggregate,
    apply_setting,
    blame,
    parse_setting,
    parse_settings,
    point_label,
    points,
    split_values,
    table_csv_rows,
    table_markdown,
)
from testbed.run.sweep_run import plan_sweep, run_sweep

REPO = Path(__file__).resolve().parent.parent
INCAST = REPO / "scenarios" / "incast.yaml"


def test_values_split_outside_brackets_and_quotes() -> None:
    assert split_values("[3],[]") == ["[3]", "[]"]
    assert split_values("[3, 4], {a: 1, b: 2}, 'x,y', 5") == ["[3, 4]", "{a: 1, b: 2}",
                                                                "'x,y'", "5"]
    s = parse_setting("qos.pfc_enable=[3],[]")
    assert (s.key, s.values) == ("qos.pfc_enable", [[3], []])
    assert parse_setting("fabric.fabric_link_mbps=5,10.5").values == [5, 10.5]
    assert parse_setting("endpoints.dcqcn=true,false").values == [True, False]


@pytest.mark.parametrize("text, says", [
    ("qos.pfc_enable", "write KEY=V1,V2"),
    ("=1,2", "write KEY=V1,V2"),
    ("qos..ecn=1", "dotted path"),
    ("flows.0.qps=1,,2", "an empty value"),
    ("flows.0.qps=[1", "not a YAML value"),
])
def test_bad_set_option(text: str, says: str) -> None:
    with pytest.raises(SweepError, match=says):
        parse_setting(text)


def test_a_key_given_twice() -> None:
    with pytest.raises(SweepError, match="given twice"):
        parse_settings(["flows.0.qps=1", "flows.0.qps=2"])


def test_points_are_the_cartesian_product_first_key_slowest() -> None:
    pts = points(parse_settings(["a=1,2", "b=x,y,z"]))
    assert len(pts) == 6
    assert pts[0] == {"a": 1, "b": "x"} and pts[2] == {"a": 1, "b": "z"}
    assert pts[3] == {"a": 2, "b": "x"}
    assert point_label({"qos.pfc_enable": [3], "b": "x"}) == "qos.pfc_enable=[3], b=x"
    assert point_label({"qos.pfc_enable": []}) == "qos.pfc_enable=[]"


def test_apply_a_dotted_path() -> None:
    data = {"qos": {"ecn": {}}, "flows": [{"qps": 1}, {"qps": 2}]}
    assert apply_setting(data, "flows.1.qps", 8)["flows"] == [{"qps": 1}, {"qps": 8}]
    assert apply_setting(data, "qos.ecn.3.kmin_bytes", 5)["qos"]["ecn"] == {3: {"kmin_bytes": 5}}
    assert apply_setting(data, "fabric.fabric_link_mbps", 5)["fabric"] == {
        "fabric_link_mbps": 5}
    assert data == {"qos": {"ecn": {}}, "flows": [{"qps": 1}, {"qps": 2}]}  # not changed
    with pytest.raises(SweepError, match=r"--set flows.2.qps: flows.2 is not an index .*0..1"):
        apply_setting(data, "flows.2.qps", 1)
    with pytest.raises(SweepError, match="flows.x is not an index"):
        apply_setting(data, "flows.x", 1)
    with pytest.raises(SweepError, match="flows.0.qps is a value"):
        apply_setting(data, "flows.0.qps.deep", 1)


def test_blame_names_the_key() -> None:
    point = {"fabric.fabric_link_mbps": -1, "flows.0.qps": 2}
    assert blame(point, ["fabric.fabric_link_mbps: Input should be greater than 0"]) == \
        "--set fabric.fabric_link_mbps=-1: fabric.fabric_link_mbps: Input should be greater than 0"
    assert blame({"qos": {"pfc_enable": [9]}}, ["qos.pfc_enable: out of range"]).startswith(
        "--set qos={pfc_enable: [9]}: qos.pfc_enable")
    assert blame({"a": 1}, ["b: wrong"]) == "--set a=1: b: wrong"


@pytest.mark.parametrize("sets, says", [
    (["qos.pfc_enable=[3],[9]"], "--set qos.pfc_enable=[9]: qos.pfc_enable: classes [9]"),
    (["qos.nonsense=1"], "--set qos.nonsense=1: qos.nonsense: unknown field"),
    (["flows.9.qps=1"], "--set flows.9.qps: flows.9 is not an index of the 4 items"),
    (["fabric.fabric_link_mbps=5,-1", "flows.0.qps=1,2"],
     "--set fabric.fabric_link_mbps=-1: fabric.fabric_link_mbps"),
    (["flows.0.qps=1,100"], "--set flows.0.qps=100: flows.0.qps"),
])
def test_every_point_is_validated_before_anything_runs(sets: list[str], says: str) -> None:
    with pytest.raises(SweepError) as info:
        plan_sweep([INCAST], sets, 1)
    assert str(info.value).startswith(says), str(info.value)
    assert "\n" not in str(info.value)


def test_cli_bad_key_is_one_line_before_any_run(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["sweep", str(INCAST), "--set", "qos.ecn_typo=1,2",
                                 "--out", str(tmp_path / "s")])
    assert r.exit_code == 2
    out = r.output.strip()
    assert out.startswith("error: --set qos.ecn_typo=1: qos.ecn_typo: unknown field")
    assert len(out.splitlines()) == 1 and not (tmp_path / "s").exists()


def _headline(goodput: float, pfc: int, victim: float | None = None) -> dict:
    return {"goodput_mbps": goodput, "pfc_frames": pfc, "victim_slowdown": victim}


def test_aggregate_median_and_spread_per_point() -> None:
    pts = [{"k": 1}, {"k": 2}, {"k": 3}]
    runs = [RunRecord(0, 1, "a", _headline(4.0, 10), True),
            RunRecord(0, 2, "b", _headline(6.0, 30), False),
            RunRecord(0, 3, "c", _headline(5.0, 20, 2.0), True),
            RunRecord(1, 1, "d", _headline(1, 0))]
    rows = aggregate(pts, runs)
    assert [r["point"] for r in rows] == [1, 2]  # point 3 has no run
    assert rows[0]["runs"] == 3 and rows[0]["faithful"] == 2  # an unknown verdict is not one
    assert rows[1]["faithful"] == 0
    assert rows[0]["goodput_mbps"] == (5.0, 4.0, 6.0)
    assert rows[0]["victim_slowdown"] == (2.0, 2.0, 2.0)
    assert rows[1]["victim_slowdown"] is None and rows[1]["jain"] is None
    csv_rows = table_csv_rows(rows, ["k"])
    header = csv_rows[0]
    assert header[:4] == ["point", "k", "runs", "faithful"]
    line = dict(zip(header, csv_rows[1], strict=True))
    assert (line["goodput_mbps_median"], line["goodput_mbps_min"],
            line["goodput_mbps_max"]) == (5.0, 4.0, 6.0)
    assert dict(zip(header, csv_rows[2], strict=True))["jain_median"] == ""
    md = table_markdown(rows, ["k"])
    assert md[2].startswith("| 1 | 1 | 3 | 2 of 3 | 5 [4, 6] |") and "| 2 |" in md[3]


def _fake_run(interrupt_at: int):
    """A stand-in for run_scenario: a results folder per call with a headline made from the
    point's flows.0.qps; Ctrl-C on call number ``interrupt_at``."""
    calls = []

    def run(sc, root: Path, _progress):
        calls.append(root)
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        d = root / f"{sc.cfg.name}-run"
        d.mkdir(parents=True)
        qps = sc.extras.flows[0].qps
        return SimpleNamespace(results_dir=d, summary={"headline": _headline(qps * 1.0, qps)})
    return run


def test_sweep_writes_a_table_row_per_point_with_repeats(tmp_path: Path) -> None:
    plan = plan_sweep([INCAST], ["flows.0.qps=1,2"], repeat=2)
    records = run_sweep(plan, tmp_path, _fake_run(0), progress=lambda _m: None)
    assert len(records) == 4
    with open(tmp_path / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["flows.0.qps"], r["runs"], r["goodput_mbps_median"]) for r in rows] == [
        ("1", "2", "1.0"), ("2", "2", "2.0")]
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert sweep["interrupted"] is False and len(sweep["runs"]) == 4
    assert sweep["runs"][2]["run_dir"] == "runs/p02-r1/incast-run"
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "| flows.0.qps |" in (tmp_path / "table.md").read_text()
    assert len((tmp_path / "runs.csv").read_text().splitlines()) == 5


def test_interrupted_sweep_keeps_the_finished_runs_and_their_table(tmp_path: Path) -> None:
    plan = plan_sweep([INCAST], ["flows.0.qps=1,2,3"], repeat=1)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan, tmp_path, _fake_run(3), progress=lambda _m: None)
    with open(tmp_path / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["flows.0.qps"] for r in rows] == ["1", "2"]
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert sweep["interrupted"] is True and len(sweep["runs"]) == 2
    assert "(interrupted)" in (tmp_path / "table.md").read_text()


def test_repeat_and_out_folder_are_checked(tmp_path: Path) -> None:
    with pytest.raises(SweepError, match="--repeat 0"):
        plan_sweep([INCAST], ["flows.0.qps=1"], 0)
    with pytest.raises(SweepError, match="at least one --set"):
        plan_sweep([INCAST], [], 1)
    (tmp_path / "old.txt").write_text("a previous sweep")
    r = CliRunner().invoke(app, ["sweep", str(INCAST), "--set", "flows.0.qps=1,2",
                                 "--out", str(tmp_path)])
    assert r.exit_code == 2 and "already exists and is not an empty folder" in r.output


ALLREDUCE = REPO / "scenarios" / "allreduce.yaml"
ALLREDUCE_INCAST = REPO / "scenarios" / "allreduce-incast.yaml"


def test_several_scenarios_are_one_more_axis_in_one_table(tmp_path: Path) -> None:
    """README's modes table from one command: every mode with and without the incast."""
    plan = plan_sweep([ALLREDUCE, ALLREDUCE_INCAST], ["mode=roce-lossless,tcp"], repeat=1)
    assert plan.keys == ["scenario", "mode"]
    assert [(p["scenario"], p["mode"]) for p in plan.points] == [
        ("allreduce", "roce-lossless"), ("allreduce", "tcp"),
        ("allreduce-incast", "roce-lossless"), ("allreduce-incast", "tcp")]
    assert [(sc.cfg.name, sc.extras.mode, len(sc.extras.flows)) for sc in plan.scenarios] == [
        ("allreduce", "roce-lossless", 4), ("allreduce", "tcp", 4),
        ("allreduce-incast", "roce-lossless", 7), ("allreduce-incast", "tcp", 7)]
    run_sweep(plan, tmp_path, _fake_run(0), progress=lambda _m: None)
    with open(tmp_path / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["scenario"], r["mode"]) for r in rows] == [
        (p["scenario"], p["mode"]) for p in plan.points]
    assert "| scenario | mode |" in (tmp_path / "table.md").read_text()
    # several files need no --set: the files are the sweep
    assert [p["scenario"] for p in plan_sweep([ALLREDUCE, ALLREDUCE_INCAST], [], 1).points] \
        == ["allreduce", "allreduce-incast"]


def test_several_scenarios_name_the_file_a_bad_point_is_about(tmp_path: Path) -> None:
    with pytest.raises(SweepError) as info:  # allreduce has no flows.0 of its own
        plan_sweep([ALLREDUCE_INCAST, ALLREDUCE], ["flows.0.qps=2"], 1)
    assert str(info.value).startswith(f"{ALLREDUCE}: --set flows.0.qps=2: flows")
    with pytest.raises(SweepError, match="both named 'allreduce'"):
        plan_sweep([ALLREDUCE, ALLREDUCE], [], 1)
    with pytest.raises(SweepError, match="--set scenario: the scenario axis is the files"):
        plan_sweep([ALLREDUCE, ALLREDUCE_INCAST], ["scenario=a,b"], 1)
    r = CliRunner().invoke(app, ["sweep", str(ALLREDUCE), str(tmp_path / "none.yaml"),
                                 "--out", str(tmp_path / "s")])
    assert r.exit_code == 2 and "none.yaml" in r.output and "no such file" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "s").exists()
