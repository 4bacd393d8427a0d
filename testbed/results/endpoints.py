"""The RoCE endpoints' files in a results folder, read into typed records: each host's
``endpoints/<host>/qp_timeseries.csv`` (a :class:`QpRow` per QP per sample) and
``endpoints/<host>/messages.csv`` (a :class:`MessageRow` per completed message).

The endpoint writes them (``traffic.endpoint_telemetry``, whose ``QP_COLUMNS`` and
``MESSAGE_COLUMNS`` say what each column means); a record's fields are those columns, in order,
so that the headline figures, the report and the comparisons read them one way.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from testbed.results.files import ENDPOINTS_DIR, MESSAGES_FILE, QP_FILE


def _opt_float(s: str) -> float | None:
    return float(s) if s else None


@dataclass(frozen=True, slots=True)
class QpRow:
    """One sample of one QP (``traffic.endpoint_telemetry.QP_COLUMNS``)."""

    t_s: float
    qpn: int
    role: str
    tc: int
    rate_bps: float | None
    target_bps: float | None
    alpha: float | None
    goodput_bps: float
    bytes: int
    packets_sent: int
    retransmitted: int
    naks: int
    timeouts: int
    cnps_received: int
    cnps_sent: int
    ce_marked: int
    paused_s: float

    READ: ClassVar[dict[str, Callable[[str], Any]]] = {
        "t_s": float, "role": str, "rate_bps": _opt_float, "target_bps": _opt_float,
        "alpha": _opt_float, "goodput_bps": float, "paused_s": float}


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One completed message (``traffic.endpoint_telemetry.MESSAGE_COLUMNS``)."""

    qpn: int
    msg_id: int
    kind: str
    size: int
    posted_s: float
    completed_s: float
    fct_s: float

    READ: ClassVar[dict[str, Callable[[str], Any]]] = {
        "kind": str, "posted_s": float, "completed_s": float, "fct_s": float}


def _read(path: Path, kind: type) -> list:
    if not path.exists():
        return []
    cells = [(f.name, kind.READ.get(f.name, int)) for f in fields(kind)]
    with open(path, newline="") as fh:
        return [kind(**{n: parse(r[n]) for n, parse in cells}) for r in csv.DictReader(fh)]


def host_dir(run_dir: Path | str, host: str) -> Path:
    return Path(run_dir) / ENDPOINTS_DIR / host


def read_qp_series(run_dir: Path | str, host: str) -> list[QpRow]:
    """A host's QP samples, in the order written (time order); none if it wrote none."""
    return _read(host_dir(run_dir, host) / QP_FILE, QpRow)


def read_messages(run_dir: Path | str, host: str) -> list[MessageRow]:
    """A host's completed messages, in completion order; none if it wrote none."""
    return _read(host_dir(run_dir, host) / MESSAGES_FILE, MessageRow)


def endpoint_hosts(run_dir: Path | str) -> list[str]:
    """The hosts whose endpoints wrote a folder in this run."""
    root = Path(run_dir) / ENDPOINTS_DIR
    return sorted((p.name for p in root.iterdir() if p.is_dir()), key=_host_order) \
        if root.is_dir() else []


def _host_order(name: str) -> tuple[int, str]:
    digits = name.lstrip("h")
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)
