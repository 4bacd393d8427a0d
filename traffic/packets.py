"""RoCEv2 and PFC frames as bytes: the endpoint's fast build and parse paths.

Scapy (``scapy.contrib.roce``, ``scapy.contrib.mac_control``, and :mod:`traffic.layers`) is the
reference: tests check that these bytes equal what Scapy builds. The endpoint cannot afford a
Scapy build per packet (nor Scapy's import time in every host), so :class:`RoceFrameBuilder`
keeps each QP's Ethernet/IPv4/UDP header prebuilt and writes only the BTH, the payload and the
ICRC (computed incrementally) per packet.

The ICRC over a 4 KiB payload is the most expensive step of a send or a receive (about 1 us of
zlib per pass). Both sides usually know the payload's CRC already, because the payload is a
fixed pattern (:mod:`traffic.qp`), so they may pass it in and the ICRC is finished with
:func:`crc32_combine` (a few table lookups) instead of a pass over the payload.

The receive path is as strict as a RoCE NIC's (:data:`REJECT_REASONS`: IPv4 version, options,
header checksum, fragments, UDP port and length, BTH version) at no cost per frame: the IPv4
and UDP checks run once per distinct header, which is then cached with its share of the ICRC,
the lookup the ICRC needed anyway.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from traffic.wire import (
    AETH_LEN,
    BTH_LEN,
    DSCP_ROCE,
    ETH_P_IP,
    ETH_P_MAC_CONTROL,
    ICRC_LEN,
    IP_PROTO_UDP,
    MAC_CONTROL_PFC,
    NUM_TCS,
    PFC_DST_MAC,
    RETH_LEN,
    ROCEV2_UDP_PORT,
)

#: The EtherTypes' two bytes, as the parsers compare them (frame[12], frame[13]).
_IP_HI, _IP_LO = ETH_P_IP.to_bytes(2, "big")
_MAC_CONTROL_HI, _MAC_CONTROL_LO = ETH_P_MAC_CONTROL.to_bytes(2, "big")
#: A PFC frame's body after the EtherType (p4/headers.p4's pfc_h): opcode, class-enable vector,
#: a pause time per class.
PFC_BODY = struct.Struct(f"!HH{NUM_TCS}H")

# RC opcodes (InfiniBand Architecture Specification, 9.2)
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY = 0x06, 0x07, 0x08, 0x0A
ACK = 0x11
CNP = 0x81
DATA_OPCODES = {SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, WRITE_FIRST, WRITE_MIDDLE,
                WRITE_LAST, WRITE_ONLY}
FIRST_OPCODES = {SEND_FIRST, WRITE_FIRST}
LAST_OPCODES = {SEND_LAST, SEND_ONLY, WRITE_LAST, WRITE_ONLY}
RETH_OPCODES = {WRITE_FIRST, WRITE_ONLY}

# AETH syndromes (IBA Vol. 1, 9.3.5 AETH): bits 7-5 say ACK (0b000), RNR NAK (0b001) or NAK
# (0b011); the low 5 bits are the ACK's credit count or the NAK's code. Our responder has no
# receive-queue credits to advertise, so its ACKs carry 0b11111 ("invalid credit count": the
# requester is not limited by end-to-end credits), as Linux rxe's do (AETH_ACK_UNLIMITED in
# drivers/infiniband/sw/rxe/rxe_hdr.h, sent by rxe_resp.c for every ACK).
AETH_CREDITS_UNLIMITED = 0x1F
SYNDROME_ACK = 0x00 | AETH_CREDITS_UNLIMITED
SYNDROME_NAK_PSN_SEQ = 0x60  # NAK, PSN sequence error (rxe's AETH_NAK_PSN_SEQ_ERROR)

ECN_ECT0 = 0b10
ECN_CE = 0b11

#: The only IPv4 header a RoCEv2 frame has: version 4, IHL 5 (no options).
IPV4_VER_IHL = 0x45
#: IPv4 flags and fragment offset: MF and the 13 offset bits (DF and the reserved bit are not).
IPV4_MF_OFFSET = 0x3FFF
PSN_MASK = 0xFFFFFF
# opcode, flags (SE, M, pad, version), P_Key, FECN/BECN/reserved + DestQP, AckReq + PSN
_BTH = struct.Struct("!BBHII")
_BTH_FIELDS = struct.Struct("!BBHBBBBI")
_ICRC = struct.Struct("<I")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_PAD = (b"", b"\x00", b"\x00\x00", b"\x00\x00\x00")
_bth_pack = _BTH.pack
_icrc_pack = _ICRC.pack
_crc32 = zlib.crc32
#: The BTH byte holding FECN, BECN and reserved bits, as the ICRC sees it (masked to ones).
_BTH_MASK = 0xFF000000


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


_SHIFT_TABLES: dict[int, tuple[list[int], list[int], list[int], list[int]]] = {}


def _shift_tables(nbytes: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """Byte tables of the linear map "run a CRC-32 register over ``nbytes`` zero bytes".

    Built from zlib itself (32 basis vectors) and cached per length; payload lengths are few
    (the path MTU and the tails of messages).
    """
    tables = _SHIFT_TABLES.get(nbytes)
    if tables is None:
        zeros = bytes(nbytes)
        base = zlib.crc32(zeros)
        basis = [zlib.crc32(zeros, 1 << i) ^ base for i in range(32)]
        built = []
        for k in range(4):
            t = [0] * 256
            for v in range(1, 256):
                low = v & -v
                t[v] = t[v ^ low] ^ basis[8 * k + low.bit_length() - 1]
            built.append(t)
        if len(_SHIFT_TABLES) >= 1024:  # odd message sizes: keep the cache bounded
            _SHIFT_TABLES.clear()
        tables = _SHIFT_TABLES[nbytes] = (built[0], built[1], built[2], built[3])
    return tables


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """``zlib.crc32(a + b)`` from ``crc1 = zlib.crc32(a)``, ``crc2 = zlib.crc32(b)``, ``len(b)``.

    zlib's own crc32_combine, which Python does not expose: CRC-32 is affine, so
    ``crc32(b, c) = crc32(b) ^ L(c)`` where ``L`` runs the register over ``len(b)`` zeros.
    """
    t0, t1, t2, t3 = _shift_tables(len2)
    return crc2 ^ t0[crc1 & 0xFF] ^ t1[crc1 >> 8 & 0xFF] ^ t2[crc1 >> 16 & 0xFF] ^ t3[crc1 >> 24]


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
                             0x4000, self.ttl, IP_PROTO_UDP, 0, self._src, self._dst)
            ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
            udp = struct.pack("!HHHH", self.src_port, ROCEV2_UDP_PORT, 8 + l4_payload_len, 0)
            hdr = self._eth + ip + udp
            cached = (hdr, zlib.crc32(_mask_ip_udp(ip + udp)))
            self._ip_cache[l4_payload_len] = cached
        return cached

    def frame(self, opcode: int, dqpn: int, psn: int, payload: bytes = b"", *,
              ack_req: bool = False, becn: bool = False, ext: bytes = b"",
              solicited: bool = False, payload_crc: int | None = None) -> bytes:
        """One RoCEv2 frame. ``ext`` holds the extended headers (RETH, AETH) after the BTH.

        ``payload_crc``, if given, must be ``zlib.crc32(payload)``: the ICRC then costs no pass
        over the payload.
        """
        plen = len(payload)
        pad = -plen & 3
        flags = (solicited << 7) | (pad << 4)
        dq = dqpn & 0xFFFFFF
        apsn = (ack_req << 31) | (psn & PSN_MASK)
        l4_len = BTH_LEN + ICRC_LEN + len(ext) + plen + pad
        hdr, crc = self._ip_cache.get(l4_len) or self._ip_udp(l4_len)
        crc = _crc32(_bth_pack(opcode, flags, 0xFFFF, _BTH_MASK | dq, apsn), crc)
        if ext:
            crc = _crc32(ext, crc)
        if payload_crc is None:
            crc = _crc32(payload, crc)
        elif plen:  # crc32_combine, inline: this is the hot path of every data packet
            t0, t1, t2, t3 = _SHIFT_TABLES.get(plen) or _shift_tables(plen)
            crc = payload_crc ^ t0[crc & 0xFF] ^ t1[crc >> 8 & 0xFF] ^ t2[crc >> 16 & 0xFF] \
                ^ t3[crc >> 24]
        if pad:
            crc = _crc32(_PAD[pad], crc)
        return b"".join((hdr, _bth_pack(opcode, flags, 0xFFFF, (becn << 30) | dq, apsn), ext,
                         payload, _PAD[pad], _icrc_pack(crc)))

    def reth(self, va: int, rkey: int, dlen: int) -> bytes:
        return struct.pack("!QII", va, rkey, dlen)

    @staticmethod
    def aeth(syndrome: int, msn: int) -> bytes:
        return struct.pack("!I", (syndrome << 24) | (msn & 0xFFFFFF))


def pfc_frame(src_mac: str, quanta: dict[int, int]) -> bytes:
    """An IEEE 802.1Qbb frame: class-enable vector and eight pause times, padded to 60 bytes."""
    vector = 0
    times = [0] * NUM_TCS
    for cls, q in quanta.items():
        vector |= 1 << cls
        times[cls] = q
    body = PFC_BODY.pack(MAC_CONTROL_PFC, vector, *times)
    frame = (mac_bytes(PFC_DST_MAC) + mac_bytes(src_mac) + struct.pack("!H", ETH_P_MAC_CONTROL)
             + body)
    return frame + b"\x00" * (60 - len(frame))


@dataclass(slots=True)
class ParsedRoce:
    """What the endpoint needs from a received RoCEv2 frame."""

    addrs: bytes  # IPv4 source and destination, as on the wire (see src_ip, dst_ip)
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

    @property
    def src_ip(self) -> str:
        """Dotted source address; decoded on demand, the endpoint never needs it per packet."""
        return socket.inet_ntoa(self.addrs[:4])

    @property
    def dst_ip(self) -> str:
        return socket.inet_ntoa(self.addrs[4:])


#: Why :func:`parse_roce` refuses a frame that reached its IPv4 or RoCE checks; the checks of a
#: RoCE NIC's receive path, which drops such frames before its transport sees them. The endpoint
#: counts each (``rx_rejected`` in its ``stats``).
REJECT_REASONS = (
    "ip_version",   # EtherType IPv4, version not 4 (RFC 791; Linux ip_rcv drops it too)
    "ip_ihl",       # IHL not 5: under 5 is no IPv4 header; over 5, options, which RoCEv2 never
                    # sends and rxe's ICRC assumes away (rxe_icrc.c masks a 20-byte header)
    "ip_checksum",  # IPv4 header checksum wrong (RFC 791, RFC 1071)
    "ip_fragment",  # a UDP fragment (MF set or offset > 0): RoCEv2 is sent with DF, never in
                    # pieces, and a NIC does not reassemble
    "udp_port",     # UDP, but not to 4791 (IBA Annex A17, RoCEv2): not for the RoCE engine
    "udp_length",   # UDP length disagrees with the IPv4 total length (RFC 768)
    "bth_tver",     # BTH transport header version not 0 (IBA 9.2; rxe_recv.c hdr_check)
)
#: The reason every :class:`Malformed` carries: RoCEv2 by its headers, yet truncated or of an
#: opcode this endpoint does not implement. Counted apart (``malformed`` in the stats).
MALFORMED = "malformed"


class Rejected(ValueError):
    """A frame a RoCE NIC drops on receive. ``reason`` names the check (:data:`REJECT_REASONS`),
    so the endpoint can count drops per cause; the message says what was wrong."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


