"""A small synthetic results folder, written the way a run writes one (the same writers and
columns), with figures chosen so that every headline figure is known in advance.

Fabric: 2 spines, 2 leaves, 2 hosts per leaf, every link 10 Mbit/s (h1, h2 on leaf1; h3, h4 on
leaf2). Leaf ports 1-2 go to hosts, 3 to spine1, 4 to spine2; spine port 1 to leaf1, 2 to
leaf2. The senders run from t=1 to t=5 on the run's clock. Flows, all starting at 0:

* ``a``   h3 -> h1, 1 QP: 1,000,000 bytes in by t=3 (4 Mbit/s over 2 s); 4 messages of FCT
  0.1, 0.2, 0.3, 0.4 s; 3 retransmissions, 1 NAK; its responder sent 6 CNPs, saw 8 CE marks.
* ``b``   h4 -> h1, 1 QP: 500,000 bytes by t=3 (2 Mbit/s); no message completed.
* ``victim`` h2 -> h4, 1 QP: 250,000 bytes by t=3 (1 Mbit/s; alone it would get 10).

Switches: spine1->leaf1 sent 5,000,000 bytes between t=1 and t=5 (10 Mbit/s, utilization 1),
spine2->leaf1 2,500,000 (0.5), and more after t=5 (outside the window); leaf1 sent spine1 40
PFC frames (spine1's port paused 1.5 s). leaf1's port to h1 dropped 7 packets in class 0
(lossy); leaf2's port to h3 dropped 2 in class 3. P4 counters: 16 ECN marks, and leaf2 sent
9 PFC frames toward h3, whose endpoint stood paused 0.8 s.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from testbed.config.models import FabricConfig
from testbed.results.telemetry import TelemetryRow, telemetry_writer
from testbed.topology.graph import build_topology
from traffic.endpoint_telemetry import MESSAGE_COLUMNS, QP_COLUMNS
from traffic.flows import FlowSpec, assign_qps

FLOWS = [
    {"name": "a", "src": "h3", "dst": "h1", "duration_s": 2},
    {"name": "b", "src": "h4", "dst": "h1", "duration_s": 2},
    {"name": "victim", "src": "h2", "dst": "h4", "duration_s": 2},
]
FINAL = {"a": 1_000_000, "b": 500_000, "victim": 250_000}


def qp_row(t: float, qpn: int, role: str, nbytes: int, **extra) -> list:
    row = {"t_s": f"{t:.4f}", "qpn": qpn, "role": role, "tc": 3, "rate_bps": "",
           "target_bps": "", "alpha": "", "goodput_bps": "0", "bytes": nbytes,
           "packets_sent": 0, "retransmitted": 0, "naks": 0, "timeouts": 0,
           "cnps_received": 0, "cnps_sent": 0, "ce_marked": 0, "paused_s": "0.0000"}
    row.update(extra)
    return [row[c] for c, _ in QP_COLUMNS]


def _write_endpoints(d: Path) -> None:
    specs = [FlowSpec.model_validate(f) for f in FLOWS]
    qps = assign_qps(specs)
    rows: dict[str, list[list]] = {f"h{i}": [] for i in range(1, 5)}
    msgs: dict[str, list[list]] = {f"h{i}": [] for i in range(1, 5)}
    for spec in specs:
        q = qps[spec.name][0]
        final = FINAL[spec.name]
        extra = {"cnps_sent": 6, "ce_marked": 8} if spec.name == "a" else {}
        for t, part in ((1.5, final // 4), (2.5, final // 2), (3.0, final), (3.5, final)):
            rows[spec.dst].append(qp_row(t, q.responder_qpn, "responder", part,
                                          goodput_bps=str(part * 8), **extra))
            paused = "0.8000" if spec.src == "h3" and t >= 3 else "0.0000"
            rows[spec.src].append(qp_row(t, q.requester_qpn, "requester", part,
                                          paused_s=paused))
        if spec.name == "a":
            for i, fct in enumerate((0.1, 0.2, 0.3, 0.4), 1):
                msgs[spec.src].append([q.requester_qpn, i, "write", 65536, "1.000000",
                                       f"{1 + fct:.6f}", f"{fct:.6f}"])
    for host in rows:
        (d / "endpoints" / host).mkdir(parents=True)
        for name, cols, body in (("qp_timeseries.csv", QP_COLUMNS, rows[host]),
                                 ("messages.csv", MESSAGE_COLUMNS, msgs[host])):
            with open(d / "endpoints" / host / name, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow([c for c, _ in cols])
                w.writerows(body)


def _tel(t: float, sw: str, port: int, tc: int, sent: int = 0, drops: int = 0, pfc: int = 0,
         paused_s: float = 0.0) -> TelemetryRow:
    return TelemetryRow(t, sw, port, tc, 0, 0, drops, sent, sent // 1000, False, pfc,
                        paused_s)


def _write_telemetry(d: Path) -> None:
    tel = d / "telemetry"
    tel.mkdir()
    samples = {
        "spine1": [(1.0, 1, 3, 0, 0, 0, 0.0), (5.0, 1, 3, 5_000_000, 0, 40, 1.5),
                   (6.0, 1, 3, 6_000_000, 0, 40, 1.5)],
        "spine2": [(1.0, 1, 3, 0, 0, 0, 0.0), (5.0, 1, 3, 2_500_000, 0, 0, 0.0),
                   (6.0, 1, 3, 9_000_000, 0, 0, 0.0)],
        "leaf1": [(1.0, 1, 0, 0, 0, 0, 0.0), (5.0, 1, 0, 100_000, 7, 0, 0.0)],
        "leaf2": [(1.0, 1, 3, 0, 0, 0, 0.0), (5.0, 1, 3, 100_000, 2, 0, 0.0)],
    }
    for sw, rows in samples.items():
        with telemetry_writer(tel, sw) as w:
            for t, port, tc, sent, drops, pfc, paused in rows:
                w.write(_tel(t, sw, port, tc, sent, drops, pfc, paused))


def _write_counters(d: Path) -> None:
    with open(d / "p4_counters.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "switch", "counter", "index", "packets", "bytes"])
        w.writerow([2.0, "leaf1", "RoceIngress.lossless.ecn_marked", 27, 5, 0])
        w.writerow([4.0, "leaf1", "RoceIngress.lossless.ecn_marked", 27, 12, 0])
        w.writerow([4.0, "spine1", "RoceIngress.lossless.ecn_marked", 11, 4, 0])
        w.writerow([4.0, "leaf2", "RoceEgress.pfc_egress.pfc_tx", 1 * 8 + 3, 9, 0])


def summary(with_drops: bool = True) -> dict:
    flows = {"a": {"src": "h3", "dst": "h1", "bytes_received": 1_000_000, "qps": [
        {"qpn": 0x1000, "bytes_received": 1_000_000, "retransmitted": 3, "naks": 1,
         "cnps_received": 5}]},
             "b": {"src": "h4", "dst": "h1", "bytes_received": 500_000, "qps": [
                 {"qpn": 0x1040, "bytes_received": 500_000}]},
             "victim": {"src": "h2", "dst": "h4", "bytes_received": 250_000, "qps": [
                 {"qpn": 0x1080, "bytes_received": 250_000}]}}
    s = {"scenario": "synthetic", "duration_s": 4.0, "flows": flows,
         "timeline": [{"t_s": 1.0, "event": "start"}, {"t_s": 5.0, "event": "senders stop"}],
         "hidden_loss": {"leaf1": 1, "spine1": 2}}
    if with_drops:
        s["kernel_drops_lossless"] = 2
    return s


def write_run(d: Path, with_summary: bool = True) -> Path:
    """The synthetic run's folder at ``d``; with_summary: summary.json too (no headline)."""
    d.mkdir(parents=True)
    cfg = FabricConfig.model_validate({"name": "synthetic", "fabric": {
        "spines": 2, "leaves": 2, "hosts_per_leaf": 2,
        "host_link_mbps": 10, "fabric_link_mbps": 10}})
    (d / "topology.json").write_text(build_topology(cfg).to_json())
    (d / "scenario.json").write_text(json.dumps({"config": cfg.model_dump(mode="json"),
                                                 "flows": FLOWS}))
    _write_endpoints(d)
    _write_telemetry(d)
    _write_counters(d)
    if with_summary:
        (d / "summary.json").write_text(json.dumps(summary()))
    return d
