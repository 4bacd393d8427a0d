"""The pictures of README's "Experiments" section, from real runs: each experiment's scenario
runs here on real BMv2 switches (as `testbed run` runs it), then one figure per phenomenon goes
into docs/phenomena/NAME.png and the figures its caption quotes into docs/phenomena/NAME.json,
with the fidelity verdict of every run it was drawn from (``fidelity``: run -> ok, reasons).

    sudo .venv/bin/python docs/pictures.py                  # every picture, about 12 minutes
    sudo .venv/bin/python docs/pictures.py incast ecmp      # some of them
    sudo .venv/bin/python docs/pictures.py --keep runs/     # and keep the runs' folders
    .venv/bin/python docs/pictures.py --runs runs/          # draw again from kept runs

A picture is drawn only from runs the fidelity guard called faithful (their summary.json's
``fidelity.ok`` is true): a run it flagged, or one without a verdict, is refused with a line
that names it and says why, no picture nor figures are written for it, and the command exits
with status 1 once the other pictures are drawn.

The figures come from testbed.analysis.phenomena and testbed.analysis.headline_series, the same
readers the tests and the reports use. Takes the machine-wide fabric lock around each run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.analysis.deadlock import routed_queues  # noqa: E402
from testbed.analysis.headline_series import flow_goodput, run_pfc_frames, run_start  # noqa: E402
from testbed.analysis.phenomena import (  # noqa: E402
    delivered_bytes,
    flow_goodput_bps,
    imbalance,
    jain_index,
    link_shares,
    median_fct_s,
    pfc_frames_sent,
    retransmitted,
)
from testbed.machine.state import fabric_lock  # noqa: E402
from testbed.results.telemetry import run_telemetry  # noqa: E402
from testbed.run.scenario import load_scenario, parse_scenario  # noqa: E402
from testbed.run.scenario_run import run_scenario  # noqa: E402

OUT = REPO / "docs" / "phenomena"
Run = tuple[dict, Path]  # summary, results folder


class NotFaithful(Exception):
    """A run the fidelity guard did not call faithful: no picture is drawn from it."""


def verdict(label: str, summary: dict) -> dict:
    """The run's fidelity verdict as the picture's json records it; NotFaithful unless the
    guard called the run faithful (``fidelity.ok`` true)."""
    fid = summary.get("fidelity")
    if not isinstance(fid, dict) or "ok" not in fid:
        raise NotFaithful(f"run {label}: its summary.json has no fidelity verdict")
    if fid["ok"] is not True:
        why = "; ".join(fid.get("reasons") or []) or "no reason given"
        raise NotFaithful(f"run {label}: the fidelity guard did not call it faithful: {why}")
    return {"ok": True, "reasons": list(fid.get("reasons") or [])}


class Runs:
    """The runs one picture is drawn from, and their verdicts. Each run is made here (under
    ``root``, as ``testbed run`` makes it), or with ``saved`` read from the newest results
    folder under ``root/LABEL`` that an earlier ``--keep`` left."""

    def __init__(self, root: Path, saved: bool = False) -> None:
        self.root, self.saved = root, saved
        self.verdicts: dict[str, dict] = {}

    def __call__(self, name: str, change: Callable[[dict], None] | None = None,
                 label: str = "") -> Run:
        label = label or name
        if self.saved:
            summary, d = self._saved(label)
        else:
            data = yaml.safe_load((REPO / "scenarios" / f"{name}.yaml").read_text())
            if change is not None:
                change(data)
            print(f"running {label}", flush=True)
            with fabric_lock():
                res = run_scenario(parse_scenario(data, name), self.root / label,
                                   progress=lambda _m: None)
            summary, d = res.summary, res.results_dir
        self.verdicts[label] = verdict(label, summary)
        return summary, d

    def _saved(self, label: str) -> Run:
        found = sorted((p.parent for p in (self.root / label).glob("*/summary.json")),
                       key=lambda p: p.name)
        if not found:
            raise NotFaithful(f"run {label}: no results folder with a summary.json under "
                              f"{self.root / label}")
        d = found[-1]
        return json.loads((d / "summary.json").read_text()), d


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _total(series: dict[str, list[tuple[float, float]]], step: float = 0.1
           ) -> tuple[list[float], list[float]]:
    """The flows' goodput summed on a common time grid (each flow's last sample at each t)."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return [], []
    end = max(t for t, _ in pts)
    grid = [i * step for i in range(int(end / step) + 1)]
    total = []
    for t in grid:
        v = 0.0
        for s in series.values():
            last = [y for x, y in s if x <= t]
            v += last[-1] if last else 0.0
        total.append(v)
    return grid, total


