"""Synthetic results folders for the lab checks' unit tests: the files `testbed run` writes
(summary.json, scenario.json, topology.json, p4_counters.csv, the agents' telemetry and events,
the endpoints' QP series), written with the project's own writers and columns, holding what a
test says the run showed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from testbed.results.telemetry import EventRow, TelemetryRow, events_writer, telemetry_writer
from testbed.run.scenario import parse_scenario
from traffic.endpoint_telemetry import QP_COLUMNS

#: A 2x2x2 fabric: h1, h2 on leaf1; h3, h4 on leaf2; leaf uplinks are ports 3 and 4.
BASE = {"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}, "duration_s": 4,
        "flows": []}


def flow(name: str, src: str, dst: str, qpn: int, nbytes: int, **q) -> dict:
    return {name: {"src": src, "dst": dst, "bytes_received": nbytes,
                   "qps": [{"qpn": qpn, "bytes_acked": nbytes, "bytes_received": nbytes,
                            "packets_sent": q.get("packets_sent", -(-nbytes // 4096)
                                                  + q.get("retransmitted", 0)),
                            "retransmitted": q.get("retransmitted", 0), "naks": 0,
                            "cnps_received": q.get("cnps", 0), "complete": True}]}}


def fake_run(root: Path, name: str, scenario: dict | None = None, flows: dict | None = None,
             counters: list[tuple] = (), telemetry: list[TelemetryRow] = (),
             events: list[EventRow] = (), qp_rows: dict[str, list[dict]] | None = None,
             stamp: str = "20260101-000000", **summary) -> Path:
    """A results folder ``root/<name>-<stamp>``; ``scenario``: the scenario's YAML as a dict
    (validated as `testbed run` would), ``counters``: (switch, counter, index, packets, bytes)."""
    data = {**BASE, **(scenario or {}), "name": name}
    sc = parse_scenario(data)
    d = root / f"{name}-{stamp}"
    (d / "telemetry").mkdir(parents=True)
    (d / "scenario.json").write_text(json.dumps(
        {"config": sc.cfg.model_dump(mode="json"), **sc.extras.model_dump(mode="json")}))
    (d / "topology.json").write_text(sc.topo.to_json())
    summ = {"scenario": name, "duration_s": sc.extras.duration_s, "flows": flows or {},
            "pfc_frames_sent": {}, "timeline": [{"t_s": 1.0, "event": "start"}],
            "kernel_drops_lossless": 0, "watchdog_events": [],
            "fidelity": {"ok": True, "reasons": [], "checks": []}, **summary}
    (d / "summary.json").write_text(json.dumps(summ))
    with open(d / "p4_counters.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "switch", "counter", "index", "packets", "bytes"])
        for c in counters:
            w.writerow([5.0, *c])
    for sw in {t.switch for t in telemetry}:
        with telemetry_writer(d / "telemetry", sw) as w:
            for t in telemetry:
                if t.switch == sw:
                    w.write(t)
    for sw in {e.switch for e in events}:
        with events_writer(d / "telemetry", sw) as w:
            for e in events:
                if e.switch == sw:
                    w.write(e)
    for host, rows in (qp_rows or {}).items():
        (d / "endpoints" / host).mkdir(parents=True)
        with open(d / "endpoints" / host / "qp_timeseries.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, [c for c, _ in QP_COLUMNS])
            w.writeheader()
            for r in rows:
                w.writerow({c: r.get(c, "") for c, _ in QP_COLUMNS})
    return d


def qp_series(qpn: int, send_bps: float, t_end: float, t_start: float = 1.0, step: float = 0.5,
              **extra) -> list[dict]:
    """A requester QP delivering a steady ``send_bps`` from t_start (run clock) to t_end."""
    rows, t = [], t_start
    while t <= t_end + 1e-9:
        rows.append({"t_s": t, "qpn": qpn, "role": "requester", "tc": 3,
                     "bytes": int(send_bps / 8 * (t - t_start)), **extra})
        t += step
    return rows


def queue(switch: str, port: int, t: float, tc: int = 3, **kw) -> TelemetryRow:
    base = {"backlog_bytes": 0, "backlog_packets": 0, "drops": 0, "sent_bytes": 0,
            "sent_packets": 0, "paused": False, "pfc_rx": 0, "paused_s": 0.0}
    return TelemetryRow(t, switch, port, tc, **{**base, **kw})
