"""Two hosts in network namespaces joined by a veth pair, optionally through a path bridge.

    with host_pair(tmp, bridge_args=["--drop", "0.01"]) as hp:
        a, b = hp.endpoint("a"), hp.endpoint("b")

Every namespace, interface and process made here is removed on exit, also when a test fails.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from traffic.client import EndpointClient

REPO = Path(__file__).resolve().parent.parent
MACS = {"a": "02:00:0a:00:01:01", "b": "02:00:0a:00:02:01"}
IPS = {"a": "10.0.1.1", "b": "10.0.2.1"}


def sh(*args: str) -> None:
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")


@dataclass
class HostPair:
    tmp: Path
    tag: str
    line_mbps: float
    ns: dict[str, str] = field(default_factory=dict)
    intf: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    clients: list[EndpointClient] = field(default_factory=list)
    bridge: subprocess.Popen | None = None

    def run(self, host: str, *cmd: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[host], *cmd], cwd=REPO, **kw)
        self.procs.append(p)
        return p

    def endpoint(self, host: str, *extra: str) -> EndpointClient:
        other = "b" if host == "a" else "a"
        sock = self.tmp / f"{host}.ep"
        self.run(host, sys.executable, "-m", "traffic.endpoint", "--intf", self.intf[host],
                 "--mac", MACS[host], "--ip", IPS[host], "--next-hop-mac", MACS[other],
                 "--line-rate-mbps", str(self.line_mbps), "--control", str(sock),
                 "--out", str(self.tmp / host), *extra,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c = EndpointClient(sock, timeout=10)
        self.clients.append(c)
        return c


@contextlib.contextmanager
def host_pair(tmp: Path, line_mbps: float = 10.0, bridge_args: list[str] | None = None
              ) -> Iterator[HostPair]:
    tag = uuid.uuid4().hex[:5]
    hp = HostPair(tmp, tag, line_mbps)
    names = {"a": f"rta{tag}", "b": f"rtb{tag}", "m": f"rtm{tag}"}
    made: list[str] = []
    try:
        for h in ("a", "b") + (("m",) if bridge_args is not None else ()):
            sh("ip", "netns", "add", names[h])
            made.append(names[h])
            hp.ns[h] = names[h]
            sh("ip", "netns", "exec", names[h], "sysctl", "-qw",
               "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        if bridge_args is None:
            pairs = [("a", "eth0", "b", "eth0")]
        else:
            pairs = [("a", "eth0", "m", "ma"), ("m", "mb", "b", "eth0")]
        for x, xi, y, yi in pairs:
            sh("ip", "link", "add", f"t{tag}{x}{xi}"[:15], "type", "veth", "peer", "name",
               f"t{tag}{y}{yi}"[:15])
            for node, tmpname, final in ((x, f"t{tag}{x}{xi}"[:15], xi),
                                         (y, f"t{tag}{y}{yi}"[:15], yi)):
                sh("ip", "link", "set", "dev", tmpname, "netns", names[node])
                sh("ip", "-n", names[node], "link", "set", "dev", tmpname, "name", final)
                sh("ip", "-n", names[node], "link", "set", "dev", final, "mtu", "9000", "up")
        for h in ("a", "b"):
            hp.intf[h] = "eth0"
            sh("ip", "-n", names[h], "addr", "add", f"{IPS[h]}/32", "dev", "eth0")
            sh("ip", "-n", names[h], "link", "set", "lo", "up")
        if bridge_args is not None:
            hp.bridge = subprocess.Popen(
                ["ip", "netns", "exec", names["m"], sys.executable, "-m", "tests.pathsim", "ma",
                 "mb", *bridge_args], cwd=REPO, stdout=subprocess.PIPE, text=True)
            time.sleep(0.3)
        yield hp
    finally:
        for c in hp.clients:
            with contextlib.suppress(Exception):
                c.call(cmd="stop")
            c.close()
        for p in hp.procs + ([hp.bridge] if hp.bridge else []):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def bridge_counts(hp: HostPair) -> dict:
    import json

    assert hp.bridge is not None
    hp.bridge.terminate()
    out, _ = hp.bridge.communicate(timeout=5)
    return json.loads(out.strip().splitlines()[-1])
