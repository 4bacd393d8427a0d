"""One switch egress port as the product builds it (testbed.machine.ports: htb, a tbf gate per
class) on a veth pair ``pa`` -> ``pb`` in a namespace of its own, for the port tests and for
benchmarks/gate_lead.py.

    with port(10.0) as (ns, gates):
        gates.close(3)

The namespace, and with it the veths and qdiscs, is removed on exit, also when a test fails.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator

from testbed.machine.ports import PortGates, PortSpec, scheduler_commands
from testbed.topology.qos import max_frame_bytes

#: RoCE's DSCP to class 3, and DSCP 48 to class 6 (another class that must not be paused).
DSCP_TO_TC = ((26, 3), (48, 6))


@contextlib.contextmanager
def port(rate_mbps: float = 10.0, buffers: int = 400_000, mtu: int = 9000,
         credited: tuple[int, ...] = (), inputs: tuple[int, ...] = ()
         ) -> Iterator[tuple[str, PortGates]]:
    """The port at ``rate_mbps``, ``buffers`` bytes a class, its gates admitting the largest
    frame of ``mtu`` (the ``credited`` classes with a FIFO per input port, as mode ib-credit
    has them); yields the namespace's name and the port's gates."""
    ns = f"rtp{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for cmd in (["link", "add", "dev", "pa", "type", "veth", "peer", "name", "pb"],
                    ["link", "set", "dev", "pa", "mtu", str(mtu), "up"],
                    ["link", "set", "dev", "pb", "mtu", str(mtu), "up"]):
            subprocess.run(["ip", "-n", ns, *cmd], check=True)
        spec = PortSpec("pa", rate_mbps, (buffers,) * 8, DSCP_TO_TC,
                        max_frame=max_frame_bytes(mtu), credited=credited, inputs=inputs)
        r = subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", "-"],
                           input="\n".join(scheduler_commands(spec)) + "\n", text=True,
                           capture_output=True)
        assert r.returncode == 0, r.stderr
        gates = PortGates(spec, netns=ns)
        try:
            yield ns, gates
        finally:
            gates.close_sockets()
    finally:
        subprocess.run(["ip", "netns", "del", ns])
