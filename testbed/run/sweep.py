"""A parameter sweep's pure parts: the ``--set KEY=V1,V2`` options, the points (their cartesian
product), a point applied to a scenario's YAML data, and the table of headline figures over
the runs (median and spread per point). :mod:`testbed.run.sweep_run` runs the points.

A key is a dotted path into the scenario file: ``qos.pfc_enable``, ``fabric.fabric_link_mbps``,
``flows.0.qps``, ``qos.ecn.3.kmin_bytes`` (a number is a list index, or a mapping's integer
key). A path may name a setting the file leaves at its default (it is created); whether it is a
setting at all is the scenario model's to say, when each point is validated. Values are YAML
scalars or flow-style collections, split at the commas outside brackets and quotes:
``qos.pfc_enable=[3],[]`` is two values, ``[3]`` and ``[]``.
"""

from __future__ import annotations

import copy
import itertools
import statistics
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.report.headline_text import FIGURES


class SweepError(ValueError):
    """A sweep that cannot run, in one line that names the key."""


@dataclass(frozen=True)
class Setting:
    key: str
    values: list[Any]


def split_values(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, braces and quotes."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def parse_setting(text: str) -> Setting:
    """One ``--set KEY=V1,V2,...``."""
    key, eq, rest = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise SweepError(f"--set {text}: write KEY=V1,V2,... (e.g. qos.pfc_enable=[3],[])")
    if any(not part for part in key.split(".")):
        raise SweepError(f"--set {key}: a key is a dotted path such as qos.ecn.3.kmin_bytes")
    values = []
    for raw in split_values(rest):
        if not raw:
            raise SweepError(f"--set {key}: an empty value in {rest!r}")
        try:
            values.append(yaml.safe_load(raw))
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0]
            raise SweepError(f"--set {key}: {raw!r} is not a YAML value ({first})") from None
    return Setting(key, values)


def parse_settings(texts: list[str]) -> list[Setting]:
    settings = [parse_setting(t) for t in texts]
    keys = [s.key for s in settings]
    for k in keys:
        if keys.count(k) > 1:
            raise SweepError(f"--set {k}: given twice; list every value in one --set")
    return settings


def points(settings: list[Setting]) -> list[dict[str, Any]]:
    """Every combination of the values, the first key varying slowest."""
    return [dict(zip([s.key for s in settings], combo, strict=True))
            for combo in itertools.product(*(s.values for s in settings))]


def point_label(point: dict[str, Any]) -> str:
    """``qos.pfc_enable=[3], flows.0.qps=4``: values written as in YAML's flow style."""
    return ", ".join(f"{k}={flow_style(v)}" for k, v in point.items())


def flow_style(v: Any) -> str:
    """A value as YAML's flow style writes it: ``[3]``, ``{kmin_bytes: 5}``, ``true``."""
    return yaml.safe_dump(v, default_flow_style=True, width=1 << 16).strip().removesuffix(
        "\n...").removesuffix("...").strip()


def apply_setting(data: dict, key: str, value: Any) -> dict:
    """A copy of the scenario data with the dotted path set to value. A list index must exist
    (a sweep cannot invent a flow); a missing mapping key is created, the model judges it."""
    out = copy.deepcopy(data)
    node: Any = out
    parts = key.split(".")
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth + 1])
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if not part.lstrip("-").isdigit() or not 0 <= int(part) < len(node):
                raise SweepError(f"--set {key}: {where} is not an index of the "
                                 f"{len(node)} items of {'.'.join(parts[:depth])} "
                                 f"(0..{len(node) - 1})")
            index: Any = int(part)
        elif isinstance(node, dict):
            index = int(part) if part.isdigit() and (int(part) in node or part not in node) \
                else part
        else:
            raise SweepError(f"--set {key}: {'.'.join(parts[:depth])} is a value "
                             f"({node!r}), not a section with {part!r} in it")
        if last:
            node[index] = value
        else:
            if isinstance(node, dict) and index not in node:
                node[index] = {}
            node = node[index]
    return out


def apply_point(data: dict, point: dict[str, Any]) -> dict:
    for key, value in point.items():
        data = apply_setting(data, key, value)
    return data


def blame(point: dict[str, Any], problems: list[str]) -> str:
    """The one line for a point the scenario model refused: the swept key each problem is
    about (a problem's path begins with it, or it begins with the problem's path), else the
    whole point."""
    for key, value in point.items():
        for p in problems:
            where = p.split(":", 1)[0]
            if where == key or where.startswith(key + ".") or key.startswith(where + "."):
                return f"--set {key}={flow_style(value)}: {p}"
    return f"--set {point_label(point)}: {'; '.join(problems)}"


# -- the table ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunRecord:
    """One finished run of a sweep: its point, repeat number, folder and headline."""

    point: int  # 0-based index into the points
    repeat: int  # 1-based
    run_dir: str
    headline: dict
    #: The fidelity guard's verdict: a figure of a run that was not faithful is no figure,
    #: so the table says how many of a point's runs were (None: not known).
    faithful: bool | None = None


def spread(values: list[float]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values, None when there are none."""
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def aggregate(pts: list[dict[str, Any]], runs: list[RunRecord]) -> list[dict]:
    """A row per point that has runs: its settings, how many runs, and per figure of
    :data:`testbed.report.headline_text.FIGURES` (median, min, max) over them (None when no run has
    the figure, e.g. no victim)."""
    rows = []
    for i, point in enumerate(pts):
        mine = [r for r in runs if r.point == i]
        if not mine:
            continue
        row: dict[str, Any] = {"point": i + 1, "settings": point, "runs": len(mine),
                               "faithful": sum(r.faithful is True for r in mine)}
        for key, _label in FIGURES:
            vals = [float(r.headline[key]) for r in mine
                    if r.headline.get(key) is not None]
            row[key] = spread(vals)
        rows.append(row)
    return rows


def table_csv_rows(rows: list[dict], keys: list[str]) -> list[list[Any]]:
    """The table as CSV: a header, then a row per point (each figure's median, min, max)."""
    header = ["point", *keys, "runs", "faithful"]
    for key, _ in FIGURES:
        header += [f"{key}_median", f"{key}_min", f"{key}_max"]
    out: list[list[Any]] = [header]
    for r in rows:
        line: list[Any] = [r["point"], *(flow_style(r["settings"][k]) for k in keys), r["runs"],
                           r["faithful"]]
        for key, _ in FIGURES:
            line += list(r[key]) if r[key] is not None else ["", "", ""]
        out.append(line)
    return out


def table_markdown(rows: list[dict], keys: list[str]) -> list[str]:
    """The table in Markdown: a column per swept key, then per figure ``median [min, max]``."""
    from testbed.report.headline_text import fmt, markdown_table

    body = []
    for r in rows:
        cells = [str(r["point"]), *(flow_style(r["settings"][k]) for k in keys), str(r["runs"]),
                 f"{r['faithful']} of {r['runs']}"]
        for key, _ in FIGURES:
            s = r[key]
            cells.append("-" if s is None else fmt(s[0]) if s[1] == s[2]
                         else f"{fmt(s[0])} [{fmt(s[1])}, {fmt(s[2])}]")
        body.append(cells)
    header = ["point", *keys, "runs", "faithful", *(label for _, label in FIGURES)]
    return markdown_table(header, body)
