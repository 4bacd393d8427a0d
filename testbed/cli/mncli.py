"""The Mininet CLI, with commands for what the testbed adds: `pfcwd` (watchdog state per
queue) and `ports SWITCH` (kernel queues of a switch's ports)."""

from __future__ import annotations

from mininet.cli import CLI

from testbed.results.telemetry import pfcwd_states


class TestbedCLI(CLI):
    prompt = "roce-testbed> "

    def __init__(self, mininet, fabric, **kw) -> None:
        self.fabric = fabric
        super().__init__(mininet, **kw)

    def do_pfcwd(self, line: str) -> None:
        """pfcwd [SWITCH]: PFC watchdog state of each lossless queue (storms, drops)."""
        states = pfcwd_states(self.fabric.runtime_dir)
        want = line.split()
        if not states:
            self.stdout.write("no watchdog state: enable agent.pfc_watchdog in the config\n")
            return
        self.stdout.write(f"{'switch':<8} {'port':>4} {'tc':>2} {'state':<7} {'storms':>6} "
                          f"{'dropped':>8} {'paused':>6} {'left_ms':>7}\n")
        for st in states:
            if want and st.switch not in want:
                continue
            for q in st.queues:
                state = "STORM" if q.storm else "ok"
                self.stdout.write(
                    f"{st.switch:<8} {q.port:>4} {q.tc:>2} {state:<7} {q.storms:>6} "
                    f"{q.dropped:>8} {str(q.paused):>6} {q.detection_left_ms:>7}\n")

    def do_ports(self, line: str) -> None:
        """ports SWITCH: backlog, drops and sent packets of each port's kernel class queues."""
        from testbed.fabric.measure import kernel_stats

        name = line.strip()
        try:
            sw = self.fabric.topo.switch(name)
        except KeyError as exc:
            self.stdout.write(f"{exc.args[0]}\n")
            return
        stats = kernel_stats(self.mn.get(name), list(sw.ports), name)
        self.stdout.write(f"{'port':>4} {'peer':<8} {'tc':>2} {'backlog_B':>9} {'drops':>6} "
                          f"{'sent_pkts':>9}\n")
        for port, per in stats.items():
            for tc, s in sorted(per.items()):
                if s["sent_packets"] or s["backlog_bytes"] or s["drops"]:
                    self.stdout.write(f"{port:>4} {sw.ports[port].peer:<8} {tc:>2} "
                                      f"{s['backlog_bytes']:>9} {s['drops']:>6} "
                                      f"{s['sent_packets']:>9}\n")
