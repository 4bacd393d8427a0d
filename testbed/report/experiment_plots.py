"""The pictures of a sweep and of a comparison (matplotlib, written as PNG files):

* ``sweep.png``: the main headline figures against the swept setting, the median of each
  point's runs with its min-max range as an error bar;
* ``compare.png``: the runs overlaid: each flow's goodput over time, and the PFC frames the
  fabric's switches received so far, on a clock starting when each run's senders started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.report.headline_text import FIGURES

#: The figures a sweep's picture plots (a panel each, when some point has a value).
SWEEP_PLOT = ["goodput_mbps", "jain", "fct_p99_s", "pfc_frames", "pause_s", "drops",
              "retransmitted", "ecn_marked", "victim_slowdown", "max_imbalance", "efficiency",
              "step_p99_s"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plot_sweep(rows: list[dict], keys: list[str], labels: list[str], png: Path) -> Path:
    """``rows``: testbed.run.sweep.aggregate's; ``labels``: each row's tick label (the value when
    one key is swept, the whole point otherwise). One swept numeric key is the x axis itself;
    anything else gets a tick per point."""
    plt = _pyplot()
    names = dict(FIGURES)
    shown = [k for k in SWEEP_PLOT if any(r[k] is not None for r in rows)]
    cols = 2
    fig, axes = plt.subplots(max(1, (len(shown) + 1) // cols), cols,
                             figsize=(10, 2.6 * max(1, (len(shown) + 1) // cols)),
                             squeeze=False)
    xs_raw = [r["settings"][keys[0]] for r in rows] if len(keys) == 1 else []
    numeric = len(keys) == 1 and _numeric(xs_raw)
    xs = xs_raw if numeric else list(range(len(rows)))
    for ax, key in zip(axes.flat, shown, strict=False):
        pts = [(x, r[key]) for x, r in zip(xs, rows, strict=True) if r[key] is not None]
        med = [s[0] for _, s in pts]
        err = [[s[0] - s[1] for _, s in pts], [s[2] - s[0] for _, s in pts]]
        ax.errorbar([x for x, _ in pts], med, yerr=err, marker="o", capsize=4)
        ax.set_title(names[key], fontsize=9)
        ax.margins(x=0.15)
        if len(keys) == 1:
            ax.set_xlabel(keys[0], fontsize=8)
        if not numeric:
            ax.set_xticks(xs, labels, fontsize=7, rotation=15 if len(keys) > 1 else 0)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    fig.suptitle("sweep: median of each point's runs, min-max as bars", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


def plot_compare(runs: list[tuple[str, dict[str, list[tuple[float, float]]],
                                  list[tuple[float, int]]]], png: Path) -> Path:
    """``runs``: (label, each flow's goodput series, the PFC frames series) per run."""
    plt = _pyplot()
    fig, (ax_g, ax_p) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    styles = ["-", "--", ":", "-."]
    for i, (label, flows, pfc) in enumerate(runs):
        color = f"C{i % 10}"
        for j, (flow, pts) in enumerate(flows.items()):
            ax_g.plot([t for t, _ in pts], [v for _, v in pts], color=color,
                      linestyle=styles[j % len(styles)], label=f"{label}: {flow}")
        ax_p.plot([t for t, _ in pfc], [v for _, v in pfc], color=color, label=label)
    ax_g.set_ylabel("goodput (Mbit/s)")
    ax_g.set_title("each flow's goodput (one colour per run, one line style per flow)")
    ax_p.set_ylabel("PFC frames received")
    ax_p.set_title("PFC frames the switches received so far")
    ax_p.set_xlabel("seconds since the senders started")
    for ax in (ax_g, ax_p):
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png
