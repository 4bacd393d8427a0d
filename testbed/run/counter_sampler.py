"""The P4 counters of every switch, sampled over a scenario's run into ``p4_counters.csv``."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

from testbed.fabric.measure import counter_cells
from testbed.results.telemetry import P4_COUNTER_COLUMNS


class CounterSampler(threading.Thread):
    """P4 counters of every switch over the run, as rows of (t, switch, counter, index, value)."""

    COUNTERS = ("RoceIngress.rx_port", "RoceEgress.tx_port", "RoceEgress.tx_port_tc",
                "RoceIngress.pfc_rx", "RoceEgress.pfc_egress.pfc_tx",
                "RoceIngress.lossless.ecn_marked", "RoceIngress.lossless.pfc_xoff_triggered",
                "RoceIngress.lossless.ticks", "RoceIngress.drops")

    def __init__(self, fabric, path: Path, period: float) -> None:
        super().__init__(daemon=True)
        self.fabric, self.path, self.period = fabric, path, period
        self.stop_event = threading.Event()

    def run(self) -> None:
        t0 = self.fabric.t0  # the run's clock, shared with the agents' telemetry
        with open(self.path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([c for c, _ in P4_COUNTER_COLUMNS])
            while not self.stop_event.wait(self.period):
                t = f"{time.monotonic() - t0:.3f}"
                for name, sess in list(self.fabric.sessions.items()):
                    ports = list(self.fabric.topo.switch(name).ports)
                    for c in self.COUNTERS:
                        try:
                            cells = sess.read_counter(c, counter_cells(c, ports))
                        except Exception:  # a switch going down at the end of the run
                            continue
                        for idx, (pk, by) in sorted(cells.items()):
                            w.writerow([t, name, c, idx, pk, by])
                fh.flush()