def _save(fig, name: str, figures: dict, runs: Runs, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=80)
    (out / f"{name}.json").write_text(
        json.dumps({**figures, "fidelity": runs.verdicts}, indent=1) + "\n")
    print(f"wrote {out / name}.png: {figures}")


# -- one picture per phenomenon ----------------------------------------------------------------

def incast(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, (ax_g, ax_p) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    figures = {}
    for mode in ("pfc", "both", "dcqcn", "lossy"):
        summary, d = runs(f"incast-{mode}")
        t, total = _total(flow_goodput(d, summary))
        ax_g.plot(t, total, label=mode)
        pfc = run_pfc_frames(d, summary)
        ax_p.step([x for x, _ in pfc], [y for _, y in pfc], where="post", label=mode)
        figures[mode] = {"delivered_mb": round(delivered_bytes(summary) / 1e6, 2),
                         "pfc_frames": pfc_frames_sent(summary),
                         "retransmitted": retransmitted(summary),
                         "lossless_drops": summary["kernel_drops_lossless"]}
    ax_g.set_ylabel("goodput into h1 (Mbit/s)")
    ax_g.set_title("3:1 incast into a 10 Mbit/s link, four ways")
    ax_p.set_ylabel("PFC frames received")
    ax_p.set_xlabel("seconds since the senders started")
    for ax in (ax_g, ax_p):
        ax.legend(fontsize=8)
    _save(fig, "incast", figures, runs, out)


def victim(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    figures = {}
    for mode in ("pfc", "dcqcn"):
        summary, d = runs(f"victim-{mode}")
        g = flow_goodput(d, summary)["victim"]
        ax.plot([x for x, _ in g], [y for _, y in g], label=f"victim, {mode}")
        t = run_start(summary)
        figures[mode] = {"victim_mbps": round(
            flow_goodput_bps(d, summary, t + 2.5, t + 5.5)["victim"] / 1e6, 2)}
    ax.axhline(5.0, color="grey", linestyle=":", label="what it asks for (2 QPs x 2.5 Mbit/s)")
    ax.set_ylabel("victim goodput (Mbit/s)")
    ax.set_xlabel("seconds since the senders started (the victim starts at 2 s)")
    ax.set_title("congestion spreading: a flow to an idle host, beside a 4:1 incast")
    ax.legend(fontsize=8)
    _save(fig, "victim", figures, runs, out)


def ecmp(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    figures = {}
    width = 0.4
    for i, name in enumerate(("polarized", "entropy")):
        summary, d = runs(f"ecmp-{name}")
        shares = link_shares(d, "leaf1", "spine")
        ports = sorted(shares)
        ax.bar([j + (i - 0.5) * width for j in range(len(ports))],
               [shares[p] for p in ports], width, label=name)
        figures[name] = {"shares": [round(shares[p], 3) for p in ports],
                         "imbalance": round(imbalance([shares[p] for p in ports]), 2)}
    ax.set_xticks(range(len(ports)), [f"uplink {j + 1}" for j in range(len(ports))])
    ax.set_ylabel("share of leaf1's uplink bytes")
    ax.set_title("16 QPs from h1 to h2 over four uplinks: one UDP source port, or one per QP")
    ax.legend(fontsize=8)
    _save(fig, "ecmp", figures, runs, out)


def loss(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    rates = [0.0, 0.001, 0.01, 0.05]
    figures = {}
    for rate in rates:
        def change(data: dict, rate: float = rate) -> None:
            data["faults"][0]["rate"] = rate
        summary, d = runs("loss-gobackn", change, label=f"loss-{rate}")
        figures[str(rate)] = {
            "goodput_mbps": round(summary["headline"]["goodput_mbps"], 2),
            "fct_median_s": median_fct_s(d, "h1"),
            "retransmitted": retransmitted(summary)}
    labels = [f"{r:.1%}" for r in rates]
    ax.bar(labels, [figures[str(r)]["goodput_mbps"] for r in rates])
    ax.set_xlabel("random loss into the receiver (the rx_loss fault)")
    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_title("Go-Back-N: two senders into h3, PFC on; each loss resends a window")
    _save(fig, "loss", figures, runs, out)


def fairness(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
    figures = {}
    for ax, name in zip(axes, ("dcqcn-fairness", "dcqcn-fairness-connectx"), strict=True):
        summary, d = runs(name)
        for flow, g in flow_goodput(d, summary).items():
            ax.plot([x for x, _ in g], [y for _, y in g], label=flow, linewidth=1)
        t = run_start(summary)
        end = t + summary["duration_s"] - 0.5
        jain = jain_index(list(flow_goodput_bps(d, summary, end - 5, end).values()))
        profile = "paper" if name == "dcqcn-fairness" else "ConnectX"
        figures[profile] = {"jain_last_5s": round(jain, 3)}
        ax.set_title(f"DCQCN, {profile} parameters: Jain {jain:.2f} over the last 5 s",
                     fontsize=10)
        ax.set_xlabel("seconds since the first sender started")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("goodput (Mbit/s)")
    _save(fig, "fairness", figures, runs, out)


def slow_receiver(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, (ax_g, ax_p) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    summary, d = runs("slow-receiver")
    for flow, g in flow_goodput(d, summary).items():
        ax_g.plot([x for x, _ in g], [y for _, y in g], label=flow)
    pfc = run_pfc_frames(d, summary)
    ax_p.step([x for x, _ in pfc], [y for _, y in pfc], where="post")
    ax_g.axvline(1.0, color="grey", linestyle=":")
    ax_g.set_ylabel("goodput (Mbit/s)")
    ax_g.set_title("h1 slows to 100 packets/s at 1 s: its pauses hold h3 to that rate, and "
                   "spread to h4 -> h2", fontsize=10)
    ax_g.legend(fontsize=8)
    ax_p.set_ylabel("PFC frames received")
    ax_p.set_xlabel("seconds since the senders started")
    _save(fig, "slow-receiver", {
        "pfc_frames": pfc_frames_sent(summary), "lossless_drops":
        summary["kernel_drops_lossless"], "delivered_mb": {
            n: round(f["bytes_received"] / 1e6, 2) for n, f in summary["flows"].items()}},
        runs, out)


def storm(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    figures = {}
    for mode in ("off", "on"):
        summary, d = runs(f"storm-watchdog-{mode}")
        g = flow_goodput(d, summary)["victim"]
        ax.plot([x for x, _ in g], [y for _, y in g], label=f"victim, watchdog {mode}")
        figures[f"watchdog_{mode}"] = {
            "victim_mb": round(summary["flows"]["victim"]["bytes_received"] / 1e6, 2),
            "watchdog_events": len(summary.get("watchdog_events", []))}
    ax.axvspan(2, 8, color="red", alpha=0.08, label="h2's NIC storms PAUSE (2 s to 8 s)")
    ax.set_ylabel("victim goodput (Mbit/s)")
    ax.set_xlabel("seconds since the senders started")
    ax.set_title("a storming NIC starves a victim that shares its spine; the watchdog frees it")
    ax.legend(fontsize=8)
    _save(fig, "storm", figures, runs, out)


def _cycle_held(run_dir: Path, summary: dict, name: str
                ) -> tuple[list[float], list[float], float]:
    """The bytes the cycle's four queues (those its bounce routes send through) held together
    at each sample time, and when the last of them last sent (seconds since the senders
    started)."""
    sc = load_scenario(REPO / "scenarios" / f"{name}.yaml")
    queues = routed_queues(sc.topo, sc.extras.routes, 3)
    t0 = run_start(summary)
    held: dict[float, float] = {}
    last: dict[tuple, int] = {}
    sent: dict[tuple, tuple[int, float]] = {}
    for r in sorted((r for r in run_telemetry(run_dir) if r.queue in queues),
                    key=lambda r: r.t_s):
        last[r.queue] = r.backlog_bytes
        held[round(r.t_s - t0, 1)] = sum(last.values()) / 1e3
        if sent.get(r.queue, (None,))[0] != r.sent_packets:
            sent[r.queue] = (r.sent_packets, r.t_s - t0)
    return list(held), list(held.values()), round(max(t for _n, t in sent.values()), 2)


def credit_loop(runs: Runs, out: Path) -> None:
    plt = _plt()
    fig, (ax_g, ax_q) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    figures = {}
    for name, label in (("credit-loop-pfc", "PFC"), ("credit-loop", "credits (ib-credit)")):
        summary, d = runs(name)
        t, total = _total(flow_goodput(d, summary))
        ax_g.plot(t, total, label=label)
        t, held, locked = _cycle_held(d, summary, name)
        ax_q.plot(t, held, label=label)
        dl = summary["deadlock"]
        figures[name] = {"deadlock": dl["deadlock"], "cycle_last_sent_s": locked,
                         "stuck_after_stop": len(dl["stuck_after_stop"]),
                         "delivered_mb": round(delivered_bytes(summary) / 1e6, 2),
                         "pfc_frames": pfc_frames_sent(summary),
                         "wait_link_s": summary["headline"]["pause_s"],
                         "lossless_drops": summary["kernel_drops_lossless"]}
    ax_g.set_ylabel("goodput, all flows (Mbit/s)")
    ax_g.set_title("one cyclic buffer dependency, two flow controls: both lock", fontsize=10)
    ax_q.set_ylabel("held on the cycle (KB)")
    ax_q.set_xlabel("seconds since the senders started")
    for ax in (ax_g, ax_q):
        ax.axvline(4.5, color="grey", linestyle=":", label="senders stop")
        ax.legend(fontsize=8)
    _save(fig, "credit-loop", figures, runs, out)


PICTURES = {"incast": incast, "victim": victim, "ecmp": ecmp, "loss": loss,
            "fairness": fairness, "slow-receiver": slow_receiver, "storm": storm,
            "credit-loop": credit_loop}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", nargs="*", choices=[[], *PICTURES], default=[],
                    help="pictures to draw (default: all)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--keep", type=Path, help="keep the runs' results folders here")
    where.add_argument("--runs", type=Path, help="run nothing: draw from the runs an earlier "
                       "--keep left in this folder (the newest of each)")
    ap.add_argument("--out", type=Path, default=OUT, help="where the pictures and their "
                    "figures go (default: docs/phenomena)")
    args = ap.parse_args()
    refused = []
    with tempfile.TemporaryDirectory() as scratch:
        root = args.runs or args.keep or Path(scratch)
        for name in args.which or PICTURES:
            try:
                PICTURES[name](Runs(root, saved=args.runs is not None), args.out)
            except NotFaithful as e:
                print(f"pictures.py: not drawing {name}: {e}", file=sys.stderr, flush=True)
                refused.append(name)
    if refused:
        sys.exit(f"pictures.py: refused {', '.join(refused)}: a picture is drawn only from "
                 "runs the fidelity guard called faithful; nothing was written for "
                 f"{'them' if len(refused) > 1 else 'it'}")


if __name__ == "__main__":
    main()
