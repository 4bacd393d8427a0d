"""A single BMv2 running our program in a throwaway namespace, wired to veth pairs.

Used by the PTF data-plane tests: port i of the switch is ``sw<i>``; its peer ``ptf<i>`` is where
the test sends and captures. Everything lives in one named namespace that is deleted at the end,
so a failed test leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.config import bmv2_build
from testbed.config.bmv2_build import BuildChoice
from testbed.control.entries import EntryBuilder, load_p4info
from testbed.control.p4runtime import SwitchSession
from testbed.fabric.bmv2 import Bmv2Options, Bmv2Process


def sh(*args: str) -> str:
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


@dataclass
class Harness:
    ns: str
    ports: list[int]
    grpc_addr: str
    device_id: int
    session: SwitchSession
    builder: EntryBuilder
    switch: Bmv2Process

    def ptf_intf(self, port: int) -> str:
        return f"ptf{port}"

    def sw_intf(self, port: int) -> str:
        return f"sw{port}"

    def veth_rx_packets(self, port: int) -> int:
        out = sh("ip", "-n", self.ns, "-s", "-j", "link", "show", self.sw_intf(port))
        import json

        return json.loads(out)[0]["stats64"]["rx"]["packets"]


@contextlib.contextmanager
def bmv2_harness(n_ports: int = 4, device_id: int = 1,
                 extra_ports: tuple[int, ...] = (),
                 build: BuildChoice = "auto", binary: str | None = None,
                 ready_timeout: float = 15.0) -> Iterator[Harness]:
    """``binary``: what to start in the build's place (a wrapper, e.g. under valgrind), which
    may take up to ``ready_timeout`` seconds to accept gRPC."""
    ns = f"roce-ptf-{uuid.uuid4().hex[:6]}"
    tmp = Path(tempfile.mkdtemp(prefix="roce-ptf-"))
    sh("ip", "netns", "add", ns)
    sess = None
    proc = None
    try:
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
           "net.ipv6.conf.default.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        ports = list(range(1, n_ports + 1)) + list(extra_ports)
        for p in ports:
            sh("ip", "-n", ns, "link", "add", f"sw{p}", "type", "veth", "peer", "name", f"ptf{p}")
            for intf in (f"sw{p}", f"ptf{p}"):
                sh("ip", "-n", ns, "link", "set", intf, "mtu", "9000", "up")
                subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", intf, "rx", "off",
                                "tx", "off", "sg", "off", "tso", "off", "gso", "off", "gro", "off"],
                               capture_output=True)
        opts = Bmv2Options(name=f"ptf-{device_id}", device_id=device_id,
                           ports={p: f"sw{p}" for p in ports},
                           binary=binary or bmv2_build.select(build, log=False).binary,
                           grpc_socket=tmp / "sw.grpc", log_path=tmp / "sw.log")
        proc = Bmv2Process(opts)
        proc.start(lambda cmd, **kw: subprocess.Popen(["ip", "netns", "exec", ns, *cmd], **kw))
        proc.wait_ready(ready_timeout)
        builder = EntryBuilder(load_p4info())
        sess = SwitchSession(opts.name, device_id, opts.grpc_addr, builder)
        sess.connect()
        sess.push_pipeline()
        yield Harness(ns, ports, opts.grpc_addr, device_id, sess, builder, proc)
    finally:
        if sess is not None:
            sess.close()
        if proc is not None:
            proc.stop()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
