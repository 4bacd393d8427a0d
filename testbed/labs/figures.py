"""The lab sheets' figures, drawn from the project's own data: the fabric from its topology,
and a lab's plots from the reference solution's results folders (the other labs use the
run's report.png). ``python -m testbed.labs.figures fabric|red|uplinks ...`` redraws one."""

from __future__ import annotations

import sys
from pathlib import Path

from testbed.labs.evidence import RunData, marked_fraction, uplink_bytes
from testbed.topology.graph import Topology


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def fabric_figure(topo: Topology, path: Path) -> Path:
    """Spines on top, leaves below, hosts at the bottom; parallel links drawn apart."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = {}
    n_hosts = len(topo.hosts)
    for i, h in enumerate(topo.hosts):
        xs[h.name] = (i + 0.5) / n_hosts
    for i, s in enumerate(topo.leaves):
        xs[s.name] = (i + 0.5) / len(topo.leaves)
    for i, s in enumerate(topo.spines):
        xs[s.name] = (i + 0.5) / len(topo.spines)
    ys = {**{h.name: 0 for h in topo.hosts}, **{s.name: 1 for s in topo.leaves},
          **{s.name: 2 for s in topo.spines}}
    seen: dict[tuple[str, str], int] = {}
    for ln in topo.links:
        k = seen.get((ln.a, ln.b), 0)
        seen[(ln.a, ln.b)] = k + 1
        off = 0.012 * k
        ax.plot([xs[ln.a] + off, xs[ln.b] + off], [ys[ln.a], ys[ln.b]], color="grey", lw=0.8)
    for name, x in xs.items():
        label = name if ys[name] else f"{name}\n{topo.host(name).ip}"
        ax.text(x, ys[name], label, ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": "white" if ys[name] == 0 else "#dde8f5"})
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.4, 2.4)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _red(q: float, kmin: int, kmax: int, pmax: float) -> float:
    """The marking probability of a RED profile at queue length q (as p4/lossless.p4 marks)."""
    if q <= kmin:
        return 0.0
    return 1.0 if q > kmax else pmax * (q - kmin) / (kmax - kmin)


def _backlog(run: RunData, receiver: str, tc: int = 3) -> list[int]:
    """The receiver's leaf port's queue (class tc) at every sample that found it busy."""
    h = run.host(receiver)
    return [s.backlog_bytes for s in run.telemetry
            if (s.switch, s.port, s.tc) == (h["leaf"], h["leaf_port"], tc)
            and s.backlog_packets > 0]


def red_figure(runs: list[tuple[str, RunData]], receiver: str, path: Path) -> Path:
    """Each run's RED curve, the fraction it marked, and where its queue stood."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax2 = ax.twinx()  # where each run's queue stood, behind the curves
    top = 60_000
    for (label, run), color in zip(runs, ("tab:blue", "tab:red"), strict=False):
        prof = run.config["qos"]["ecn"].get("3")
        if prof is None:
            continue
        qs = list(range(0, top, 200))
        ax.plot([q / 1000 for q in qs],
                [_red(q, prof["kmin_bytes"], prof["kmax_bytes"], prof["pmax"]) for q in qs],
                color=color, label=f"{label}: Kmin {prof['kmin_bytes']}, Kmax "
                f"{prof['kmax_bytes']}, Pmax {prof['pmax']}")
        frac, _sent = marked_fraction(run, receiver, 3)
        backlog = _backlog(run, receiver)
        ax.axhline(frac, color=color, ls="--", lw=1, label=f"{label}: {frac:.0%} marked")
        ax2.hist([b / 1000 for b in backlog], bins=30, range=(0, top / 1000), alpha=0.25,
                 color=color)
    ax2.set_ylabel("samples of the queue")
    ax.set_xlabel("queue at the receiver's port (KB)")
    ax.set_ylabel("marking probability")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def uplinks_figure(runs: list[tuple[str, RunData]], leaf: str, path: Path) -> Path:
    """Bytes the leaf sent up each of its uplinks, per run."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    width = 0.8 / len(runs)
    for i, (label, run) in enumerate(runs):
        up = uplink_bytes(run, leaf, 3)
        ports = sorted(up)
        ax.bar([p + i * width for p in range(len(ports))], [up[p] / 1e6 for p in ports],
               width, label=label)
        peers = {q["number"]: q["peer"] for sw in run.topology.get("leaves", [])
                 if sw["name"] == leaf for q in sw["ports"]}
        ax.set_xticks([p + width / 2 for p in range(len(ports))],
                      [f"{leaf} port {p} (to {peers.get(p, '?')})" for p in ports])
    ax.set_ylabel("MB sent up")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def dcqcn_figure(run: RunData, path: Path) -> Path:
    """Each flow's DCQCN state over the run: its current rate RC and its alpha."""
    from testbed.labs.flows import run_start

    plt = _pyplot()
    fig, (ax_r, ax_a) = plt.subplots(2, 1, figsize=(7, 4.2), sharex=True)
    t0 = run_start(run)
    for name, f in run.summary.get("flows", {}).items():
        qpns = {str(q["qpn"]) for q in f["qps"]}
        rows = [r for r in run.qp_series(f["src"]) if r["role"] == "requester"
                and r["qpn"] in qpns and r.get("rate_bps")]
        ts = [float(r["t_s"]) - t0 for r in rows]
        ax_r.plot(ts, [float(r["rate_bps"]) / 1e6 for r in rows], label=name)
        ax_a.plot(ts, [float(r["alpha"]) for r in rows], label=name)
    ax_r.set_ylabel("rate RC (Mbit/s)")
    ax_a.set_ylabel("alpha")
    ax_a.set_xlabel("seconds after the run's start")
    ax_r.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv: list[str]) -> None:
    """fabric FABRIC.yaml OUT.png | red RECEIVER OUT.png LABEL=RUN... | uplinks LEAF OUT.png
    LABEL=RUN... | dcqcn RUN OUT.png"""
    kind = argv[0]
    if kind == "dcqcn":
        dcqcn_figure(RunData.load(Path(argv[1])), Path(argv[2]))
        return
    if kind == "fabric":
        from testbed.topology.graph import build_topology
        from testbed.topology.validate import load_config

        fabric_figure(build_topology(load_config(argv[1])), Path(argv[2]))
        return
    runs = [(a.split("=", 1)[0], RunData.load(Path(a.split("=", 1)[1]))) for a in argv[3:]]
    draw = red_figure if kind == "red" else uplinks_figure
    draw(runs, argv[1], Path(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
