"""InfiniBand's link-level, credit-based flow control (IBA vol. 1, 7.9), pure: the books each
end of a link keeps for one virtual lane, and the flow control packet that carries them.

IB loses no packet to a full buffer because a port sends a lane's data only while the port at
the other end of the link has advertised room for it. Every data packet costs its length in
64-byte blocks. The transmitter counts the blocks it has sent (FCTBS, Flow Control Total Blocks
Sent); the receiver counts the blocks it has received (ABR, Adjusted Blocks Received) and tells
the transmitter up to which total it may send (FCCL, Flow Control Credit Limit: ABR plus the
free buffer, at most 2,048 blocks ahead). Both counters are 12 bits and wrap, so every
comparison is modulo 4,096. Each end sends, per lane, a flow control packet carrying its own
FCTBS and FCCL; the receiver takes the FCTBS it hears as its ABR, so that a packet corrupted on
the link is written off instead of holding its credit for ever. Where a PFC switch pauses a
class once its queue is past a threshold, an IB switch never sends what the next hop has no
room for: no headroom, no pause frame, and a port waiting for credit counts the wait
(IB's PortXmitWait counter), which is what :class:`XmitWait` keeps.

This is the arithmetic of mode ``ib-credit`` (:mod:`testbed.run.modes`), kept apart from the
sockets and gates that will carry it, so that it is tested without root.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from traffic.packets import mac_bytes
from traffic.wire import CREDIT_DST_MAC, ETH_HEADER_LEN, ETH_P_CREDIT

#: IB's flow control unit: a packet costs its length in 64-byte blocks, rounded up.
BLOCK_BYTES = 64
#: FCTBS, ABR and FCCL are 12-bit counters.
CREDIT_MODULUS = 1 << 12
#: A receiver advertises at most this many blocks beyond what it has received, so that a
#: limit is never mistaken for one behind the transmitter's count (half the counter's range).
MAX_CREDIT_BLOCKS = CREDIT_MODULUS // 2
#: IB's data lanes are VL0-VL14 (VL15 carries subnet management and is not flow controlled);
#: here a lane is a traffic class, 0-7.
MAX_VL = 15


class FcOp(IntEnum):
    """A flow control packet's Op field."""

    NORMAL = 0
    INIT = 1  # sent while the link trains: the receiver resets its books to the sender's


