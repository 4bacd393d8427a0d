"""report.html's figures, drawn with matplotlib as inline SVG (text kept as text, so the page
needs no font and its words can be searched and copied).

Each function takes plain data (testbed.report.data's records, or lists of
:class:`~testbed.report.data.Series`) and returns one ``<svg>`` element as a string, so that
other reports (a sweep, a comparison of runs) can draw their own data the same way.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable

from testbed.report.data import EcnPoint, LinkLoad, Series

#: A legend longer than this becomes unreadable: the lines are then left unlabelled and the
#: caption says how many there are (per-QP detail sits in its own block of the page).
MAX_LEGEND = 10
WIDTH_IN = 9.0
_ids = itertools.count()


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def svg_of(fig) -> str:
    """The figure as an ``<svg>`` element. Each gets its own id salt: several SVGs inlined in
    one page must not share the ids of their clip paths."""
    plt = _plt()
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"fig{next(_ids)}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _marks(ax, marks: Iterable[tuple[float, str]]) -> None:
    """The run's timeline (faults, senders stop) as dotted lines."""
    for t, _what in marks:
        ax.axvline(t, color="grey", linestyle=":", linewidth=1)


def line_chart(series: list[Series], ylabel: str, marks: Iterable[tuple[float, str]] = (),
               height: float = 3.0, xlabel: str = "time on the run's clock (s)") -> str:
    """Lines over time, labelled when there are few enough to read."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, height))
    for s in series:
        ax.plot(s.t, s.y, label=s.label, linewidth=1.2)
    _marks(ax, marks)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if series and len(series) <= MAX_LEGEND:
        ax.legend(fontsize=8, ncol=min(4, len(series)), loc="upper right")
    return svg_of(fig)


def pause_chart(rows: list[tuple[str, list[tuple]]], watchdog: list[tuple[str, float]],
                marks: Iterable[tuple[float, str]] = ()) -> str:
    """One row per queue, a bar while PFC paused it; a red x where the watchdog cut it off."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.8 + 0.3 * max(len(rows), 1)))
    index = {k: i for i, (k, _s) in enumerate(rows)}
    for i, (_k, spans) in enumerate(rows):
        ax.broken_barh(spans, (i - 0.4, 0.8), color="tab:red", alpha=0.7)
    for key, t in watchdog:
        if key in index:
            ax.plot(t, index[key], "kx", markersize=8)
    _marks(ax, marks)
    ax.set_yticks(range(len(rows)), [k for k, _ in rows], fontsize=8)
    ax.set_xlabel("time on the run's clock (s)")
    ax.grid(axis="x", alpha=0.3)
    return svg_of(fig)


def red_curve(kmin: float, kmax: float, pmax: float, top: float) -> tuple[list, list]:
    """The marking probability RED/WRED gives a queue length: none up to kmin, rising to pmax
    at kmax, every packet beyond (DCQCN's switch side, Zhu et al., SIGCOMM 2015)."""
    return [0, kmin, kmax, kmax, max(top, kmax * 1.2)], [0, 0, pmax, 1, 1]


def ecn_chart(points: list[EcnPoint], profiles: dict[int, tuple[int, int, float]]) -> str:
    """Measured mark fraction against queue length, over each configured RED curve."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.2))
    top = max((p.backlog_bytes for p in points), default=0.0)
    for tc, (kmin, kmax, pmax) in sorted(profiles.items()):
        x, y = red_curve(kmin, kmax, pmax, top)
        ax.plot([v / 1000 for v in x], y, "k--", linewidth=1,
                label=f"class {tc} RED: kmin {kmin / 1000:g} KB, kmax {kmax / 1000:g} KB, "
                      f"pmax {pmax:g}")
    by_queue: dict[str, list[EcnPoint]] = {}
    for p in points:
        by_queue.setdefault(p.queue, []).append(p)
    for q, pts in by_queue.items():
        ax.scatter([p.backlog_bytes / 1000 for p in pts], [p.fraction for p in pts], s=14,
                   label=q if len(by_queue) <= MAX_LEGEND else None, alpha=0.8)
    ax.set_xlabel("mean kernel backlog over the interval (KB)")
    ax.set_ylabel("share of packets marked CE")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left")
    return svg_of(fig)


def cdf_chart(samples: dict[str, list[float]], xlabel: str) -> str:
    """An empirical CDF per label (sorted samples)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.0))
    for label, xs in samples.items():
        n = len(xs)
        ax.step(xs, [(i + 1) / n for i in range(n)], where="post", label=f"{label} ({n})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of messages")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if samples and len(samples) <= MAX_LEGEND:
        ax.legend(fontsize=8, loc="lower right")
    return svg_of(fig)