class Malformed(Rejected):
    """A frame that claims to be RoCEv2 but cannot be one; the detail is the message."""

    def __init__(self, detail: str) -> None:
        super().__init__(MALFORMED, detail)


def parse_pfc(frame: bytes) -> dict[int, int] | None:
    """Class -> quanta for a PFC frame, or None if the frame is not PFC.

    The one PFC parser: the endpoint (PFC from its leaf) and the switch agent (PFC arriving on
    or leaving a switch port, testbed.agent) both read frames with it. IEEE 802.1Qbb: MAC
    Control opcode 0x0101, a class-enable vector, then eight pause times in quanta.
    """
    if len(frame) < 14 + 20 or frame[12] != _MAC_CONTROL_HI or frame[13] != _MAC_CONTROL_LO:
        return None
    opcode, vector, *times = PFC_BODY.unpack_from(frame, 14)
    if opcode != MAC_CONTROL_PFC:
        return None
    return {c: times[c] for c in range(NUM_TCS) if vector >> c & 1}


#: The ICRC's running CRC over the masked pseudo-LRH, IPv4 and UDP headers of every 28-byte
#: IPv4+UDP header that passed :func:`_check_ip_udp`, keyed by the header as received. A flow's
#: headers repeat (a few lengths, TOS with and without CE), so once a flow's first frames are
#: in, every header check is this one lookup, which the ICRC needed anyway: strictness is free
#: on the hot path. Only headers that passed are stored, so a hit means "valid".
_IP_UDP_OK: dict[bytes, int] = {}


def _check_ip_udp(frame: bytes) -> int | None:
    """The IPv4 and UDP checks of a NIC's receive path, for a header not seen before.

    Returns the header's masked CRC (and caches it), None for IPv4 that is not UDP (not for
    RoCE; counted as such), or raises :class:`Rejected`. IP-layer checks come first, as a
    host's IP layer makes them before it demultiplexes (Linux ip_rcv_core: version and IHL,
    then the checksum); then what RoCEv2 asks of a UDP datagram.
    """
    vi = frame[14]
    if vi >> 4 != 4:
        raise Rejected("ip_version", f"IP version {vi >> 4}")
    ihl = (vi & 0x0F) * 4
    if ihl < 20 or len(frame) < 14 + ihl:
        raise Rejected("ip_ihl", f"IHL {vi & 0x0F}")
    # RFC 791/1071: the one's-complement sum of a valid header, its checksum included, is
    # 0xFFFF, so the checksum of the whole header comes out 0.
    if ipv4_checksum(frame[14:14 + ihl]):
        raise Rejected("ip_checksum")
    if frame[23] != IP_PROTO_UDP:
        return None
    if _U16.unpack_from(frame, 20)[0] & IPV4_MF_OFFSET:
        raise Rejected("ip_fragment")
    if ihl != 20:
        raise Rejected("ip_ihl", f"IP options ({ihl - 20} bytes)")
    _sport, dport, udp_len = struct.unpack_from("!HHH", frame, 34)
    if dport != ROCEV2_UDP_PORT:
        raise Rejected("udp_port", f"UDP port {dport}")
    ip_len = _U16.unpack_from(frame, 16)[0]
    if udp_len != ip_len - 20 or udp_len < 8:
        raise Rejected("udp_length", f"UDP length {udp_len}, IPv4 total length {ip_len}")
    if udp_len < 8 + BTH_LEN + ICRC_LEN:
        raise Malformed("truncated BTH")
    hdr = frame[14:42]
    if len(_IP_UDP_OK) >= 4096:  # many flows or junk: keep the cache bounded
        _IP_UDP_OK.clear()
    crc = _IP_UDP_OK[hdr] = zlib.crc32(_mask_ip_udp(hdr))
    return crc


def parse_roce(frame: bytes, payload_crc: Callable[[ParsedRoce], int | None] | None = None
               ) -> ParsedRoce | None:
    """Parse an Ethernet frame; None if it is not IPv4/UDP, :class:`Rejected` (with its reason)
    if a RoCE NIC would drop it, :class:`Malformed` if it is RoCEv2 but broken.

    Strict as a NIC's receive path (see :data:`REJECT_REASONS`): IPv4 without options, a good
    header checksum, no fragment, UDP to 4791 with a length that agrees with IPv4's, BTH
    version 0. A bad ICRC is not raised but reported (``icrc_ok``), as the endpoint counts it.

    ``payload_crc``, if given, is asked for ``zlib.crc32(p.payload)`` before the ICRC check; a
    receiver that compares the payload with bytes it expects knows that CRC already, and the
    check then costs no pass over the payload. It returns None when it does not know.
    """
    n = len(frame)
    if n < 14 + 20 + 8 or frame[12] != _IP_HI or frame[13] != _IP_LO:
        return None
    crc = _IP_UDP_OK.get(frame[14:42])  # a header that passed every check before: its CRC
    if crc is None:
        crc = _check_ip_udp(frame)
        if crc is None:
            return None
    end = 14 + _U16.unpack_from(frame, 16)[0]
    if end > n:
        raise Malformed("truncated frame")
    b = 42
    opcode, flags, pkey, fb, q0, q1, q2, apsn = _BTH_FIELDS.unpack_from(frame, b)
    if flags & 0x0F:
        raise Rejected("bth_tver", f"BTH TVer {flags & 0x0F}")
    pad = (flags >> 4) & 3
    # positional: src_port, opcode, becn, dqpn, ack_req, psn, payload (the hot path)
    p = ParsedRoce(frame[26:34], frame[15] & 3, _U16.unpack_from(frame, 34)[0], opcode,
                   bool(fb >> 6 & 1), (q0 << 16) | (q1 << 8) | q2, bool(apsn >> 31),
                   apsn & PSN_MASK, b"")
    off = b + BTH_LEN
    stop = end - ICRC_LEN
    if opcode == ACK:
        if stop - off < AETH_LEN:
            raise Malformed("truncated AETH")
        aeth = _U32.unpack_from(frame, off)[0]
        p.syndrome, p.msn = aeth >> 24, aeth & 0xFFFFFF
    elif opcode in RETH_OPCODES:
        off += RETH_LEN
    elif opcode not in DATA_OPCODES and opcode != CNP:
        raise Malformed(f"unsupported opcode 0x{opcode:02x}")
    known = None
    if opcode in DATA_OPCODES:
        stop -= pad
        if stop < off:
            raise Malformed("truncated payload")
        p.payload = frame[off:stop]
        if payload_crc is not None:
            known = payload_crc(p)
    # The ICRC from the cached header CRC and the masked BTH; a known payload CRC replaces the
    # pass over the payload with a combine.
    crc = _crc32(_BTH_FIELDS.pack(opcode, flags, pkey, 0xFF, q0, q1, q2, apsn), crc)
    if known is None:
        crc = _crc32(memoryview(frame)[b + BTH_LEN:end - ICRC_LEN], crc)
    else:
        if off > b + BTH_LEN:
            crc = _crc32(frame[b + BTH_LEN:off], crc)
        if stop > off:
            t0, t1, t2, t3 = _SHIFT_TABLES.get(stop - off) or _shift_tables(stop - off)
            crc = known ^ t0[crc & 0xFF] ^ t1[crc >> 8 & 0xFF] ^ t2[crc >> 16 & 0xFF] \
                ^ t3[crc >> 24]
        if pad:
            crc = _crc32(frame[stop:end - ICRC_LEN], crc)
    p.icrc_ok = _ICRC.unpack_from(frame, end - ICRC_LEN)[0] == crc
    return p
