"""Which link rate a shipped scenario still runs faithfully at: each scenario of ``--scenarios``
runs ``--runs`` times at each rate of ``--rates`` (every link set to it, nothing else changed),
interleaved, and the fidelity guard's verdict (testbed.analysis.fidelity) is counted. The capacity
benchmark's incasts carry one link's worth of packets however many senders they have; the
scenarios that load every link at once (the deadlock runs: four hosts sending to each other
over 32 QPs) are what hold the default link rate (docs/PERFORMANCE.md).

Run as root: sudo .venv/bin/python -m benchmarks.scenario_rates [--scenarios deadlock-control]
[--rates 10,15] [--runs 3] [--realtime 10,0] (the agents' agent.realtime_priority, each value a
variant, interleaved; default: the scenario's own) [--tag scenario_rates]. Writes TAG.json and
TAG.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import yaml

from testbed.machine.state import fabric_lock
from testbed.run.scenario import parse_scenario
from testbed.run.scenario_run import run_scenario

REPO = Path(__file__).resolve().parent.parent

#: Figures of the fidelity guard's failed checks (testbed.analysis.fidelity.checks, by name), scaled
#: from its units (us, bytes) to the table's (ms, KB).
FIGURES = {"bmv2_lag_ms": ("bmv2_lag", 1e-3), "phantom_below_kb": ("phantom_below", 1e-3),
           "agent_reaction_ms": ("agent_reaction", 1e-3)}


def one_run(name: str, rate: float, realtime: int | None = None) -> dict:
    data = yaml.safe_load((REPO / "scenarios" / f"{name}.yaml").read_text())
    data.setdefault("fabric", {}).update(host_link_mbps=rate, fabric_link_mbps=rate)
    if realtime is not None:
        data.setdefault("agent", {})["realtime_priority"] = realtime
    with tempfile.TemporaryDirectory() as tmp, fabric_lock():
        res = run_scenario(parse_scenario(data, name), Path(tmp), progress=lambda _m: None)
        summary = json.loads((res.results_dir / "summary.json").read_text())
    fid = summary.get("fidelity") or {}
    failed = {c["name"]: c["value"] for c in fid.get("checks", []) if not c["ok"]}
    figs = {k: (round(failed[name] * scale) if name in failed else None)
            for k, (name, scale) in FIGURES.items()}
    return {"scenario": name, "rate_mbps": rate, "realtime": realtime,
            "faithful": bool(fid.get("ok")),
            "reasons": fid.get("reasons", []), "watchdog_events": len(summary["watchdog_events"]),
            **figs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default="deadlock-control")
    ap.add_argument("--rates", default="10,15")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--realtime", help="agent.realtime_priority values to compare, e.g. 10,0 "
                    "(default: the scenario's own)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--tag", default="scenario_rates", help="output file name")
    ap.add_argument("--redraw", type=Path, help="no runs: write the table of a saved "
                    "scenario_rates.json to TAG.md")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.redraw:
        runs = json.loads(args.redraw.read_text())
    else:
        names, rates = args.scenarios.split(","), [float(r) for r in args.rates.split(",")]
        rts = [int(r) for r in args.realtime.split(",")] if args.realtime else [None]
        runs = []
        for i in range(args.runs):
            for name in names:
                for rate in rates if i % 2 == 0 else rates[::-1]:  # alternate the order
                    for rt in rts if i % 2 == 0 else rts[::-1]:
                        runs.append(one_run(name, rate, rt))
                        print(json.dumps(runs[-1]), flush=True)
        (args.out / f"{args.tag}.json").write_text(json.dumps(runs, indent=1) + "\n")
    md = markdown(runs)
    (args.out / f"{args.tag}.md").write_text(md)
    print(md)


def markdown(runs: list[dict]) -> str:
    """One row per scenario and rate, in the order they first ran."""
    variants = list(dict.fromkeys(r.get("realtime") for r in runs))
    agents = variants != [None]  # a column for the agents' scheduling when it was varied
    lines = [f"| scenario | link rate |{' agents |' if agents else ''} faithful runs | BMv2's "
             "longest hold (ms) | phantom below the queue (KB) | agent reaction over budget "
             "(ms) |", "|---|---|" + ("---|" if agents else "") + "---|---|---|---|"]

    def span(rs: list[dict], key: str) -> str:
        xs = [r[key] for r in rs if r[key] is not None]
        if not xs:
            return "-"
        return f"{min(xs)}" if min(xs) == max(xs) else f"{min(xs)}-{max(xs)}"

    for name in dict.fromkeys(r["scenario"] for r in runs):
        for rate in sorted({r["rate_mbps"] for r in runs if r["scenario"] == name}):
            for rt in variants:
                rs = [r for r in runs if r["scenario"] == name and r["rate_mbps"] == rate
                      and r.get("realtime") == rt]
                if not rs:
                    continue
                who = (f" {f'SCHED_FIFO {rt}' if rt else 'nice alone'} |" if agents else "")
                lines.append(f"| {name} | {rate:g} Mbit/s |{who} {sum(r['faithful'] for r in rs)}"
                             f" of {len(rs)} | {span(rs, 'bmv2_lag_ms')} | "
                             f"{span(rs, 'phantom_below_kb')} | {span(rs, 'agent_reaction_ms')} |")
    return ("Each run's fidelity verdict (testbed.analysis.fidelity); the figures are those "
            "the guard quotes when it flags a run (the limits: fidelity.bmv2_lag_ms, the headroom, "
            "qos.pfc.reaction_ms).\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
