"""Facts the testbed's parts share, each defined once: the P4 program's constants (its own
definitions are in p4/headers.p4; tests/test_constants.py holds the two to each other and to
the compiled P4Info), the wire formats' numbers, and the kernel port model's qdisc handles.

Nothing here imports from the project, so that every part may import it: the switch agent,
the control plane, the hosts' endpoints (traffic/).
"""

from __future__ import annotations

# -- traffic classes and ports ------------------------------------------------------------------

#: Traffic classes (IEEE 802.1Q priorities) of every port: kernel queues, P4 counters, PFC.
NUM_TCS = 8
#: The P4 program's port space (port_t is bit<9>): every per-port array has this many cells.
NUM_PORTS = 512
#: Cells of a per-(port, class) P4 array, indexed port * NUM_TCS + class.
PORT_TC_CELLS = NUM_PORTS * NUM_TCS
#: The switch agent's own port on its switch: the agent's tick frames enter BMv2 there.
AGENT_PORT = 500
#: The P4 program's multicast group for the PFC frames it sends: every port but the agent's.
PFC_MCAST_GROUP = 1
#: Width of the P4 program's map of the ports a queue paused (paused_by, meta.pfc_ports).
PFC_PORT_BITMAP_BITS = 64

# -- Ethernet, IPv4, UDP --------------------------------------------------------------------------

ETH_P_IP = 0x0800
#: IEEE 802.3 MAC control (PAUSE and PFC).
ETH_P_MAC_CONTROL = 0x8808
#: The MAC control opcode of IEEE 802.1Qbb priority-based flow control.
MAC_CONTROL_PFC = 0x0101
#: Where PFC frames go (IEEE 802.3 Annex 31B's reserved multicast address).
PFC_DST_MAC = "01:80:c2:00:00:01"
#: The unit of a PFC pause time: 512 bit times of the link.
PFC_QUANTUM_BITS = 512
#: The largest pause time a PFC frame carries (a 16-bit field).
PFC_MAX_QUANTA = 0xFFFF
IP_PROTO_UDP = 17
#: The UDP destination port of RoCEv2 (IBA Annex A17).
ROCEV2_UDP_PORT = 4791
#: Linux: a packet socket of this protocol sees every frame, both ways (linux/if_ether.h).
ETH_P_ALL = 0x0003
#: Linux: a packet socket's address says this of a frame the host itself sent (packet(7)).
PACKET_OUTGOING = 4

# -- the switch agent's tick ----------------------------------------------------------------------

#: EtherType of the agent's tick frames (IEEE local experimental).
ETH_P_TICK = 0x88B6
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

# -- the kernel port model (testbed.machine.ports)
# --------------------------------------------------------

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

#: Go-Back-N's retransmission timer is IB's Local ACK Timeout (IBA spec, vol. 1, 9.7.6.1.3):
#: 4.096 us x 2^n, n being the QP's ``timeout`` attribute (ibv_modify_qp). The emulation scales
#: it to the link as it scales DCQCN's timers (traffic.dcqcn: x 40 Gbit/s / link rate), so
#: that it stands to the emulated pauses and queues as a real one stands to real ones:
#: n = 8 is 1.05 ms at 40 Gbit/s and 4.2 s at 10 Mbit/s, above the longest a lossless fabric
#: of this testbed holds a packet (a seeded incast's 1.6 MB into one 10 Mbit/s port takes
#: 1.3 s to drain), so that a lossless run resends nothing. The scenario's
#: ``endpoints.local_ack_timeout`` sets another n.
LOCAL_ACK_TIMEOUT = 8
#: IB's retry count (the QP's ``retry_cnt``, 0..7): timeouts in a row without progress before
#: the QP gives up and goes to the error state (a work completion IBV_WC_RETRY_EXC_ERR). 7, the
#: largest, is what NCCL sets (NCCL_IB_RETRY_CNT).
RETRY_COUNT = 7


def port_tc_cell(port: int, tc: int) -> int:
    """The cell of (port, class) in a per-(port, class) P4 array (PORT_TC_CELLS cells)."""
    return port * NUM_TCS + tc