def timeline_chart(events: list[tuple[float, str]], end_s: float) -> str:
    """The run's timeline: each fault, link change and the senders' stop, on one axis."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.7 + 0.28 * max(len(events), 1)))
    for i, (t, what) in enumerate(events):
        ax.plot([t], [i], "o", color="tab:purple")
        ax.annotate(what, (t, i), xytext=(6, 0), textcoords="offset points", va="center",
                    fontsize=8)
    ax.set_xlim(0, max(end_s, *(t for t, _ in events), 1.0) * 1.25)
    ax.set_ylim(-0.7, len(events) - 0.3)
    ax.invert_yaxis()
    ax.set_yticks([])
    ax.set_xlabel("time on the run's clock (s)")
    ax.grid(axis="x", alpha=0.3)
    return svg_of(fig)


def _positions(topology: dict) -> dict[str, tuple[float, float]]:
    """Spines on top, leaves below, each leaf's hosts under it."""
    pos: dict[str, tuple[float, float]] = {}
    leaves = [s["name"] for s in topology.get("leaves", [])]
    hosts = topology.get("hosts", [])
    width = max(len(hosts), len(leaves), 1)
    for row, names in ((2.0, [s["name"] for s in topology.get("spines", [])]), (1.0, leaves)):
        for i, n in enumerate(names):
            pos[n] = ((i + 0.5) * width / len(names), row)
    for i, h in enumerate(hosts):
        pos[h["name"]] = (i + 0.5, 0.0)
    return pos


def topology_chart(topology: dict, loads: list[LinkLoad]) -> str:
    """The fabric, each cable coloured by its utilization; a paused cable is drawn thicker
    with a red halo as wide as its paused share."""
    plt = _plt()
    import matplotlib
    from matplotlib import cm, colors

    pos = _positions(topology)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
    cmap, norm = matplotlib.colormaps["viridis"], colors.Normalize(0, 1)
    seen: dict[tuple[str, str], int] = {}
    # crossing cables' labels collide on a larger fabric: there the table beside says it all
    label_fabric = len(topology.get("spines", [])) * len(topology.get("leaves", [])) <= 4
    for ln in loads:
        n = seen[(ln.a, ln.b)] = seen.get((ln.a, ln.b), -1) + 1  # parallel links fan out
        (xa, ya), (xb, yb) = pos[ln.a], pos[ln.b]
        dx = 0.08 * n
        if ln.paused > 0:
            ax.plot([xa + dx, xb + dx], [ya, yb], color="red", alpha=0.3,
                    linewidth=4 + 14 * ln.paused, solid_capstyle="round", zorder=1)
        ax.plot([xa + dx, xb + dx], [ya, yb], color=cmap(norm(ln.utilization)), linewidth=3,
                zorder=2)
        if ln.tier != "host" and not label_fabric:
            continue
        label = f"{ln.utilization:.0%}" + (f"\n{ln.paused:.0%} paused" if ln.paused else "")
        (xl, yl), (xu, yu) = sorted([(xa, ya), (xb, yb)], key=lambda p: p[1])
        at = (xl + 0.35 * (xu - xl) + dx, yl + 0.35 * (yu - yl))  # off the crossings' middle
        ax.annotate(label, at, fontsize=8, ha="center",
                    va="center", color="black", zorder=4,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                          "alpha": 0.8})
    for name, (x, y) in pos.items():
        ax.scatter([x], [y], s=900 if y > 0 else 500, color="white", edgecolor="black",
                   zorder=3)
        ax.annotate(name, (x, y), ha="center", va="center", fontsize=8, zorder=5)
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.03,
                 label="utilization (busier direction)")
    ax.set_axis_off()
    ax.margins(0.08, 0.15)
    return svg_of(fig)
