"""report.html: the page's data and drawing without root; a real run's page in headless
Chromium (every figure rendered, no console error, no request but data: and file:)."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.report.data import (
    ECN_MARKED,
    TX_PORT_TC,
    EcnPoint,
    Series,
    dcqcn_series,
    ecn_points,
    host_pause_spans,
    pause_spans,
    queue_series,
)
from testbed.report.figures import line_chart, red_curve
from testbed.report.html import Block, render_page, write_html_report
from testbed.results.telemetry import P4CounterRow, TelemetryRow
from tests.browser import Browser, chromium
from tests.synthetic_run import qp_row
from traffic.endpoint_telemetry import QP_COLUMNS
from traffic.wire import NUM_TCS

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "testbed.cli"]

#: Opens every <details>, then describes each figure as the browser laid it out.
FIGURES_JS = """(() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const figs = [...document.querySelectorAll('figure.figure')].map(f => {
    const el = f.querySelector('svg, img');
    if (!el) return {missing: true};
    const r = el.getBoundingClientRect();
    return {tag: el.tagName.toLowerCase(), width: r.width, height: r.height,
            natural: el.tagName === 'IMG' ? el.naturalWidth : null,
            shapes: el.querySelectorAll('path, use, rect, line, polyline').length};
  });
  return {verdict: document.getElementById('verdict')?.innerText || '',
          sections: [...document.querySelectorAll('section h2')].map(h => h.innerText),
          cells: [...document.querySelectorAll('table td')].map(td => td.innerText), figs};
})()"""


# -- without root -------------------------------------------------------------------------------

def test_red_curve_is_zero_to_kmin_then_pmax_at_kmax_then_one() -> None:
    x, y = red_curve(8400, 42000, 0.2, 10_000)
    assert list(zip(x, y, strict=True))[:4] == [(0, 0), (8400, 0), (42000, 0.2), (42000, 1)]
    assert y[-1] == 1 and x[-1] > 42000


def _row(t: float, paused: bool, backlog: int = 0) -> TelemetryRow:
    return TelemetryRow(t, "leaf1", 3, 3, backlog, 1 if backlog else 0, 0, 0, 0, paused, 0, 0.0)


def test_pause_spans_follow_the_paused_samples() -> None:
    rows = [_row(0.0, False), _row(0.1, True), _row(0.2, True), _row(0.3, False),
            _row(0.4, True)]
    assert pause_spans(queue_series(rows)) == [("leaf1:3 tc3", [(0.1, pytest.approx(0.2)),
                                                                (0.4, 0.0)])]


def test_host_pause_spans_from_the_endpoints_paused_seconds(tmp_path: Path) -> None:
    d = tmp_path / "endpoints" / "h1"
    d.mkdir(parents=True)
    rows = [qp_row(t, q, "requester", 0, paused_s=str(p))
            for t, p in ((0.0, 0), (0.1, 0.05), (0.2, 0.1), (0.3, 0.1)) for q in (4096, 4097)]
    with open(d / "qp_timeseries.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([c for c, _ in QP_COLUMNS])
        w.writerows(rows)
    assert host_pause_spans(tmp_path) == [("h1 NIC tc3", [(0.0, pytest.approx(0.2))])]


def test_dcqcn_rate_summed_and_alpha_averaged_per_flow(tmp_path: Path) -> None:
    """Flow a's two QPs at 3 and 2 Mbit/s with alpha 0.5 and 0.3: 5 Mbit/s, alpha 0.4; a run
    without DCQCN (blank columns) has no DCQCN series at all."""
    d = tmp_path / "endpoints" / "h1"
    d.mkdir(parents=True)
    rows = [qp_row(t, q, "requester", 0, rate_bps=str(r), alpha=str(a))
            for t in (1.0, 1.5) for q, r, a in ((4096, 3e6, 0.5), (4097, 2e6, 0.3))]
    rows.append(qp_row(1.0, 0x8000, "responder", 0))
    with open(d / "qp_timeseries.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([c for c, _ in QP_COLUMNS])
        w.writerows(rows)
    summary = {"flows": {"a": {"src": "h1", "qps": [{"qpn": 4096}, {"qpn": 4097}]}}}
    rates, alphas = dcqcn_series(tmp_path, summary)
    assert [(s.label, s.t, s.y) for s in rates] == [("a", [1.0, 1.5], [5.0, 5.0])]
    assert alphas[0].label == "a" and alphas[0].y == [pytest.approx(0.4)] * 2
    with open(d / "qp_timeseries.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([c for c, _ in QP_COLUMNS])
        w.writerows([qp_row(1.0, 4096, "requester", 0)])
    assert dcqcn_series(tmp_path, summary) == ([], [])


def test_page_is_self_contained_escaped_and_has_the_verdict_on_top() -> None:
    verdict = {"ok": False, "reasons": ["BMv2 held a packet <200 ms>"], "checks": []}
    page = render_page("run <x>", [Block("Goodput", svg=line_chart(
        [Series("a", [0, 1], [1, 2])], "Mbit/s")), Block("Headline", kind="table",
        header=["flow"], rows=[["a & b"]])], verdict)
    assert page.index("NOT OK") < page.index("Goodput") < page.index("Headline")
    assert "run &lt;x&gt;" in page and "a &amp; b" in page and "&lt;200 ms&gt;" in page
    # nothing fetched: no external src or href, no stylesheet or script file
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", page)
    assert "<link" not in page and "<script src" not in page and "@import" not in page


def test_ecn_points_are_marks_over_packets_against_the_mean_backlog() -> None:
    idx = 3 * NUM_TCS + 3  # port 3, class 3
    counters = [P4CounterRow(t, "leaf1", name, idx, pk, 0) for t, name, pk in (
        (1.0, ECN_MARKED, 0), (1.0, TX_PORT_TC, 100), (2.0, ECN_MARKED, 10),
        (2.0, TX_PORT_TC, 140), (3.0, ECN_MARKED, 10), (3.0, TX_PORT_TC, 142))]
    rows = [_row(1.0, False, 5000), _row(1.5, False, 20000), _row(2.0, False, 30000),
            _row(2.5, False, 0)]
    # the last interval carried 2 packets: too few to give a share
    assert ecn_points(counters, queue_series(rows)) == [
        EcnPoint("leaf1:3 tc3", 25000.0, 0.25, 40)]


# -- a real run, in a real browser ------------------------------------------------------------

SCENARIO = {
    "name": "htmlrep", "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "duration_s": 3, "settle_s": 0.5, "endpoints": {"dcqcn": True}, "capture": ["h1"],
    "routes": [{"switch": "leaf1", "prefix": "10.0.2.0/24", "via": "spine1"}],
    "flows": [{"name": "a", "src": "h1", "dst": "h3", "qps": 4, "message_bytes": 16384,
               "duration_s": 2.5},
              {"name": "b", "src": "h2", "dst": "h3", "qps": 4, "message_bytes": 16384,
               "duration_s": 2.5, "kind": "send"}],
    "faults": [{"at_s": 1, "link_down": ["spine2", "leaf2"]},
               {"at_s": 2, "link_up": ["spine2", "leaf2"]}],
}


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    from testbed.run.scenario import parse_scenario
    from testbed.run.scenario_run import run_scenario

    res = run_scenario(parse_scenario(SCENARIO), tmp_path_factory.mktemp("html"),
                       progress=lambda _m: None)
    return res.results_dir


@pytest.mark.bmv2
def test_real_run_page_renders_in_chromium(real_run: Path) -> None:
    if chromium() is None:
        pytest.skip("needs Chromium for the page test: apt install chromium")
    page = real_run / "report.html"
    assert page.exists() and (real_run / "report.png").exists() and \
        (real_run / "report.md").exists()
    with Browser() as b:
        load = b.load(page, FIGURES_JS, screenshot=True)
    r = load.result
    assert load.console_errors == []
    assert all(u.startswith(("data:", "file:")) for u in load.requests), load.requests
    assert r["verdict"].startswith("FIDELITY"), r["verdict"][:200]
    for title in ("Headline", "Topology", "Goodput per flow", "DCQCN rate and alpha",
                  "Queue occupancy",
                  "Paused by PFC", "ECN marking against queue length",
                  "Message completion times", "Timeline", "Packet captures"):
        assert title in r["sections"], (title, r["sections"])
    # the topology, the flows' goodput, each flow's QPs, DCQCN rate and alpha, queues, pauses,
    # ECN, FCT, timeline
    assert len(r["figs"]) >= 11, r["figs"]
    for f in r["figs"]:
        assert not f.get("missing") and f["width"] > 100 and f["height"] > 50, f
        assert f["natural"] is None or f["natural"] > 0, f
        assert f["shapes"] > 5, f
    assert "captures/h1.pcap" in page.read_text()
    assert len(load.screenshot) > 50_000


@pytest.mark.bmv2
def test_report_html_command_redraws_the_page(real_run: Path) -> None:
    page = real_run / "report.html"
    page.unlink()
    r = subprocess.run([*CLI, "report", str(real_run), "--html"], capture_output=True,
                       text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert page.exists() and "Goodput per flow" in page.read_text()
    assert write_html_report(real_run) == page
