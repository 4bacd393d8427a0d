"""Mode ib-credit's input buffers in the kernel: under a credited class's gate, one FIFO per
input port, so that the kernel counts what each input has in the switch.

InfiniBand's credits count room in the *input* buffer of the next hop, per input port and
lane (IBA vol. 1, 7.9), and an IB switch serves its inputs round robin at each output. This
fabric buffers at egress (testbed.machine.ports), where a class's queue mixes every input. So
in mode ib-credit the gate of a credited class holds an htb of one class per input port, each
with its own byte FIFO, all of one priority: htb serves them round robin, a whole frame a
turn, as an IB switch's output arbitrates between inputs:

    tbf <10+c>:  the gate (the credit the next hop granted, testbed.agent.credit)
      `-- htb <30+c>:  default: the OTHER_INPUT class (the switch's own frames: plugs)
            |-- class <30+c>:<i>, one per input port i  `-- bfifo <input_fifo_major(c, i)>:
            `-- filter: source MAC byte INPUT_MAC_BYTE == i -> <30+c>:<i>

The P4 program writes each forwarded frame's ingress port into its source MAC
(p4/ingress.p4, set_nexthop), which is how a filter on the egress veth tells the inputs apart.
What an input has let go of is the sum of its FIFOs' sent bytes over the switch's ports, which
a credit limit adds the buffer to (testbed.agent.credit). One frame a gate may read as gone a
little early: tbf takes the frame at the head of its child to look at it, and htb counts it
sent then, though the closed gate still holds it.
"""

from __future__ import annotations

from collections.abc import Iterable

from testbed.config.constants import (
    INPUT_HTB_BASE,
    INPUT_MAC_BYTE,
    MAX_INPUT_PORT,
    OTHER_INPUT,
    gate_major,
    input_fifo_major,
    input_of,
)
from testbed.machine.tcstats import QdiscStats

#: u32 reads 4-byte words at offsets from the network header; a forwarded frame's source MAC
#: starts 8 bytes before it (Ethernet: 6 destination, 6 source, 2 EtherType).
_MAC_SRC_OFFSET = -8


def input_commands(dev: str, tc: int, inputs: Iterable[int], limit: int, quantum: int) -> list[str]:
    """`tc -batch` lines that give class ``tc``'s gate on ``dev`` one FIFO of ``limit`` bytes
    per input port (after the gate is installed: they replace its default FIFO)."""
    htb = INPUT_HTB_BASE + tc
    lines = [f"qdisc add dev {dev} parent {gate_major(tc):x}:1 handle {htb:x}: htb "
             f"default {OTHER_INPUT:x}"]
    word = _MAC_SRC_OFFSET + (INPUT_MAC_BYTE // 4) * 4
    shift = 8 * (3 - INPUT_MAC_BYTE % 4)
    for port in [*sorted(set(inputs)), OTHER_INPUT]:
        if port != OTHER_INPUT and not 0 < port <= MAX_INPUT_PORT:
            raise ValueError(f"input port {port}: a frame's source MAC carries ports "
                             f"1..{MAX_INPUT_PORT}")
        # every input one priority and a rate no link reaches: htb serves them round robin
        lines += [f"class add dev {dev} parent {htb:x}: classid {htb:x}:{port:x} htb "
                  f"rate 1gbit quantum {quantum}",
                  f"qdisc add dev {dev} parent {htb:x}:{port:x} handle "
                  f"{input_fifo_major(tc, port):x}: bfifo limit {limit}"]
        if port != OTHER_INPUT:
            lines.append(f"filter add dev {dev} parent {htb:x}: protocol all prio 1 u32 match "
                         f"u32 {port << shift:#010x} {0xFF << shift:#010x} at {word} "
                         f"flowid {htb:x}:{port:x}")
    return lines


def input_majors(tcs: Iterable[int], inputs: Iterable[int]) -> frozenset[int]:
    """The qdisc majors of these classes' input FIFOs: what a dump must read for them."""
    return frozenset(input_fifo_major(tc, p) for tc in tcs for p in inputs)


def input_sent(dump: Iterable[QdiscStats]) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (input port, class), summed over a dump's ports: (bytes sent, bytes held)."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for q in dump:
        which = input_of(q.handle >> 16)
        if which is None or q.kind != "bfifo":
            continue
        tc, port = which
        sent, held = out.get((port, tc), (0, 0))
        out[(port, tc)] = (sent + q.bytes, held + q.backlog)
    return out
