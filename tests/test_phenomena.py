"""The figures that show a phenomenon in a results folder (testbed.analysis.phenomena), on numbers
and files made up here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from testbed.analysis.phenomena import (
    convergence_time,
    flow_goodput_bps,
    imbalance,
    jain_index,
    link_shares,
    median_fct_s,
    p4_drops,
    read_p4_counters,
    window_rate,
)
from testbed.config.constants import DROP_NO_ROUTE, DROP_PFC_CONSUMED, NUM_DROP_REASONS
from tests.synthetic_run import qp_row
from traffic.endpoint_telemetry import QP_COLUMNS


def test_imbalance_even_and_polarized() -> None:
    assert imbalance([5, 5, 5, 5]) == pytest.approx(1.0)
    assert imbalance([0, 0, 20, 0]) == pytest.approx(4.0)  # one of four links carries it all
    assert imbalance([3, 1]) == pytest.approx(1.5)
    assert imbalance([0, 0]) == 0.0


def test_jain_index_bounds() -> None:
    assert jain_index([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain_index([9.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_index([2.0, 1.0]) == pytest.approx(9 / 10)
    with pytest.raises(ValueError):
        jain_index([])


def test_window_rate_of_a_cumulative_series() -> None:
    s = [(0.0, 0.0), (1.0, 100.0), (2.0, 300.0), (3.0, 600.0)]
    assert window_rate(s, 1.0, 3.0) == pytest.approx(250.0)
    assert window_rate(s, 1.5, 2.5) == pytest.approx(200.0)  # readings at 1.0 and 2.0
    with pytest.raises(ValueError):
        window_rate(s, 2.0, 2.0)


def ramp(rates: list[tuple[float, float]], end: float, step: float = 0.1) -> list:
    """A cumulative series growing at piecewise-constant rates [(from_t, rate), ...]."""
    out, total, t = [], 0.0, 0.0
    while t <= end + 1e-9:
        out.append((round(t, 6), total))
        rate = [r for t0, r in rates if t0 <= t][-1]
        total += rate * step
        t += step
    return out


def test_convergence_time_after_the_last_start() -> None:
    # b joins at 2 s at a tenth of a's rate; they meet at 4 s and stay together
    a = ramp([(0, 10.0), (2, 9.0), (4, 5.0)], 10)
    b = ramp([(0, 0.0), (2, 1.0), (4, 5.0)], 10)
    t = convergence_time({"a": a, "b": b}, start_s=2.0, end_s=10.0, window_s=1.0, threshold=0.95)
    assert t is not None and 2.0 <= t <= 3.0 + 1e-9
    # never equal: never converges
    c = ramp([(0, 1.0)], 10)
    assert convergence_time({"a": a, "c": c}, 2.0, 10.0, threshold=0.95) is None


def write_counters(path: Path, rows: list[tuple]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "switch", "counter", "index", "packets", "bytes"])
        w.writerows(rows)


def test_p4_counters_last_sample_and_real_drops(tmp_path: Path) -> None:
    p = tmp_path / "p4_counters.csv"
    write_counters(p, [
        (1.0, "leaf1", "RoceEgress.tx_port", 2, 10, 1000),
        (2.0, "leaf1", "RoceEgress.tx_port", 2, 30, 3000),
        (2.0, "leaf1", "RoceIngress.drops", 3 * NUM_DROP_REASONS + DROP_PFC_CONSUMED, 50, 0),
        (2.0, "leaf1", "RoceIngress.drops", 3 * NUM_DROP_REASONS + DROP_NO_ROUTE, 2, 0)])
    cells = read_p4_counters(p)
    assert cells[("leaf1", "RoceEgress.tx_port", 2)] == (30, 3000)
    assert p4_drops(cells) == 2  # consumed PFC frames are not a loss


def test_link_shares_over_a_leafs_uplinks(tmp_path: Path) -> None:
    ports = [{"number": 1, "peer": "h1"}, {"number": 2, "peer": "spine1"},
             {"number": 3, "peer": "spine2"}]
    (tmp_path / "topology.json").write_text(json.dumps(
        {"leaves": [{"name": "leaf1", "ports": ports}], "spines": []}))
    write_counters(tmp_path / "p4_counters.csv", [
        (1.0, "leaf1", "RoceEgress.tx_port", 1, 9, 9000),
        (1.0, "leaf1", "RoceEgress.tx_port", 2, 3, 3000),
        (1.0, "leaf1", "RoceEgress.tx_port", 3, 1, 1000)])
    assert link_shares(tmp_path, "leaf1", "spine") == {2: 0.75, 3: 0.25}


def test_flow_goodput_from_the_senders_series(tmp_path: Path) -> None:
    d = tmp_path / "endpoints" / "h2"
    d.mkdir(parents=True)
    with open(d / "qp_timeseries.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([c for c, _ in QP_COLUMNS])
        for t in range(5):  # two QPs of one flow, 1000 and 500 bytes/s; another QP ignored
            w.writerows([qp_row(t, 4096, "requester", 1000 * t),
                         qp_row(t, 4097, "requester", 500 * t),
                         qp_row(t, 4200, "requester", 99 * t),
                         qp_row(t, 32768, "responder", 7 * t)])
    summary = {"flows": {"a": {"src": "h2", "qps": [{"qpn": 4096}, {"qpn": 4097}]}}}
    assert flow_goodput_bps(tmp_path, summary, 1.0, 3.0) == {"a": pytest.approx(8 * 1500)}


def test_median_fct_of_a_hosts_messages(tmp_path: Path) -> None:
    d = tmp_path / "endpoints" / "h1"
    d.mkdir(parents=True)
    (d / "messages.csv").write_text("qpn,msg_id,kind,size,posted_s,completed_s,fct_s\n"
                                    "1,0,write,65536,0,0.2,0.2\n1,1,write,65536,0,0.5,0.5\n"
                                    "1,2,write,65536,0,0.3,0.3\n")
    assert median_fct_s(tmp_path, "h1") == pytest.approx(0.3)
    (d / "messages.csv").write_text("qpn,msg_id,kind,size,posted_s,completed_s,fct_s\n")
    assert median_fct_s(tmp_path, "h1") is None
