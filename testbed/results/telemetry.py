"""The telemetry files of a run, in one place: each file's columns and what they mean (as
docs/RESULTS.md shows them), a typed record per row, the writers the switch agents and the CPU
sampler write with, and the readers every consumer reads with.

* ``telemetry/<switch>.telemetry.csv``: a :class:`TelemetryRow` per (port, class) per sample
  (:data:`TELEMETRY_COLUMNS`), written by the switch agent (:mod:`testbed.agent`).
* ``telemetry/<switch>.events.csv``: an :class:`EventRow` per pause, resume, expiry and
  watchdog storm (:data:`EVENT_COLUMNS`), written by the agent.
* ``telemetry/cpu.csv``: a :class:`CpuRow` per period (:data:`CPU_COLUMNS`), written by
  :class:`testbed.run.cpuload.CpuSampler`.
* ``<switch>.pfcwd.json`` (the fabric's runtime folder): the agent's PFC watchdog state, a
  :class:`PfcwdState`, for the Mininet CLI's ``pfcwd`` command.

A record's fields are its file's columns, in order; a column a lossless class alone has is
None in the record and empty in the file.
"""

from __future__ import annotations

import csv
import json
import operator
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any, ClassVar, Generic, TypeVar

from testbed.machine.safepath import read_own, write_new
from testbed.results.files import (
    CPU_FILE,
    EVENTS_SUFFIX,
    P4_COUNTERS_FILE,
    PFCWD_SUFFIX,
    TELEMETRY_DIR,
    TELEMETRY_SUFFIX,
)

# -- the columns --------------------------------------------------------------------------------

TELEMETRY_COLUMNS = [
    ("t_s", "seconds on the run's clock (since the fabric started)"),
    ("switch", "switch name"),
    ("port", "switch port number"),
    ("tc", "traffic class"),
    ("backlog_bytes", "bytes waiting in the kernel queue of (port, class)"),
    ("backlog_packets", "packets waiting there"),
    ("drops", "packets the kernel queue dropped so far (buffer full)"),
    ("sent_bytes", "bytes the queue has sent so far"),
    ("sent_packets", "packets the queue has sent so far"),
    ("paused", "1 while the class is paused by PFC from the peer, or (a credited class, mode "
                "ib-credit) holds a frame its credit does not cover"),
    ("pfc_rx", "PFC frames received for this class so far"),
    ("paused_s", "seconds paused so far (a credited class: waiting for credit, IB's "
                 "PortXmitWait)"),
    ("phantom_drift_bytes", "lossless classes: the P4 phantom queue, drained since the last "
                            "resync, minus the occupancy the resync found (bytes admitted "
                            "minus what the kernel let go of); negative: the phantom had "
                            "fallen below it"),
    ("held_bytes", "lossless classes, at the last resync: bytes the program had admitted that "
                   "were not yet in the kernel queue (held inside BMv2)"),
    ("phantom_below_max_bytes", "lossless classes: the most the phantom stood below the "
                                "occupancy a resync found, since the previous sample"),
    ("occupancy_max_bytes", "lossless classes: the largest occupancy (kernel backlog plus what "
                            "BMv2 held) a resync found since the previous sample"),
    ("bmv2_lag_max_us", "the switch: the longest a lossless data packet spent inside BMv2 "
                        "(arrival to egress) since the previous sample"),
    ("wd_dropped", "lossless classes: of the drops, the packets the PFC watchdog's drop action "
                   "discarded so far (by design); every other drop of the class is a loss"),
    ("bmv2_answer_max_us", "the switch: the longest BMv2 took to answer its agent's register "
                           "read (asked every sample), from the ask to the kernel's arrival "
                           "stamp on the replies, among the answers since the previous "
                           "sample: a stalled switch answers late"),
    ("input_max_bytes", "mode ib-credit, credited classes: the most the input on this port held "
                        "of the class in the kernel (its FIFOs at every output of the switch) "
                        "at a credit period since the previous sample"),
    ("agent_late_max_us", "the switch: the longest its agent's loop came late since the "
                          "previous sample, to read an answer of BMv2 after it came or to wake "
                          "at the time it had set: an agent blocked, stopped or without a "
                          "core is late to everything"),
]
EVENT_COLUMNS = [
    ("t_s", "when, on the run's clock"), ("switch", "switch"), ("port", "port"), ("tc", "class"),
    ("event", "pause, resume (XON), expire (quanta ran out), storm_detected (with the "
              "watchdog action) or storm_restored"),
    ("quanta", "quanta in the frame"),
    ("reaction_us", "frame received by the kernel to gate command issued"),
    ("detail", "watchdog: the action taken, the packets dropped"),
]
P4_COUNTER_COLUMNS = [
    ("t_s", "seconds on the run's clock"), ("switch", "switch"),
    ("counter", "the P4 counter's name (e.g. RoceIngress.lossless.ecn_marked)"),
    ("index", "the cell: a port, or port * 8 + class, or port * 16 + drop reason"),
    ("packets", "packets counted so far"), ("bytes", "bytes counted so far")]
