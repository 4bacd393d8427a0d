"""The wire's facts, each defined once: what an Ethernet, IPv4, UDP, RoCEv2 and PFC frame
carries, the Linux packet-socket numbers the endpoints read frames with, and InfiniBand's
transport defaults (the Local ACK Timeout and retry count).

They live in traffic/ because the hosts' endpoints (this package) run in their own process and
import nothing of the testbed; the testbed imports them from here (its own facts, the P4
program's and the kernel port's, are in :mod:`testbed.config.constants`). The P4 program's
copies (p4/headers.p4) are held to these by tests/test_constants.py.
"""

from __future__ import annotations

# -- traffic classes ------------------------------------------------------------------------------

#: Traffic classes (IEEE 802.1Q priorities) of every port: kernel queues, P4 counters, PFC.
NUM_TCS = 8

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
#: Mode ib-credit's flow control frames (traffic.credits): IEEE 802's Local Experimental
#: EtherType 1, to a locally administered group address that no bridge takes for its own.
ETH_P_CREDIT = 0x88B5
CREDIT_DST_MAC = "03:00:00:00:1b:0f"
IP_PROTO_UDP = 17
#: The UDP destination port of RoCEv2 (IBA Annex A17).
ROCEV2_UDP_PORT = 4791
#: Linux: a packet socket of this protocol sees every frame, both ways (linux/if_ether.h).
ETH_P_ALL = 0x0003
#: Linux: a packet socket's address says this of a frame the host itself sent (packet(7)).
PACKET_OUTGOING = 4
#: packet(7)'s socket option level.
SOL_PACKET = 263

#: Header sizes on the wire, in bytes: Ethernet (no VLAN tag), IPv4 (no options), UDP.
ETH_HEADER_LEN = 14
IPV4_HEADER_LEN = 20
UDP_HEADER_LEN = 8
#: RoCEv2's transport headers (IBA vol. 1, 9.2-9.4): the Base Transport Header of every
#: packet, the RDMA Extended Transport Header of a WRITE's first packet, the ACK Extended
#: Transport Header, and the Invariant CRC that ends every packet.
BTH_LEN = 12
RETH_LEN = 16
AETH_LEN = 4
ICRC_LEN = 4
#: A RoCEv2 data packet's headers inside the interface MTU: IPv4, UDP, BTH, RETH (the first
#: packet of an RDMA WRITE carries it; the largest data packet) and ICRC.
ROCE_PACKET_OVERHEAD = IPV4_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN + RETH_LEN + ICRC_LEN

#: The DSCPs RoCE traffic is marked with by default (NVIDIA's "roce lossless" defaults, which
#: SONiC's too): data on 26, CNPs on 48 (/sys/class/net/<if>/ecn/roce_np/cnp_dscp). A fabric's
#: own come from its qos.dscp_to_tc_map and qos.cnp_dscp.
DSCP_ROCE = 26
DSCP_CNP = 48

# -- InfiniBand's transport -----------------------------------------------------------------------

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
