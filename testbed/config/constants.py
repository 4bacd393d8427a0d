"""Facts the testbed's parts share, each defined once: the P4 program's constants (its own
definitions are in p4/headers.p4; tests/test_constants.py holds the two to each other and to
the compiled P4Info) and the kernel port model's qdisc handles. The wire formats' numbers
(EtherTypes, the RoCEv2 port, PFC's quanta, the traffic classes) are :mod:`traffic.wire`'s,
since the hosts' endpoints import nothing of the testbed.

Nothing here imports from the project but traffic.wire, so that every part may import it.
"""

from __future__ import annotations

from traffic.wire import NUM_TCS

# -- traffic classes and ports ------------------------------------------------------------------

#: The P4 program's port space (port_t is bit<9>): every per-port array has this many cells.
NUM_PORTS = 512
#: Cells of a per-(port, class) P4 array, indexed port * NUM_TCS + class.
PORT_TC_CELLS = NUM_PORTS * NUM_TCS
#: The cell of port 0, class 0, which no queue holds (switch ports are numbered from 1): a
#: queue with no profiled class above it on its port names this one, always empty, as that class.
EMPTY_CELL = 0
#: The switch agent's own port on its switch: the agent's tick frames enter BMv2 there.
AGENT_PORT = 500
#: The P4 program's multicast group for the PFC frames it sends: every port but the agent's.
PFC_MCAST_GROUP = 1
#: Width of the P4 program's map of the ports a queue paused (paused_by, meta.pfc_ports).
PFC_PORT_BITMAP_BITS = 64

# -- the switch agent's tick ----------------------------------------------------------------------

#: EtherType of the agent's tick frames (IEEE local experimental).
ETH_P_TICK = 0x88B6
#: EtherType of the agent's own frames into its port's qdisc (testbed.machine.ports): a kick,
#: which the qdisc drops, and the plugs a closing gate sends to use up its burst, which reach
#: the neighbour and which it drops (p4/ingress.p4; a host's kernel has no handler for it).
#: Plugs carry their port's MAC as source: their own switch, which sees them leave, leaves them
#: uncounted (p4/ingress.p4, own_plug).
ETH_P_KICK = 0x88B7
#: A tick's backlog field when the tick carries no kernel backlog (a timer tick).
TICK_TIMER_ONLY = 0xFFFFFFFF
#: A tick's sent field when the agent does not know what the kernel let go of.
TICK_SENT_UNKNOWN = 0xFFFFFFFF
#: A queue threshold (ECN's Kmin and Kmax, PFC's XOFF) that no queue reaches: what a queue that
#: does not mark, or is not lossless, is given, so that the program tests no flag per packet.
THRESHOLD_NEVER = 0xFFFFFFFF

# -- P4 drop counter ------------------------------------------------------------------------------

#: Cells per port of the drop counter, indexed port * NUM_DROP_REASONS + reason.
NUM_DROP_REASONS = 16
DROP_CELLS = NUM_PORTS * NUM_DROP_REASONS
DROP_NOT_IPV4 = 1
DROP_PARSE_ERROR = 2
DROP_TTL_EXPIRED = 3
DROP_NO_ROUTE = 4
DROP_PFC_CONSUMED = 5  # not a loss: PFC frames are consumed by the switch
DROP_BAD_CHECKSUM = 6
#: Each drop reason in words (docs/RESULTS.md lists them so).
DROP_REASONS = {
    DROP_NOT_IPV4: "not IPv4",
    DROP_PARSE_ERROR: "parse error (truncated)",
    DROP_TTL_EXPIRED: "TTL expired",
    DROP_NO_ROUTE: "no route",
    DROP_PFC_CONSUMED: "PFC frame consumed (not a loss)",
    DROP_BAD_CHECKSUM: "bad IPv4 checksum",
}

# -- the kernel port model (testbed.machine.ports) -------------------------------------------------

#: Class c of a switch port is htb class 1:<GATE_HANDLE_BASE + c> and its tbf gate is qdisc
#: <GATE_HANDLE_BASE + c>: (hex 10..17).
GATE_HANDLE_BASE = 0x10


def gate_major(tc: int) -> int:
    """The major number of class ``tc``'s gate qdisc (and the minor of its htb class)."""
    return GATE_HANDLE_BASE + tc


def gate_class(major: int) -> int | None:
    """The class whose gate has this qdisc major number, None if no class's."""
    tc = major - GATE_HANDLE_BASE
    return tc if 0 <= tc < NUM_TCS else None


#: Mode ib-credit (testbed.machine.inputs): under a credited class's gate, an htb of one FIFO
#: per input port, so that the kernel counts what each input has in the switch. The htb's
#: major is INPUT_HTB_BASE + class; (class c, input port i)'s FIFO is qdisc
#: INPUT_FIFO_BASE + (c << 10) + i, hanging from htb class <INPUT_HTB_BASE + c>:<i>.
INPUT_HTB_BASE = 0x30
INPUT_FIFO_BASE = 0x1000
#: The input "port" of frames no input's filter claims (the switch's own: plugs).
OTHER_INPUT = 0x200
#: The byte of a forwarded frame's source MAC where the P4 program writes its ingress port
#: (set_nexthop), and so the largest port number it can carry.
INPUT_MAC_BYTE = 2
MAX_INPUT_PORT = 0xFF
#: The same place as the P4 program's shift of the port into the 48-bit address.
INPUT_MAC_SHIFT = 8 * (5 - INPUT_MAC_BYTE)


def input_fifo_major(tc: int, port: int) -> int:
    """The qdisc major of class ``tc``'s FIFO for frames that came in on ``port``."""
    return INPUT_FIFO_BASE + (tc << 10) + port


def input_of(major: int) -> tuple[int, int] | None:
    """(class, input port) of an input FIFO's qdisc major, None if it is none's."""
    rel = major - INPUT_FIFO_BASE
    if not 0 <= rel < NUM_TCS << 10:
        return None
    return rel >> 10, rel & 0x3FF



def port_tc_cell(port: int, tc: int) -> int:
    """The cell of (port, class) in a per-(port, class) P4 array (PORT_TC_CELLS cells)."""
    return port * NUM_TCS + tc