CPU_COLUMNS = [("t_s", "seconds on the run's clock"),
               ("busy_pct", "the least busy core's share of the period spent busy (%): 100 "
                            "means every core was saturated"),
               ("mean_pct", "all cores' mean busy share (%)"),
               ("steal_pct", "share of the cores' time the hypervisor gave to others "
                             "(steal, %; counted in busy_pct too): empty in files from before "
                             "it was recorded")]

# -- where the files are --------------------------------------------------------------------------

def telemetry_path(out_dir: Path | str, switch: str) -> Path:
    return Path(out_dir) / f"{switch}{TELEMETRY_SUFFIX}"


def events_path(out_dir: Path | str, switch: str) -> Path:
    return Path(out_dir) / f"{switch}{EVENTS_SUFFIX}"


def pfcwd_path(runtime_dir: Path | str, switch: str) -> Path:
    return Path(runtime_dir) / f"{switch}{PFCWD_SUFFIX}"


# -- how a value is written and read ------------------------------------------------------------

def _fixed(digits: int) -> Callable[[Any], str]:
    spec = f".{digits}f"
    return lambda v: format(v, spec)


def _optional(write: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: "" if v is None else write(v)


def _opt_int(s: str) -> int | None:
    return int(s) if s else None


def _opt_float(s: str) -> float | None:
    return float(s) if s else None


def _flag(s: str) -> bool:
    return s == "1"


# -- the records --------------------------------------------------------------------------------

QueueId = tuple[str, int, int]  # (switch, port, class)


@dataclass(frozen=True, slots=True)
class TelemetryRow:
    """One sample of one (port, class) queue: see :data:`TELEMETRY_COLUMNS`."""

    t_s: float
    switch: str
    port: int
    tc: int
    backlog_bytes: int
    backlog_packets: int
    drops: int
    sent_bytes: int
    sent_packets: int
    paused: bool
    pfc_rx: int
    paused_s: float
    phantom_drift_bytes: int | None = None
    held_bytes: int | None = None
    phantom_below_max_bytes: int | None = None
    occupancy_max_bytes: int | None = None
    bmv2_lag_max_us: int | None = None
    wd_dropped: int | None = None
    bmv2_answer_max_us: int | None = None
    input_max_bytes: int | None = None
    agent_late_max_us: int | None = None

    WRITE: ClassVar[dict[str, Callable[[Any], str]]] = {
        "t_s": _fixed(4), "paused": lambda v: "1" if v else "0", "paused_s": _fixed(4),
        "phantom_drift_bytes": _optional(str), "held_bytes": _optional(str),
        "phantom_below_max_bytes": _optional(str), "occupancy_max_bytes": _optional(str),
        "bmv2_lag_max_us": _optional(str), "wd_dropped": _optional(str),
        "bmv2_answer_max_us": _optional(str), "input_max_bytes": _optional(str),
        "agent_late_max_us": _optional(str)}
    READ: ClassVar[dict[str, Callable[[str], Any]]] = {
        "t_s": float, "switch": str, "paused": _flag, "paused_s": float,
        "phantom_drift_bytes": _opt_int, "held_bytes": _opt_int,
        "phantom_below_max_bytes": _opt_int, "occupancy_max_bytes": _opt_int,
        "bmv2_lag_max_us": _opt_int, "wd_dropped": _opt_int,
        "bmv2_answer_max_us": _opt_int, "input_max_bytes": _opt_int,
        "agent_late_max_us": _opt_int}

    @property
    def queue(self) -> QueueId:
        return (self.switch, self.port, self.tc)


@dataclass(frozen=True, slots=True)
class EventRow:
    """A pause, resume, expiry or watchdog storm: see :data:`EVENT_COLUMNS`."""

    t_s: float
    switch: str
    port: int
    tc: int
    event: str
    quanta: int = 0
    reaction_us: float | None = None  # None: not a reaction to a frame
    detail: str = ""

    WRITE: ClassVar[dict[str, Callable[[Any], str]]] = {
        "t_s": _fixed(6), "reaction_us": _optional(_fixed(0))}
    READ: ClassVar[dict[str, Callable[[str], Any]]] = {
        "t_s": float, "switch": str, "event": str, "reaction_us": _opt_float, "detail": str}

    @property
    def queue(self) -> QueueId:
        return (self.switch, self.port, self.tc)


@dataclass(frozen=True, slots=True)
class CpuRow:
    """The machine's cores over one period: see :data:`CPU_COLUMNS`."""

    t_s: float
    busy_pct: float
    mean_pct: float
    steal_pct: float | None = None

    WRITE: ClassVar[dict[str, Callable[[Any], str]]] = {
        "t_s": _fixed(3), "busy_pct": _fixed(1), "mean_pct": _fixed(1),
        "steal_pct": _optional(_fixed(1))}
    READ: ClassVar[dict[str, Callable[[str], Any]]] = {
        "t_s": float, "busy_pct": float, "mean_pct": float, "steal_pct": _opt_float}


@dataclass(frozen=True, slots=True)
class P4CounterRow:
    """One P4 counter cell at one sample (``p4_counters.csv``): see :data:`P4_COUNTER_COLUMNS`."""

    t_s: float
    switch: str
    counter: str
    index: int
    packets: int
    bytes: int

    WRITE: ClassVar[dict[str, Callable[[Any], str]]] = {}
    READ: ClassVar[dict[str, Callable[[str], Any]]] = {
        "t_s": float, "switch": str, "counter": str}


@dataclass(frozen=True)
class PfcwdQueue:
    """The PFC watchdog's view of one lossless queue."""

    port: int
    tc: int
    storm: bool
    storms: int  # storms detected so far
    paused: bool  # a pause is in force
    dropped: int  # packets the drop action discarded in the current or last storm
    detection_left_ms: int


@dataclass(frozen=True)
class PfcwdState:
    """A switch agent's PFC watchdog: ``<switch>.pfcwd.json``."""

    switch: str
    t_s: float  # when written, on the run's clock
    action: str
    queues: list[PfcwdQueue]


Row = TypeVar("Row", TelemetryRow, EventRow, CpuRow, P4CounterRow)


# -- writers ------------------------------------------------------------------------------------

class CsvWriter(Generic[Row]):
    """A results CSV: its header, then a line per record, each flushed when asked to."""

    def __init__(self, path: Path | str, kind: type[Row], stream: IO[str] | None = None
                 ) -> None:
        """``stream``: where to write instead of opening ``path`` (the agent's, which hands
        its writes to a thread: traffic.spool)."""
        names = [f.name for f in fields(kind)]
        get = operator.attrgetter(*names)  # a tuple, for two names or more
        self._values = get if len(names) > 1 else lambda row: (get(row),)
        #: The cells written the kind's own way; the rest as the csv module writes a value
        #: (str(), and "" for None). The agents write a row per queue every sample: a
        #: formatter called on every cell was most of a row's cost.
        self._formats = [(i, kind.WRITE[n]) for i, n in enumerate(names) if n in kind.WRITE]
        # closed by close(), or as a context manager
        self._fh: IO[str] = stream or open(path, "w", newline="")  # noqa: SIM115
        self._w = csv.writer(self._fh)
        self._w.writerow(names)

    def write(self, row: Row) -> None:
        cells = list(self._values(row))
        for i, fmt in self._formats:
            cells[i] = fmt(cells[i])
        self._w.writerow(cells)

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> CsvWriter[Row]:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def telemetry_writer(out_dir: Path | str, switch: str,
                     opener: Callable[[Path], IO[str]] | None = None) -> CsvWriter[TelemetryRow]:
    """``opener``: how to open the file instead of open() (the agent's spooled files)."""
    path = telemetry_path(out_dir, switch)
    return CsvWriter(path, TelemetryRow, opener(path) if opener else None)


def events_writer(out_dir: Path | str, switch: str,
                  opener: Callable[[Path], IO[str]] | None = None) -> CsvWriter[EventRow]:
    path = events_path(out_dir, switch)
    return CsvWriter(path, EventRow, opener(path) if opener else None)


def cpu_writer(path: Path | str) -> CsvWriter[CpuRow]:
    return CsvWriter(path, CpuRow)


def write_pfcwd(path: Path | str, state: PfcwdState) -> None:
    """Written whole, then renamed, so that a reader never sees half a file."""
    tmp = Path(f"{path}.tmp")
    write_new(tmp, json.dumps(asdict(state)))  # no link followed (testbed.machine.safepath)
    tmp.replace(path)


# -- readers ------------------------------------------------------------------------------------

def read_csv(path: Path | str, kind: type[Row]) -> list[Row]:
    """Every record of a results CSV. A column of a lossless class alone may be missing
    altogether (a file from before it existed): its records have None."""
    cells = [(f.name, kind.READ.get(f.name, int)) for f in fields(kind)]
    with open(path, newline="") as fh:
        return [kind(**{n: parse(r[n]) for n, parse in cells if r.get(n) is not None})
                for r in csv.DictReader(fh)]


def read_telemetry(path: Path | str) -> list[TelemetryRow]:
    return read_csv(path, TelemetryRow)


def read_events(path: Path | str) -> list[EventRow]:
    return read_csv(path, EventRow)


def read_cpu(path: Path | str) -> list[CpuRow]:
    return read_csv(path, CpuRow)


def read_pfcwd(path: Path | str) -> PfcwdState:
    d = json.loads(read_own(Path(path)))  # root reads it: only if root wrote it
    return PfcwdState(**{**d, "queues": [PfcwdQueue(**q) for q in d["queues"]]})


def _each(paths: Iterable[Path], read: Callable[[Path], list[Row]]) -> list[Row]:
    return [row for p in sorted(paths) for row in read(p)]


def run_telemetry(run_dir: Path | str) -> list[TelemetryRow]:
    """Every switch's samples in a results folder (switch by switch, each in time order)."""
    return _each((Path(run_dir) / TELEMETRY_DIR).glob(f"*{TELEMETRY_SUFFIX}"), read_telemetry)


def run_events(run_dir: Path | str) -> list[EventRow]:
    """Every switch's events in a results folder (switch by switch, each in time order)."""
    return _each((Path(run_dir) / TELEMETRY_DIR).glob(f"*{EVENTS_SUFFIX}"), read_events)


def run_cpu(run_dir: Path | str) -> list[CpuRow] | None:
    """The CPU samples of a results folder, None if it has none."""
    path = Path(run_dir) / TELEMETRY_DIR / CPU_FILE
    return read_cpu(path) if path.exists() else None


#: A cell of a P4 counter array: (switch, counter name, index).
CounterCell = tuple[str, str, int]


def last_p4_counters(path: Path | str) -> dict[CounterCell, tuple[int, int]]:
    """Each P4 counter cell's last sample in a ``p4_counters.csv``: (packets, bytes). The
    counters only grow, and a cell appears once it has counted something. The one reading of
    the file's cells: the headline, the phenomena and the labs' evidence all go through it."""
    return {(r.switch, r.counter, r.index): (r.packets, r.bytes)
            for r in read_csv(path, P4CounterRow)}


def run_p4_counters(run_dir: Path | str) -> list[P4CounterRow]:
    """Every P4 counter sample of a results folder (none if the run sampled none)."""
    path = Path(run_dir) / P4_COUNTERS_FILE
    return read_csv(path, P4CounterRow) if path.exists() else []


def pfcwd_states(runtime_dir: Path | str) -> list[PfcwdState]:
    """Every switch's watchdog state in a fabric's runtime folder, by switch name."""
    return [read_pfcwd(p) for p in sorted(Path(runtime_dir).glob(f"*{PFCWD_SUFFIX}"))]
