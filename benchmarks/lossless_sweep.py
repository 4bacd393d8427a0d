"""Losslessness and occupancy fidelity over the seeded random incasts of the property test.

For each seed (tests/lossless_cases.py turns a seed into a shape and an incast): whether the
lossless class lost anything, and from the agents' telemetry the phantom's drift at the
resyncs (phantom minus the occupancy found), the bytes BMv2 held that the kernel had not got
yet, BMv2's longest hold of a packet, and the fidelity guard's verdict. Figures over all cases:
medians and 99th percentiles over every sample of a busy lossless queue.

Run as root: sudo .venv/bin/python -m benchmarks.lossless_sweep [--seeds 1001-1024] [--tag after]
Writes lossless_sweep-<tag>.json and .md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from testbed.results.telemetry import run_telemetry
from tests.lossless_cases import lossless_failures, make_case, run_case

OUT = Path(__file__).resolve().parent / "out"


def samples(run_dir: Path, column: str) -> list[int]:
    """A telemetry column over the busy lossless (class 3) queues of a run, where present."""
    return [getattr(r, column) for r in run_telemetry(run_dir)
            if r.tc == 3 and getattr(r, column) is not None and r.backlog_bytes > 0]


def pct(values: list[int], q: float) -> int | None:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else None


def seeds(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1001-1024")
    ap.add_argument("--tag", default="after")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    cases, drift, held, lags = [], [], [], []
    for seed in seeds(a.seeds):
        case = make_case(seed)
        with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
            r = run_case(case, Path(tmp))
            d = samples(Path(tmp), "phantom_drift_bytes")
            h = samples(Path(tmp), "held_bytes")
            lag = samples(Path(tmp), "bmv2_lag_max_us")
        drift += d
        held += h
        lags += lag
        problems = lossless_failures(r)
        fid = r.get("fidelity") or {}
        cases.append({"seed": seed, "case": case.describe(), "lossless": not problems,
                      "drops": r["kernel_drops_lossless"], "hidden_loss": r["hidden_loss"],
                      "problems": problems, "fidelity_ok": fid.get("ok"),
                      "fidelity_reasons": fid.get("reasons"),
                      "bmv2_lag_max_us": max(lag) if lag else None})
        print(f"{case.describe()}: {problems or 'lossless'}", flush=True)
    below = [-x for x in drift if x < 0]
    result = {
        "tag": a.tag, "cases": len(cases),
        "lossless_cases": sum(c["lossless"] for c in cases),
        "drops_total": sum(c["drops"] for c in cases),
        "flagged_not_faithful": sum(c["fidelity_ok"] is False for c in cases),
        "lossy_and_not_flagged": sum((not c["lossless"]) and c["fidelity_ok"] is not False
                                     for c in cases),
        "drift_abs_bytes": {"samples": len(drift), "median": pct([abs(x) for x in drift], 0.5),
                            "p99": pct([abs(x) for x in drift], 0.99)},
        "drift_below_bytes": {"samples": len(below), "median": pct(below, 0.5),
                              "p99": pct(below, 0.99), "max": max(below, default=None)},
        "held_bytes": {"samples": len(held), "median": pct(held, 0.5), "p99": pct(held, 0.99),
                       "max": max(held, default=None)},
        "bmv2_lag_us": {"median_of_samples": pct(lags, 0.5), "p99": pct(lags, 0.99),
                        "max": max(lags, default=None)},
        "per_case": cases,
    }
    (OUT / f"lossless_sweep-{a.tag}.json").write_text(json.dumps(result, indent=2))
    md = [f"# Lossless sweep ({a.tag}): {result['lossless_cases']}/{len(cases)} cases lossless",
          "", f"- lossless-class drops in all: {result['drops_total']}",
          f"- runs the fidelity guard flagged: {result['flagged_not_faithful']}; lossy and not "
          f"flagged: {result['lossy_and_not_flagged']}",
          f"- drift |phantom - occupancy| at resyncs: {result['drift_abs_bytes']}",
          f"- phantom below the occupancy: {result['drift_below_bytes']}",
          f"- bytes BMv2 held at a resync: {result['held_bytes']}",
          f"- BMv2's longest hold of a packet per sample (us): {result['bmv2_lag_us']}", "",
          "| seed | case | lossless | drops | fidelity ok |", "|---|---|---|---|---|"]
    md += [f"| {c['seed']} | {c['case']} | {c['lossless']} | {c['drops']} | "
           f"{c['fidelity_ok']} |" for c in cases]
    (OUT / f"lossless_sweep-{a.tag}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md[:8]))


if __name__ == "__main__":
    main()
