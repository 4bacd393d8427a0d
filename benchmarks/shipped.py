"""Every shipped scenario and lab, at the rate it ships with: how many of ``--runs`` runs the
fidelity guard calls faithful, beside what the budget said before each run (issue #32: "every
shipped scenario and lab faithful at its rate, 3 runs each").

What runs: each ``scenarios/*.yaml``, and each lab's scenario files (``files:`` in its
``lab.yaml``) as a student who finished the lab has them: the ``solution/`` copy where there is
one, else the shipped file; a file that is not a scenario with flows (lab 1's fabric and
answers) is left out. Nothing is changed in them (rates, seeds, durations): the runs are what a
user gets from ``sudo testbed run FILE``. The files run round-robin, ``--runs`` rounds, so a
noisy minute spreads over many files instead of sinking one.

Run as root: sudo .venv/bin/python -m benchmarks.shipped [--only NAME,NAME] [--runs 3]
[--tag shipped]; writes TAG.json and TAG.md to benchmarks/out; ``--redraw TAG.json`` rewrites
the table alone.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def shipped_files() -> list[tuple[str, Path]]:
    """(label, path) of every shipped scenario, then every lab's scenario files."""
    out = [(p.stem, p) for p in sorted((REPO / "scenarios").glob("*.yaml"))]
    for lab in sorted((REPO / "labs").iterdir()):
        meta = lab / "lab.yaml"
        if not meta.is_file():
            continue
        for name in yaml.safe_load(meta.read_text()).get("files", []):
            path = lab / "solution" / name
            path = path if path.is_file() else lab / name
            data = yaml.safe_load(path.read_text())
            if isinstance(data, dict) and data.get("flows"):
                out.append((f"{lab.name}/{'solution/' if 'solution' in path.parts else ''}"
                            f"{name}", path))
    return out


def one_run(label: str, path: Path) -> dict:
    from testbed.machine.state import fabric_lock
    from testbed.run.scenario import load_scenario
    from testbed.run.scenario_run import run_scenario

    sc = load_scenario(path)
    with tempfile.TemporaryDirectory() as tmp, fabric_lock():
        t0 = time.monotonic()
        res = run_scenario(sc, Path(tmp), progress=lambda _m: None)
        took = time.monotonic() - t0
        summary = json.loads((res.results_dir / "summary.json").read_text())
    fid = summary.get("fidelity") or {}
    budget = summary.get("budget") or {}
    need = (budget.get("cores_needed") or {}).get("total")
    head = summary.get("headline") or {}
    return {"file": label, "rate_mbps": budget.get("host_link_mbps"),
            "faithful": fid.get("ok") is True,
            "reasons": list(fid.get("reasons") or [])
            + [f"unknown: {u}" for u in fid.get("unknown") or []],
            "budget": budget.get("status"), "cores_needed": need,
            "cores_limit": budget.get("cores_limit"),
            "lossless_drops": head.get("lossless_drops"),
            "retransmitted": head.get("retransmitted"), "seconds": round(took, 1)}


def markdown(doc: dict) -> str:
    runs = doc["runs"]
    lines = [f"Every shipped scenario and lab file at its own rate, {doc['args']['runs']} runs "
             f"each, round-robin. Made by `{doc['command']}` on {doc['machine']} "
             f"({doc['started']}).", "",
             "| file | link rate | budget before the run (cores needed of limit) | faithful "
             "runs | why flagged |", "|---|---|---|---|---|"]
    for label in dict.fromkeys(r["file"] for r in runs):
        rs = [r for r in runs if r["file"] == label]
        needs = sorted({r["cores_needed"] for r in rs if r["cores_needed"] is not None})
        status = sorted({r["budget"] or "unknown" for r in rs})
        limit = next((r["cores_limit"] for r in rs if r["cores_limit"] is not None), None)
        budget = (f"{needs[0]:.2f} of {limit:.2f}: {'/'.join(status)}" if needs and limit
                  else "/".join(status))
        why = sorted({w for r in rs if not r["faithful"] for w in r["reasons"]})
        lines.append(f"| {label} | {rs[0]['rate_mbps']:g} Mbit/s | {budget} | "
                     f"{sum(r['faithful'] for r in rs)} of {len(rs)} | "
                     f"{'; '.join(why) if why else '-'} |")
    ok = sum(r["faithful"] for r in runs)
    lines += ["", f"All: {ok} of {len(runs)} runs faithful."]
    return "\n".join(lines) + "\n"


def main() -> None:
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated labels (as in the table) to run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--tag", default="shipped")
    ap.add_argument("--redraw", type=Path, help="no runs: redraw TAG.md from a saved json")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.redraw:
        doc = json.loads(args.redraw.read_text())
    else:
        files = shipped_files()
        if args.only:
            wanted = set(args.only.split(","))
            files = [f for f in files if f[0] in wanted]
        doc = {"command": "sudo .venv/bin/python -m benchmarks.shipped " + " ".join(sys.argv[1:]),
               "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} "
                          "cores",
               "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "args": {"runs": args.runs}, "runs": []}
        for _ in range(args.runs):
            for label, path in files:
                doc["runs"].append(one_run(label, path))
                print(json.dumps(doc["runs"][-1]), flush=True)
                (args.out / f"{args.tag}.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(doc)
    (args.out / f"{args.tag}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
