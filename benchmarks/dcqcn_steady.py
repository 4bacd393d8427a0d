"""DCQCN in steady state: PFC frames per second once congestion control has settled.

The SONiC RoCEv2 test plan expects "few or no PFC" on a long incast once DCQCN has converged:
ECN marks and CNPs do the work, PFC is the backstop. This runs the same long 4:1 incast (2x3x2
fabric, four senders on other leaves into h1) twice, with PFC only and with ECN + DCQCN (the
defaults of testbed/config/models.py and traffic/dcqcn.py), and reports for the second half of each
run: PFC frames sent per second by all switches, ECN marks per second, CNPs the senders got,
and the receiver's goodput.

Run as root: sudo .venv/bin/python -m benchmarks.dcqcn_steady [--seconds 30]
Writes dcqcn_steady.json and dcqcn_steady.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from collections import defaultdict
from pathlib import Path

from testbed.run.scenario import parse_scenario
from testbed.run.scenario_run import run_scenario

OUT = Path(__file__).resolve().parent / "out"
SENDERS = ["h3", "h4", "h5", "h6"]


def scenario(mode: str, seconds: float) -> dict:
    dcqcn = mode == "ecn+dcqcn"
    return {
        "name": f"steady-{'dcqcn' if dcqcn else 'pfc'}",
        "fabric": {"spines": 2, "leaves": 3, "hosts_per_leaf": 2},
        "qos": {"pfc_enable": [3], **({} if dcqcn else {"ecn": {}})},
        "endpoints": {"dcqcn": dcqcn},
        "duration_s": seconds, "settle_s": 1,
        "flows": [{"name": f"f{i}", "src": s, "dst": "h1", "qps": 1, "message_bytes": 65536,
                   "duration_s": seconds} for i, s in enumerate(SENDERS)],
    }


def counter_deltas(path: Path, start: float, end: float) -> dict[str, int]:
    """Each counter's increase between the samples nearest start and end, over all cells."""
    first: dict[tuple, int] = {}
    last: dict[tuple, int] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            t = float(r["t_s"])
            key = (r["switch"], r["counter"], r["index"])
            if t >= start and key not in first:
                first[key] = int(r["packets"])
            if t <= end:
                last[key] = int(r["packets"])
    out: dict[str, int] = defaultdict(int)
    for key, v in last.items():
        out[key[1]] += v - first.get(key, v)
    return dict(out)


def measure(mode: str, seconds: float, root: Path) -> dict:
    sc = parse_scenario(scenario(mode, seconds), mode)
    res = run_scenario(sc, root, progress=lambda m: print(f"  [{mode}] {m}", flush=True))
    tl = {e["event"]: e["t_s"] for e in res.summary["timeline"]}
    start, stop = tl["start"], tl["senders stop"]
    half = start + (stop - start) / 2
    d = counter_deltas(res.results_dir / "p4_counters.csv", half, stop)
    span = stop - half
    flows = res.summary["flows"]
    cnps = sum(q["cnps_received"] for f in flows.values() for q in f["qps"])
    return {
        "mode": mode, "seconds": seconds, "second_half_s": round(span, 2),
        "pfc_frames_per_s": round(d.get("RoceEgress.pfc_egress.pfc_tx", 0) / span, 2),
        "ecn_marks_per_s": round(d.get("RoceIngress.lossless.ecn_marked", 0) / span, 2),
        "cnps_received_total": cnps,
        "goodput_mbps": round(sum(f["bytes_received"] for f in flows.values()) * 8
                              / (stop - start) / 1e6, 3),
        "lossless_drops": res.summary.get("kernel_drops_lossless"),
        "fidelity_ok": (res.summary.get("fidelity") or {}).get("ok"),
        "fidelity_reasons": (res.summary.get("fidelity") or {}).get("reasons"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dcqcn-steady-") as tmp:
        rows = [measure(m, a.seconds, Path(tmp)) for m in ("pfc-only", "ecn+dcqcn")]
    pfc, dc = rows
    ratio = (dc["pfc_frames_per_s"] / pfc["pfc_frames_per_s"]) if pfc["pfc_frames_per_s"] else None
    result = {"runs": rows, "pfc_rate_ratio_dcqcn_to_pfc_only": ratio}
    (OUT / "dcqcn_steady.json").write_text(json.dumps(result, indent=2))
    md = ["# DCQCN in steady state (second half of a long 4:1 incast)", "",
          "| mode | PFC frames/s | ECN marks/s | CNPs (whole run) | goodput Mbit/s | "
          "lossless drops | fidelity ok |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['mode']} | {r['pfc_frames_per_s']} | {r['ecn_marks_per_s']} | "
           f"{r['cnps_received_total']} | {r['goodput_mbps']} | {r['lossless_drops']} | "
           f"{r['fidelity_ok']} |" for r in rows]
    md += ["", f"PFC rate with ECN + DCQCN / PFC only: {ratio}"]
    md += [f"- {r['mode']}: fidelity: {'; '.join(r['fidelity_reasons'] or ['ok'])}" for r in rows]
    (OUT / "dcqcn_steady.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
