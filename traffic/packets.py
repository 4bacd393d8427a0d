"""RoCEv2 and PFC frames as bytes: the endpoint's fast build and parse paths.

Scapy (``scapy.contrib.roce``, ``scapy.contrib.mac_control``, and :mod:`traffic.layers`) is the
reference: tests check that these bytes equal what Scapy builds. The endpoint cannot afford a
Scapy build per packet (nor Scapy's import time in every host), so :class:`RoceFrameBuilder`
keeps each QP's Ethernet/IPv4/UDP header prebuilt and writes only the BTH, the payload and the
ICRC (computed incrementally) per packet.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

ROCEV2_PORT = 4791
ETH_P_IP = 0x0800
ETH_P_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PFC_DST = "01:80:c2:00:00:01"

# RC opcodes (IBTA 9.2 / REFERENCE.md)
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY = 0x06, 0x07, 0x08, 0x0A
ACK = 0x11
CNP = 0x81
DATA_OPCODES = {SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, WRITE_FIRST, WRITE_MIDDLE,
                WRITE_LAST, WRITE_ONLY}
FIRST_OPCODES = {SEND_FIRST, WRITE_FIRST}
LAST_OPCODES = {SEND_LAST, SEND_ONLY, WRITE_LAST, WRITE_ONLY}
RETH_OPCODES = {WRITE_FIRST, WRITE_ONLY}

# AETH syndromes
SYNDROME_ACK = 0x00  # with credit count 0 in the low 5 bits
SYNDROME_NAK_PSN_SEQ = 0x60

DSCP_ROCE = 26
DSCP_CNP = 48
ECN_ECT0 = 0b10
ECN_CE = 0b11

BTH_LEN = 12
RETH_LEN = 16
AETH_LEN = 4
ICRC_LEN = 4
PSN_MASK = 0xFFFFFF
# opcode, flags (SE, M, pad, version), P_Key, FECN/BECN/reserved + DestQP, AckReq + PSN
_BTH = struct.Struct("!BBHII")
_ICRC = struct.Struct("<I")


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial arithmetic: negative when a is before b."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d & 0x800000 else d


def ipv4_checksum(header: bytes) -> int:
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def ip_bytes(ip: str) -> bytes:
    return bytes(int(x) for x in ip.split("."))


def _mask_ip_udp(ip_udp: bytes) -> bytes:
    b = bytearray(ip_udp)
    b[1] = 0xFF  # TOS (DSCP+ECN): marking must not break the ICRC
    b[8] = 0xFF  # TTL
    b[10:12] = b"\xff\xff"  # IP checksum
    b[26:28] = b"\xff\xff"  # UDP checksum
    return b"\xff" * 8 + bytes(b)  # the pseudo LRH of 8 bytes of ones


def _mask_bth(bth: bytes) -> bytes:
    return bth[:4] + b"\xff" + bth[5:]  # BTH FECN, BECN and reserved bits


def icrc(ip_udp_bth_payload: bytes) -> bytes:
    """ICRC over IPv4|UDP|BTH|payload (no ICRC yet), with the variant fields masked to ones."""
    data = bytes(ip_udp_bth_payload)
    crc = zlib.crc32(_mask_ip_udp(data[:28]))
    crc = zlib.crc32(_mask_bth(data[28:40]), crc)
    crc = zlib.crc32(data[40:], crc)
    return struct.pack("<I", crc & 0xFFFFFFFF)


@dataclass
class RoceFrameBuilder:
    """Prebuilt Ethernet/IPv4/UDP for one QP; per-packet work is struct packing and one CRC."""

    src_mac: str
    dst_mac: str
    src_ip: str
    dst_ip: str
    src_port: int
    dscp: int = DSCP_ROCE
    ecn: int = ECN_ECT0
    ttl: int = 64

    def __post_init__(self) -> None:
        self._eth = mac_bytes(self.dst_mac) + mac_bytes(self.src_mac) + struct.pack("!H", ETH_P_IP)
        self._src = ip_bytes(self.src_ip)
        self._dst = ip_bytes(self.dst_ip)
        self._ip_cache: dict[int, bytes] = {}

    def _ip_udp(self, l4_payload_len: int) -> tuple[bytes, int]:
        """The IPv4+UDP header for a length, and the running ICRC over its masked form."""
        cached = self._ip_cache.get(l4_payload_len)
        if cached is None:
            total = 20 + 8 + l4_payload_len
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, (self.dscp << 2) | self.ecn, total, 0,
                             0x4000, self.ttl, 17, 0, self._src, self._dst)
            ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
            udp = struct.pack("!HHHH", self.src_port, ROCEV2_PORT, 8 + l4_payload_len, 0)
            hdr = self._eth + ip + udp
            cached = (hdr, zlib.crc32(_mask_ip_udp(ip + udp)))
            self._ip_cache[l4_payload_len] = cached
        return cached

    def frame(self, opcode: int, dqpn: int, psn: int, payload: bytes = b"", *,
              ack_req: bool = False, becn: bool = False, ext: bytes = b"",
              solicited: bool = False) -> bytes:
        """One RoCEv2 frame. ``ext`` holds the extended headers (RETH, AETH) after the BTH."""
        pad = (-len(payload)) % 4
        bth = _BTH.pack(opcode, (int(solicited) << 7) | (pad << 4), 0xFFFF,
                        (int(becn) << 30) | (dqpn & 0xFFFFFF),
                        (int(ack_req) << 31) | (psn & PSN_MASK))
        hdr, crc = self._ip_udp(BTH_LEN + len(ext) + len(payload) + pad + ICRC_LEN)
        crc = zlib.crc32(_mask_bth(bth), crc)
        if ext:
            crc = zlib.crc32(ext, crc)
        crc = zlib.crc32(payload, crc)
        if pad:
            crc = zlib.crc32(b"\x00" * pad, crc)
        return b"".join((hdr, bth, ext, payload, b"\x00" * pad, _ICRC.pack(crc & 0xFFFFFFFF)))

    def reth(self, va: int, rkey: int, dlen: int) -> bytes:
        return struct.pack("!QII", va, rkey, dlen)

    @staticmethod
    def aeth(syndrome: int, msn: int) -> bytes:
        return struct.pack("!I", (syndrome << 24) | (msn & 0xFFFFFF))


def pfc_frame(src_mac: str, quanta: dict[int, int]) -> bytes:
    """An IEEE 802.1Qbb frame: class-enable vector and eight pause times, padded to 60 bytes."""
    vector = 0
    times = [0] * 8
    for cls, q in quanta.items():
        vector |= 1 << cls
        times[cls] = q
    body = struct.pack("!HH8H", PFC_OPCODE, vector, *times)
    frame = mac_bytes(PFC_DST) + mac_bytes(src_mac) + struct.pack("!H", ETH_P_MAC_CONTROL) + body
    return frame + b"\x00" * (60 - len(frame))


@dataclass
class ParsedRoce:
    """What the endpoint needs from a received RoCEv2 frame."""

    src_ip: str
    dst_ip: str
    ecn: int
    src_port: int
    opcode: int
    becn: bool
    dqpn: int
    ack_req: bool
    psn: int
    payload: bytes  # after BTH and any extended header, without pad and ICRC
    syndrome: int = 0
    msn: int = 0
    icrc_ok: bool = True


class Malformed(ValueError):
    """A frame that claims to be RoCEv2 but cannot be one; the reason is the message."""


def parse_pfc(frame: bytes) -> dict[int, int] | None:
    """Class -> quanta for a PFC frame, or None if the frame is not PFC."""
    if len(frame) < 14 + 20 or frame[12:14] != b"\x88\x08":
        return None
    opcode, vector, *times = struct.unpack("!HH8H", frame[14:34])
    if opcode != PFC_OPCODE:
        return None
    return {c: times[c] for c in range(8) if vector >> c & 1}


def parse_roce(frame: bytes) -> ParsedRoce | None:
    """Parse an Ethernet frame; None if it is not RoCEv2, Malformed if it is but broken."""
    if len(frame) < 14 + 20 + 8 or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 0x0F) * 4
    if frame[14 + 9] != 17 or ihl < 20:
        return None
    u = 14 + ihl
    if len(frame) < u + 8:
        return None
    sport, dport, ulen = struct.unpack("!HHH", frame[u:u + 6])
    if dport != ROCEV2_PORT:
        return None
    total = struct.unpack("!H", frame[16:18])[0]
    end = 14 + total
    b = u + 8
    if end > len(frame) or end - b < BTH_LEN + ICRC_LEN:
        raise Malformed("truncated BTH")
    opcode, flags, _pkey, fb, q0, q1, q2, apsn = struct.unpack("!BBHBBBBI", frame[b:b + 12])
    pad = (flags >> 4) & 3
    p = ParsedRoce(
        src_ip=".".join(map(str, frame[26:30])), dst_ip=".".join(map(str, frame[30:34])),
        ecn=frame[15] & 3, src_port=sport, opcode=opcode, becn=bool(fb >> 6 & 1),
        dqpn=(q0 << 16) | (q1 << 8) | q2, ack_req=bool(apsn >> 31), psn=apsn & PSN_MASK,
        payload=b"",
    )
    p.icrc_ok = icrc(frame[14:end - ICRC_LEN]) == frame[end - ICRC_LEN:end]
    off = b + BTH_LEN
    if opcode == ACK:
        if end - ICRC_LEN - off < AETH_LEN:
            raise Malformed("truncated AETH")
        aeth = struct.unpack("!I", frame[off:off + 4])[0]
        p.syndrome, p.msn = aeth >> 24, aeth & 0xFFFFFF
    elif opcode in RETH_OPCODES:
        off += RETH_LEN
    elif opcode not in DATA_OPCODES and opcode != CNP:
        raise Malformed(f"unsupported opcode 0x{opcode:02x}")
    if opcode in DATA_OPCODES:
        stop = end - ICRC_LEN - pad
        if stop < off:
            raise Malformed("truncated payload")
        p.payload = frame[off:stop]
    return p
