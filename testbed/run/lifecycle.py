"""A run of a fabric: its results folder, its state record, its clock, and what is written into
the folder as the run ends. `testbed up` and `testbed run` (and every test's fabric) alike.

* naming: ``results/<name>-<YYYYmmdd-HHMMSS>`` (:meth:`Run.named`);
* the state record (testbed.machine.state) of what the run creates, so `testbed clean` can remove
  it;
* SIGTERM as an interrupt (:func:`interrupt_on_sigterm`), so `testbed down` from another
  terminal tears a run down the way Ctrl-C does;
* finalising: the loss hidden in front of BMv2, read while the switches still run; the CPU
  sampler; after the agents stop, ``telemetry/summary.json`` with the fidelity guard's verdict
  (testbed.analysis.fidelity); and the state record cleaned last.

The order of a fabric's tear-down, which interleaves these steps with stopping its parts, is
testbed.run.bringup's.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from testbed.analysis.fidelity import Budgets
from testbed.config.models import FabricConfig
from testbed.machine.owner import make_results_dir
from testbed.machine.state import RunState, clean_state, make_runtime_dir, runtime_dir_for
from testbed.results.files import (
    CONFIG_FILE,
    CPU_FILE,
    FABRIC_SUMMARY_FILE,
    TELEMETRY_DIR,
    TOPOLOGY_FILE,
)
from testbed.results.summary import read_fabric_summary
from testbed.topology.graph import Topology
from testbed.topology.qos import credit_buffers, lossless_buffers, queue_profiles

Progress = Callable[[str], None]


def _raise_interrupt(_signo, _frame):
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> None:
    """From now on SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def results_dir_for(results_root: Path, name: str) -> Path:
    """A new run's folder: ``<results_root>/<name>-<YYYYmmdd-HHMMSS>``."""
    return results_root / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def out_problem(out: Path) -> str | None:
    """Why ``out`` cannot be a new results folder (`--out` of `testbed run` and `testbed
    sweep`): a run never writes over another's results."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return f"--out {out}: already exists and is not an empty folder; give a new one"
    return None


def fidelity_budgets(cfg: FabricConfig, topo: Topology) -> Budgets:
    """What the fidelity guard allows on this fabric."""
    q = cfg.qos
    rates = {cfg.fabric.host_link_mbps, cfg.fabric.fabric_link_mbps}
    headroom = min((queue_profiles(q, r, mtu=topo.mtu)[tc].headroom for r in rates
                    for tc in q.pfc_enable),
                   default=0)
    return Budgets(headroom_bytes=headroom, reaction_us=int(q.pfc.reaction_ms * 1000),
                   bmv2_lag_us=int(cfg.fidelity.bmv2_lag_ms * 1000),
                   cpu_saturated_s=cfg.fidelity.cpu_saturated_s,
                   steal_note_pct=cfg.fidelity.steal_note_pct,
                   host_lag_pct=cfg.fidelity.host_lag_pct)


class Run:
    """One run's results folder, state record and clock, and its finalising steps."""

    def __init__(self, cfg: FabricConfig, topo: Topology, results_dir: Path,
                 progress: Progress | None = None) -> None:
        self.cfg = cfg
        self.topo = topo
        self.results_dir = results_dir
        self.runtime_dir = runtime_dir_for(cfg.name)
        self.progress = progress or (lambda _msg: None)
        self.state = RunState(cfg.name)
        #: Origin of the run's clock: agents' telemetry and events, the scenario's timeline
        #: and counter samples are all seconds since this instant.
        self.t0 = time.monotonic()
        #: Frames lost in front of BMv2 over the whole run, read as the fabric stops.
        self.hidden_loss: int | None = None
        #: Packets the P4 programs discarded themselves, read as the fabric stops.
        self.pipeline_drops: int | None = None
        #: Why a figure of the fidelity guard is unknown (by its check's name).
        self.unmeasured: dict[str, str] = {}
        self._cpu = None  # testbed.run.cpuload.CpuSampler while agents run
        self.opened = False  # open() recorded this run
        #: The BMv2 build the switches ran ({"build", "binary"}), set as they start.
        self.bmv2: dict | None = None
        #: What the switch agents ran at ({"scheduling", "refused"}), set as they start.
        self.agents: dict | None = None

    @classmethod
    def named(cls, cfg: FabricConfig, topo: Topology, results_root: Path,
              progress: Progress | None = None) -> Run:
        """A run in a new folder under ``results_root``, named after the fabric and the time."""
        return cls(cfg, topo, results_dir_for(results_root, cfg.name), progress)

    # -- start ----------------------------------------------------------------------------
    def open(self, files: list[str], interfaces: list[str]) -> None:
        """Create the runtime and results folders, and record what the fabric will create."""
        make_runtime_dir(self.cfg.name)
        make_results_dir(self.results_dir)
        self.state.files = list(files)
        self.state.interfaces = list(interfaces)
        self.state.save()
        self.opened = True

    def write_inputs(self) -> None:
        """The resolved topology and config beside the results."""
        (self.results_dir / TOPOLOGY_FILE).write_text(self.topo.to_json())
        (self.results_dir / CONFIG_FILE).write_text(self.cfg.model_dump_json(indent=2))

    def start_cpu_sampler(self) -> None:
        from testbed.run.cpuload import CpuSampler

        self._cpu = CpuSampler(self.results_dir / TELEMETRY_DIR / CPU_FILE, self.t0)
        self._cpu.start()

    def steal_so_far(self) -> float | None:
        """The steal share (%) of the cores' time since the CPU sampler started (None: it
        is not running)."""
        return self._cpu.steal_so_far() if self._cpu is not None else None

    # -- end ------------------------------------------------------------------------------
    def read_hidden_loss(self, fabric) -> None:
        """While the switches still run: the frames their veths received that their P4
        programs never saw, summed over every port, and the packets the programs discarded
        themselves (every drop reason but the PFC frames a switch consumes). ``fabric``: what
        testbed.fabric.measure reads (its topo, net and sessions). A figure that cannot be read is
        left unknown, with why (:attr:`unmeasured`)."""
        if not fabric.sessions or fabric.net is None:
            self.unmeasured.update(dict.fromkeys(
                ("hidden_loss", "pipeline_drops"), "the switches were not running to be read"))
            return
        from testbed.config.constants import DROP_PFC_CONSUMED
        from testbed.control.p4runtime import one_line
        from testbed.fabric.measure import pipeline_drops, rx_counters

        try:
            counters = {s.name: rx_counters(fabric, s.name) for s in fabric.topo.switches}
            self.pipeline_drops = sum(v for s in fabric.topo.switches
                                      for (_p, why), v in pipeline_drops(fabric, s.name).items()
                                      if why != DROP_PFC_CONSUMED)
        except Exception as exc:  # a switch already gone: the figures stay unknown
            self.progress(f"switch counters not read: {one_line(exc)}")
            self.unmeasured.setdefault("hidden_loss", f"the switches' counters could not be "
                                                      f"read ({one_line(exc)})")
            self.unmeasured.setdefault("pipeline_drops", self.unmeasured["hidden_loss"])
            return
        gone = sorted(f"{sw}:{n}" for sw, ports in counters.items() for n, pc in ports.items()
                      if pc.veth_rx_packets < 0)
        if gone:
            self.unmeasured["hidden_loss"] = (f"no veth to read at {', '.join(gone)}: what "
                                              "reached those ports is not known")
            return
        self.hidden_loss = sum(max(pc.hidden_loss, 0) for ports in counters.values()
                               for pc in ports.values())

    def stop_cpu_sampler(self) -> None:
        if self._cpu is not None:
            self._cpu.stop()
            self._cpu = None

    def write_telemetry_summary(self, host_loss: int | None,
                                host_loss_unknown: str | None = None, *,
                                host_lag_pct: float | None = None,
                                hosts_pace: bool = True, host_lag_host: str | None = None,
                                host_lag_longest_ms: float | None = None) -> None:
        """telemetry/summary.json beside the agents' CSVs, with the fidelity guard's verdict:
        a failed run keeps it too. ``host_loss``: what the endpoints lost at their sockets
        (None: unknown, ``host_loss_unknown`` says why); ``host_lag_pct``: the most line-rate
        time a host lost to its own lateness (None: unknown, for the same reason), unless the
        hosts do not pace their frames (``hosts_pace`` False: mode tcp); which host, and the
        longest it came late, for the verdict's words. When the figures
        cannot be gathered at all, the file still says so: a verdict that is not ok, with why."""
        from testbed.analysis.deadlock import fidelity_figures, telemetry_summary
        from testbed.analysis.fidelity import assess, unmade

        out = self.results_dir / TELEMETRY_DIR / FABRIC_SUMMARY_FILE
        why = dict(self.unmeasured)
        credited = set(self.cfg.qos.credit_enable)
        if host_loss is None:
            why["host_loss"] = host_loss_unknown or "the endpoints' losses were not read"
        if host_lag_pct is None and hosts_pace:
            why["host_lag"] = host_loss_unknown or "the endpoints' lateness was not read"
        try:
            summary = telemetry_summary(self.results_dir)
            figs = fidelity_figures(self.results_dir, list(self.cfg.qos.pfc_enable),
                                    self.cfg.fidelity.cpu_busy_pct, self.hidden_loss,
                                    lossless_buffers(self.cfg, self.topo), host_loss,
                                    pipeline_drops=self.pipeline_drops,
                                    switches=[s.name for s in self.topo.switches],
                                    host_lag_pct=host_lag_pct,
                                    hosts_pace=hosts_pace, host_lag_host=host_lag_host,
                                    host_lag_longest_ms=host_lag_longest_ms,
                                    unmeasured=why,
                                    credited=sorted(credited),
                                    input_buffers=credit_buffers(self.cfg, self.topo),
                                    credit_timed=bool(credited) and credited <= set(
                                        self.cfg.qos.ecn))
            summary["fidelity"] = assess(figs, fidelity_budgets(self.cfg, self.topo))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a killed agent's half CSV
            self.progress(f"telemetry summary not made: {exc}")
            summary = {"fidelity": unmade(f"its telemetry could not be read ({exc})")}
        summary["bmv2"] = self.bmv2
        summary["agents"] = self.agents
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(summary, indent=2))
        except OSError as exc:
            self.progress(f"telemetry summary not written: {exc}")

    def close(self) -> None:
        """Remove what the state record names (after Mininet: whatever it left behind); nothing
        if the run never opened (refused beside another fabric, whose record of the same name
        is not this run's to remove)."""
        if self.opened:
            clean_state(self.state)

    def telemetry_summary(self) -> dict | None:
        """telemetry/summary.json as written when the run ended (None if it was not)."""
        return read_fabric_summary(self.results_dir)
