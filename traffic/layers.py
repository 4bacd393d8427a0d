"""Scapy layers for RoCEv2, PFC and IB credits: the reference the fast byte paths are checked
against.

Scapy's own ``scapy.contrib.roce`` has BTH, AETH and the CNP padding; RETH (the RDMA WRITE
header) is added here, declaratively, and bound to the opcodes that carry it.
"""

from __future__ import annotations

from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.fields import BitEnumField, BitField, IntField, LongField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

from traffic.packets import DSCP_ROCE, ECN_ECT0, RETH_OPCODES
from traffic.wire import ROCEV2_UDP_PORT

__all__ = ["AETH", "BTH", "CNPPadding", "IBFlowControl", "PFC", "RETH", "scapy_roce"]


class RETH(Packet):
    """RDMA Extended Transport Header (virtual address, remote key, DMA length)."""

    name = "RETH"
    fields_desc = [LongField("va", 0), IntField("rkey", 0), IntField("dlen", 0)]


for _op in RETH_OPCODES:
    bind_layers(BTH, RETH, opcode=_op)

PFC = MACControlClassBasedFlowControl


def scapy_roce(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, opcode: int,
               dqpn: int, psn: int, payload: bytes = b"", ack_req: bool = False,
               dscp: int = DSCP_ROCE, ecn: int = ECN_ECT0, ext: Packet | None = None) -> Packet:
    """A RoCEv2 frame built the slow, reference way with Scapy's layers."""
    pad = (-len(payload)) % 4
    bth = BTH(opcode=opcode, dqpn=dqpn, psn=psn, ackreq=int(ack_req), padcount=pad)
    pkt = (Ether(src=src_mac, dst=dst_mac) /
           IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, flags="DF", id=0, ttl=64) /
           UDP(sport=sport, dport=ROCEV2_UDP_PORT, chksum=0) / bth)
    if ext is not None:
        pkt = pkt / ext
    return pkt / (payload + b"\x00" * pad)


class IBFlowControl(Packet):
    """InfiniBand's link-level flow control packet (IBA vol. 1, 7.9) without its LPCRC, the
    reference for :mod:`traffic.credits`."""

    name = "IBFlowControl"
    fields_desc = [BitEnumField("op", 0, 4, {0: "normal", 1: "init"}), BitField("fctbs", 0, 12),
                   BitField("vl", 0, 4), BitField("fccl", 0, 12)]