def blocks(frame_bytes: int) -> int:
    """The credit a frame of this length costs, in blocks."""
    if frame_bytes <= 0:
        raise ValueError(f"a frame has a positive length, not {frame_bytes}")
    return -(-frame_bytes // BLOCK_BYTES)


#: The packet without its LPCRC: Op (4 bits) and FCTBS (12), then VL (4) and FCCL (12), big
#: endian, as IBA 7.9's flow control packet lays them out (and Wireshark's infiniband_link
#: dissector reads them). Over Ethernet the frame's FCS covers what the 16-bit LPCRC covers on
#: an IB link.
FC_PACKET = struct.Struct("!HH")


@dataclass(frozen=True, slots=True)
class FlowControlPacket:
    """One lane's flow control packet: the sender's FCTBS for the lane and its FCCL."""

    vl: int
    fctbs: int
    fccl: int
    op: FcOp = FcOp.NORMAL

    def __post_init__(self) -> None:
        for name, value, top in (("vl", self.vl, MAX_VL), ("fctbs", self.fctbs,
                                 CREDIT_MODULUS - 1), ("fccl", self.fccl, CREDIT_MODULUS - 1)):
            if not 0 <= value <= top:
                raise ValueError(f"flow control packet: {name} {value} is outside 0..{top}")

    def pack(self) -> bytes:
        return FC_PACKET.pack((int(self.op) << 12) | self.fctbs, (self.vl << 12) | self.fccl)

    @classmethod
    def unpack(cls, data: bytes, offset: int = 0) -> FlowControlPacket:
        """The packet at ``offset``; ValueError for one too short or of a reserved Op."""
        if len(data) < offset + FC_PACKET.size:
            raise ValueError("flow control packet: truncated")
        first, second = FC_PACKET.unpack_from(data, offset)
        try:
            op = FcOp(first >> 12)
        except ValueError:
            raise ValueError(f"flow control packet: reserved Op {first >> 12}") from None
        return cls(vl=second >> 12, fctbs=first & 0xFFF, fccl=second & 0xFFF, op=op)


def credit_frame(src_mac: str, packets: Iterable[FlowControlPacket]) -> bytes:
    """An Ethernet frame carrying a port's flow control packets, one per lane in the lanes'
    order, back to back as an IB port sends them, padded to 60 bytes."""
    ordered = sorted(packets, key=lambda p: p.vl)
    if not ordered:
        raise ValueError("a credit frame carries at least one flow control packet")
    if len({p.vl for p in ordered}) != len(ordered):
        raise ValueError("a credit frame carries one flow control packet a lane")
    body = b"".join(p.pack() for p in ordered)
    frame = mac_bytes(CREDIT_DST_MAC) + mac_bytes(src_mac) + ETH_P_CREDIT.to_bytes(2, "big") + body
    return frame + b"\x00" * (60 - len(frame))


def parse_credit_frame(frame: bytes) -> list[FlowControlPacket] | None:
    """The flow control packets of a credit frame, or None for a frame of another EtherType.
    The padding ends them: the lanes come in order, one packet each, so a packet of all
    zeroes (VL0, FCTBS 0, FCCL 0) after the first is padding."""
    if len(frame) < ETH_HEADER_LEN + FC_PACKET.size or \
            int.from_bytes(frame[12:14], "big") != ETH_P_CREDIT:
        return None
    out: list[FlowControlPacket] = []
    for offset in range(ETH_HEADER_LEN, len(frame) - FC_PACKET.size + 1, FC_PACKET.size):
        if out and not any(frame[offset:offset + FC_PACKET.size]):
            break
        out.append(FlowControlPacket.unpack(frame, offset))
    return out


@dataclass(slots=True)
class CreditTransmitter:
    """The sending end of one lane: the blocks it has sent, and the limit it last heard.

    Until it hears a limit it holds no credit: a link sends no data before its flow control
    is initialised."""

    fctbs: int = 0
    fccl: int | None = None

    def credit_blocks(self) -> int:
        """The blocks it may send now: the limit less what it sent, modulo 4,096; none when
        the limit lies behind its count (more than 2,048 ahead is read as behind)."""
        if self.fccl is None:
            return 0
        credit = (self.fccl - self.fctbs) % CREDIT_MODULUS
        return credit if credit <= MAX_CREDIT_BLOCKS else 0

    def may_send(self, frame_bytes: int) -> bool:
        """IBA 7.9's test for a data packet: (FCCL - (FCTBS + its blocks)) mod 4096 is at
        most 2048."""
        if self.fccl is None:
            return False
        after = (self.fccl - (self.fctbs + blocks(frame_bytes))) % CREDIT_MODULUS
        return after <= MAX_CREDIT_BLOCKS

    def sent(self, frame_bytes: int) -> None:
        self.fctbs = (self.fctbs + blocks(frame_bytes)) % CREDIT_MODULUS

    def heard(self, fccl: int) -> None:
        """The peer's flow control packet for this lane gave this limit."""
        self.fccl = fccl % CREDIT_MODULUS


@dataclass(slots=True)
class CreditReceiver:
    """The receiving end of one lane: the blocks it has received (ABR), and the limit it
    advertises from the room its buffer has."""

    abr: int = 0

    def received(self, frame_bytes: int) -> None:
        self.abr = (self.abr + blocks(frame_bytes)) % CREDIT_MODULUS

    def heard(self, fctbs: int) -> None:
        """The peer's flow control packet says it has sent this many blocks: whatever of them
        did not arrive was lost on the link, and is written off."""
        self.abr = fctbs % CREDIT_MODULUS

    def limit(self, free_bytes: int) -> int:
        """The FCCL to advertise with this much free buffer (whole blocks only)."""
        room = min(max(free_bytes, 0) // BLOCK_BYTES, MAX_CREDIT_BLOCKS)
        return (self.abr + room) % CREDIT_MODULUS


@dataclass(slots=True)
class XmitWait:
    """How long a port had a frame to send and no credit to send it (IB's PortXmitWait, which
    counts it in ticks of the link; here in seconds of the clock the caller passes)."""

    seconds: float = 0.0
    stalls: int = 0
    _since: float | None = field(default=None, repr=False)

    def note(self, now: float, waiting: bool) -> None:
        """Called whenever the port looks at the lane: ``waiting`` is True while it holds a
        frame the credit does not cover."""
        if waiting and self._since is None:
            self._since = now
            self.stalls += 1
        elif not waiting and self._since is not None:
            self.seconds += now - self._since
            self._since = None

    @property
    def waiting(self) -> bool:
        return self._since is not None

    def total(self, now: float) -> float:
        """The wait so far, the current one included."""
        return self.seconds + (now - self._since if self._since is not None else 0.0)


def credit_left(sent_bytes: int, fccl: int | None) -> int:
    """The bytes a port may still send of a lane: the limit less what it sent, both counted
    as whole 64-byte blocks of running byte totals (so that the two ends, which count bytes,
    round alike), 0 when no limit was heard or the limit lies behind."""
    tx = CreditTransmitter(fctbs=(sent_bytes // BLOCK_BYTES) % CREDIT_MODULUS, fccl=fccl)
    return max(tx.credit_blocks() * BLOCK_BYTES - sent_bytes % BLOCK_BYTES, 0)


def advertised(drained_bytes: int, buffer_bytes: int) -> int:
    """The FCCL a receiver advertises for an input whose frames have let go of
    ``drained_bytes`` so far (a running total), with ``buffer_bytes`` of buffer."""
    return ((drained_bytes + buffer_bytes) // BLOCK_BYTES) % CREDIT_MODULUS
