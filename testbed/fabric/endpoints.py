"""The hosts' RoCE endpoints: one `python -m traffic.endpoint` per host, in its namespace.

:class:`EndpointPool` starts them with the fabric's settings (the RoCE path MTU, the DSCP of
each class, the run's clock), connects a client to each once its control socket answers,
reads what they lost at their own sockets, and stops them.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from testbed.config.models import FabricConfig
from testbed.machine.state import RunState
from testbed.results.files import ENDPOINTS_DIR, LOG_SUFFIX
from testbed.topology.graph import Topology, intf_name
from testbed.topology.qos import endpoint_args

#: How long a client waits for its endpoint's control socket to answer.
CONNECT_TIMEOUT_S = 15


class EndpointPool:
    """One RoCE endpoint process per host, and a client (traffic.client) for each."""

    def __init__(self, cfg: FabricConfig, topo: Topology, runtime_dir: Path, results_dir: Path,
                 state: RunState, t0: float) -> None:
        self.cfg = cfg
        self.topo = topo
        self.runtime_dir = runtime_dir
        self.out = results_dir / ENDPOINTS_DIR
        self.state = state
        self.t0 = t0  # the run's clock: the endpoints' series count seconds from it
        self.clients: dict = {}  # host name -> traffic.client.EndpointClient
        self.procs: list[subprocess.Popen] = []
        #: Frames the endpoints lost at their own sockets, read as they stop: none until one
        #: says so; None, with ``host_loss_unknown`` saying why, once one could not be read.
        self.host_loss: int | None = 0
        self.host_loss_unknown: str | None = None
        #: The largest share (percent) of a host's active time its NIC stood idle with a frame
        #: due, its process late beyond the pacers' slack (traffic.pacing); None when an
        #: endpoint did not answer or the endpoints do not measure it.
        self.host_lag_pct: float | None = None
        self.host_lag_host: str | None = None  # the host of that share
        self.host_lag_longest_ms: float | None = None  # and the longest it came late
        #: The endpoints pace their own frames and measure their lateness (RoCE); False when
        #: none of them does (mode tcp: the kernel sends), as their stats say.
        self.hosts_pace = True

    def socket(self, host: str) -> Path:
        """The endpoint's control socket."""
        return self.runtime_dir / f"{host}.ep"

    def command(self, host: str, extra_args: list[str] | None = None) -> list[str]:
        h = self.topo.host(host)
        return [sys.executable, "-m", "traffic.endpoint", "--intf", intf_name(h.name, 0),
                "--mac", h.mac, "--ip", h.ip, "--next-hop-mac", h.gateway_mac,
                "--line-rate-mbps", str(h.rate_mbps), "--control", str(self.socket(h.name)),
                "--out", str(self.out / h.name), "--t0", repr(self.t0), *endpoint_args(self.cfg),
                *(extra_args or [])]

    def start(self, net, extra_args: list[str] | None = None) -> dict:
        """Start every host's endpoint (``net.get(host)`` must have Mininet's ``popen``), then
        connect to each; returns the clients by host name."""
        from traffic.client import EndpointClient

        self.out.mkdir(parents=True, exist_ok=True)
        for h in self.topo.hosts:
            sock = self.socket(h.name)
            with open(self.out / f"{h.name}{LOG_SUFFIX}", "w") as log:
                p = net.get(h.name).popen(self.command(h.name, extra_args), stdout=log,
                                          stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.state.add_process(p.pid, str(sock))
            self.state.files.append(str(sock))
        self.state.save()
        for h in self.topo.hosts:
            self.clients[h.name] = EndpointClient(self.socket(h.name), timeout=CONNECT_TIMEOUT_S)
        return self.clients

    def read_host_loss(self) -> None:
        """Frames the endpoints lost at their own sockets (a receive buffer that overflowed, a
        send the kernel refused): a host that did not keep up, like a NIC's RX overflow; and
        the line-rate time each lost to its process's lateness (``host_lag_pct``). An
        endpoint that does not answer (it died) makes the figures unknown, never zero."""
        from testbed.control.p4runtime import one_line
        from traffic.pacing import lost_share

        if not self.clients:  # none started, or already read as they stopped
            if self.host_lag_pct is None and self.hosts_pace:
                self.host_lag_pct = 0.0  # nothing was due
            return
        lost = 0
        shares: dict[str, float | None] = {}
        longest: dict[str, float] = {}
        for host, c in self.clients.items():
            try:
                st = c.call(cmd="stats")["stats"]
            except Exception as exc:  # an endpoint already gone: the figure is unknown
                self.host_loss = None
                self.host_loss_unknown = (f"the endpoint of {host} did not answer "
                                          f"({one_line(exc)}): what it lost is not known")
                return
            lost += st.get("rx_socket_drops", 0) + st.get("send_errors", 0)
            shares[host] = lost_share(st)
            longest[host] = st.get("late_max_s") or 0.0
        if self.host_loss is not None:
            self.host_loss += lost
        measured = {h: v for h, v in shares.items() if v is not None}
        self.hosts_pace = bool(measured)  # none measures it: none paces (mode tcp)
        if len(measured) == len(shares):  # else one did not say: unknown
            worst = max(measured, key=lambda h: measured[h])
            self.host_lag_pct = round(100 * measured[worst], 2)
            self.host_lag_host = worst
            self.host_lag_longest_ms = round(1000 * longest[worst], 1)

    def host_lag(self) -> dict:
        """The hosts' lag as the run's verdict takes it (``write_telemetry_summary``)."""
        return {"host_lag_pct": self.host_lag_pct, "hosts_pace": self.hosts_pace,
                "host_lag_host": self.host_lag_host,
                "host_lag_longest_ms": self.host_lag_longest_ms}

    def stop(self) -> None:
        """Read the host loss, then ask each endpoint to stop, and wait for it."""
        self.read_host_loss()
        for c in self.clients.values():
            with contextlib.suppress(Exception):
                c.call(cmd="stop")
            c.close()
        self.clients = {}
        for p in self.procs:
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []
