"""RC queue pairs: segmentation, PSNs, coalesced ACKs, NAK and Go-Back-N, as Linux rxe does.

Pure logic with injected time: the requester hands out the next frame to send when the NIC asks,
the responder returns the ACK/NAK to answer with. Neither touches a socket or a clock, so their
behaviour under loss, duplication and reordering is tested without a network.

Payload bytes follow a pattern fixed by their offset in the QP's byte stream, so the responder
checks that every byte arrives once, in order, with the right content.
"""

from __future__ import annotations

import collections
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from traffic.dcqcn import REFERENCE_LINK_BPS
from traffic.packets import (
    FIRST_OPCODES,
    LAST_OPCODES,
    PSN_MASK,
    RETH_OPCODES,
    SEND_FIRST,
    SEND_LAST,
    SEND_MIDDLE,
    SEND_ONLY,
    SYNDROME_ACK,
    SYNDROME_NAK_PSN_SEQ,
    WRITE_FIRST,
    WRITE_LAST,
    WRITE_MIDDLE,
    WRITE_ONLY,
    ParsedRoce,
    RoceFrameBuilder,
    psn_add,
    psn_diff,
)
from traffic.wire import LOCAL_ACK_TIMEOUT, RETRY_COUNT

_PERIOD = 251  # a prime, so the pattern does not line up with packet sizes
_PATTERN = bytes(i % _PERIOD for i in range(_PERIOD * 2 + 65536))
_PATTERN_LEN = len(_PATTERN)


def pattern(offset: int, length: int) -> bytes:
    """The payload bytes at ``offset`` of a QP's stream."""
    start = offset % _PERIOD
    if length <= len(_PATTERN) - start:
        return _PATTERN[start:start + length]
    return bytes((offset + i) % _PERIOD for i in range(length))


_PATTERN_CRC: dict[tuple[int, int], int] = {}


def pattern_crc(offset: int, length: int) -> int:
    """``zlib.crc32(pattern(offset, length))``, cached: the pattern repeats every 251 bytes, so a
    QP sending full-MTU packets needs at most 251 of them, and its ICRCs need no payload pass."""
    key = (offset % _PERIOD, length)
    crc = _PATTERN_CRC.get(key)
    if crc is None:
        if len(_PATTERN_CRC) >= 8192:  # many odd message sizes: keep the cache bounded
            _PATTERN_CRC.clear()
        crc = _PATTERN_CRC[key] = zlib.crc32(pattern(offset, length))
    return crc


#: Opcodes that begin a message.
_STARTS = FIRST_OPCODES | {SEND_ONLY, WRITE_ONLY}
_OPS = {"write": (WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY),
        "send": (SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY)}


@dataclass(slots=True)
class Message:
    msg_id: int
    kind: str  # "write" | "send"
    size: int
    stream_offset: int
    posted_at: float
    first_psn: int = -1
    last_psn: int = -1
    completed_at: float | None = None


@dataclass(slots=True)
class Segment:
    psn: int
    msg: Message
    offset: int  # within the message
    length: int
    opcode: int
    ack_req: bool
    sent_times: int = 0


#: IB's Local ACK Timeout unit: the timer is 4.096 us x 2^n (IBA spec, vol. 1, 9.7.6.1.3).
ACK_TIMEOUT_UNIT_S = 4.096e-6


def local_ack_timeout_s(n: int, line_rate_bps: float) -> float:
    """IB's Local ACK Timeout for the QP attribute ``timeout`` = n, scaled from the 40 Gbit/s
    of DCQCN's reference to the emulated link, as DCQCN's timers are (traffic.dcqcn): every
    time of the emulation is that many times a real one."""
    if not 1 <= n <= 31:
        raise ValueError(f"local ACK timeout {n}: IB's exponent is 1..31 (0 means none)")
    return ACK_TIMEOUT_UNIT_S * 2 ** n * REFERENCE_LINK_BPS / line_rate_bps


#: The timer at the default link (10 Mbit/s) for the default n: a QP made without a timer.
DEFAULT_RTO_S = local_ack_timeout_s(LOCAL_ACK_TIMEOUT, 10e6)


@dataclass
class RequesterStats:
    packets_sent: int = 0
    bytes_sent: int = 0
    retransmitted: int = 0
    naks: int = 0
    acks: int = 0
    timeouts: int = 0
    bytes_acked: int = 0
    messages_completed: int = 0
    #: 1 once the QP ran out of retries (retry_count timeouts in a row without progress) and
    #: went to the error state: its messages were flushed unsent, as a NIC flushes its WRs.
    retry_exceeded: int = 0
    messages_flushed: int = 0


class Requester:
    """The sending side of an RC QP."""

    def __init__(self, qpn: int, dqpn: int, builder: RoceFrameBuilder, *, mtu: int = 4096,
                 start_psn: int = 0, max_outstanding: int = 32, ack_req_every: int = 8,
                 rto_s: float = DEFAULT_RTO_S, retry_count: int = RETRY_COUNT,
                 rkey: int = 0x1234, paused: Callable[[float], float] | None = None) -> None:
        """``paused(now)``: the seconds PFC has held this QP's class at the NIC so far, in all
        (:meth:`check_timeout` does not count them); read at each progress, so a pause before
        it is never counted, however seldom the timer is checked."""
        self.qpn, self.dqpn, self.builder, self.mtu = qpn, dqpn, builder, mtu
        self.max_outstanding, self.ack_req_every, self.rto_s, self.rkey = (
            max_outstanding, ack_req_every, rto_s, rkey)
        self.retry_count = retry_count
        self._retries = 0  # timeouts since the last progress
        self.next_psn = start_psn
        self.pending: collections.deque[Message] = collections.deque()
        self._pending_offset = 0  # bytes of pending[0] already segmented
        self.unacked: collections.deque[Segment] = collections.deque()
        self.cursor = 0  # index in unacked of the next segment to (re)send
        self.stream_offset = 0
        self.completed: list[Message] = []
        self.stats = RequesterStats()
        self._last_progress = 0.0
        self._paused_seen = 0.0  # the NIC's time paused at the last progress or check_timeout
        self._paused = paused
        self._msg_ids = 0
        self._since_ackreq = 0

    def post(self, kind: str, size: int, now: float) -> Message:
        if kind not in _OPS:
            raise ValueError(f"message kind must be 'write' or 'send', not {kind!r}")
        if size <= 0:
            raise ValueError("message size must be positive")
        self._msg_ids += 1
        m = Message(self._msg_ids, kind, size, self.stream_offset, now)
        if self.failed:  # a QP in the error state flushes what is posted to it
            self.stats.messages_flushed += 1
            return m
        self.stream_offset += size
        self.pending.append(m)
        return m

    def has_work(self) -> bool:
        return self.cursor < len(self.unacked) or (
            bool(self.pending) and len(self.unacked) < self.max_outstanding)

    @property
    def idle(self) -> bool:
        return not self.pending and not self.unacked

    def _segment(self) -> Segment:
        m = self.pending[0]
        off = self._pending_offset
        length = m.size - off
        if length > self.mtu:
            length = self.mtu
        first, middle, last, only = _OPS[m.kind]
        is_last = off + length == m.size
        psn = self.next_psn
        if off == 0:
            opcode = only if is_last else first
            m.first_psn = psn
        else:
            opcode = last if is_last else middle
        self._since_ackreq += 1
        ack_req = is_last or self._since_ackreq >= self.ack_req_every
        if ack_req:
            self._since_ackreq = 0
        if is_last:
            m.last_psn = psn
            self.pending.popleft()
            self._pending_offset = 0
        else:
            self._pending_offset = off + length
        self.next_psn = (psn + 1) & PSN_MASK
        return Segment(psn, m, off, length, opcode, ack_req)

    def next_frame(self, now: float) -> tuple[bytes, Segment] | None:
        """The next frame to put on the wire (a Go-Back-N resend first), or None."""
        unacked = self.unacked
        cursor = self.cursor
        if cursor >= len(unacked):
            if not self.pending or len(unacked) >= self.max_outstanding:
                return None
            if not unacked:
                self._progress(now)
            unacked.append(self._segment())
        seg = unacked[cursor]
        self.cursor = cursor + 1
        stats = self.stats
        if seg.sent_times:
            stats.retransmitted += 1
        seg.sent_times += 1
        m = seg.msg
        ext = b""
        if seg.opcode in RETH_OPCODES:
            ext = self.builder.reth(0x10000000 + m.stream_offset, self.rkey, m.size)
        start, length = m.stream_offset + seg.offset, seg.length
        phase = start % _PERIOD
        if length <= _PATTERN_LEN - phase:  # pattern() and pattern_crc(), inline: hot path
            payload = _PATTERN[phase:phase + length]
        else:
            payload = pattern(start, length)
        crc = _PATTERN_CRC.get((phase, length))
        if crc is None:
            crc = pattern_crc(start, length)
        frame = self.builder.frame(seg.opcode, self.dqpn, seg.psn, payload, ack_req=seg.ack_req,
                                   ext=ext, payload_crc=crc)
        stats.packets_sent += 1
        stats.bytes_sent += len(frame)
        return frame, seg

    def _ack_through(self, psn: int, now: float) -> None:
        """Everything up to and including ``psn`` has arrived."""
        popped = 0
        while self.unacked and psn_diff(self.unacked[0].psn, psn) <= 0:
            seg = self.unacked.popleft()
            popped += 1
            self.stats.bytes_acked += seg.length
            if seg.opcode in LAST_OPCODES:
                seg.msg.completed_at = now
                self.completed.append(seg.msg)
                self.stats.messages_completed += 1
        if popped:
            self._progress(now)
        self.cursor = max(0, self.cursor - popped)

    def on_ack(self, p: ParsedRoce, now: float) -> None:
        if p.syndrome >> 5 == 0:  # ACK (credit count in low bits)
            self.stats.acks += 1
            self._ack_through(p.psn, now)
        elif p.syndrome == SYNDROME_NAK_PSN_SEQ:
            self.stats.naks += 1
            self._ack_through(psn_add(p.psn, -1 & 0xFFFFFF), now)
            self.cursor = 0  # Go-Back-N: resend from the NAKed PSN
        # other NAKs (remote access, invalid request) are not generated by our responder

    def _progress(self, now: float) -> None:
        """The timer starts over: an ACK moved, or the first packet went out."""
        self._last_progress = now
        self._retries = 0
        if self._paused is not None:
            self._paused_seen = self._paused(now)

    def timeout_at(self, now: float) -> float:
        """The soonest :meth:`check_timeout` can fire, so the endpoint need not look sooner.

        ``rto_s`` after the last progress while packets are unacknowledged (a pause of the
        class meanwhile only puts it off); ``rto_s`` after ``now`` while messages wait to be
        sent, since the first packet sent starts the timer; never for an idle QP.
        """
        if self.unacked:
            return self._last_progress + self.rto_s
        if self.pending:
            return now + self.rto_s
        return float("inf")

    def check_timeout(self, now: float, paused_s: float | None = None) -> bool:
        """Go back to the oldest unacknowledged packet once ``rto_s`` passed with no ACK moving
        (IB's Local ACK Timeout). ``paused_s``: how long PFC has held this QP's class at the
        NIC so far, in all (by default the ``paused`` clock's, else none); the time paused
        since the last progress or check does not count.

        Out of retries (``retry_count`` timeouts in a row with no progress), the QP fails
        instead (:meth:`_fail`).

        Why the timer stands still while paused: in a real fabric the timer (4.096 us x 2^14,
        67 ms, a usual ConnectX setting) is thousands of times a PFC pause, which lasts
        microseconds at 100 Gbit/s. Here the timer is scaled to the link (local_ack_timeout_s)
        but the default n is far smaller than a real NIC's, and a QP of an incast can stay
        paused for seconds at 10 Mbit/s; counted, that pause would fire it in lossless runs
        that lost nothing (seen with a fixed 0.5 s timer: one timeout and 14 packets resent in
        lab 4's 3:1 incast), a resend no real NIC would make. A pause of the packets further
        on (a switch's queue paused) still counts: the NIC cannot see it."""
        if paused_s is None:
            paused_s = self._paused(now) if self._paused is not None else 0.0
        held = paused_s - self._paused_seen
        self._paused_seen = paused_s
        if held > 0 and self.unacked:
            self._last_progress = min(now, self._last_progress + held)
        if self.unacked and now - self._last_progress > self.rto_s:
            self.stats.timeouts += 1
            self._retries += 1
            if self._retries > self.retry_count:
                self._fail()
                return False
            self.cursor = 0
            self._last_progress = now
            return True
        return False

    @property
    def failed(self) -> bool:
        """The QP is in the error state (it ran out of retries)."""
        return self.stats.retry_exceeded > 0

    def _fail(self) -> None:
        """Out of retries: the QP goes to the error state and its work requests are flushed
        (IBA spec, vol. 1, 10.7.3.1: a requester that exhausts its retry count completes the
        WR in error and moves to the Error state). Nothing more is sent."""
        self.stats.retry_exceeded = 1
        self.stats.messages_flushed += len({m.msg_id for m in self.pending}
                                           | {s.msg.msg_id for s in self.unacked})
        self.pending.clear()
        self._pending_offset = 0
        self.unacked.clear()
        self.cursor = 0


@dataclass
class ResponderStats:
    packets: int = 0
    bytes: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    naks_sent: int = 0
    acks_sent: int = 0
    corrupt: int = 0
    messages: int = 0
    ce_marked: int = 0


@dataclass
class Responder:
    """The receiving side of an RC QP: expected PSN, ACK coalescing, NAK, duplicate re-ACK."""

    qpn: int
    dqpn: int  # the requester's QP, for ACKs and CNPs
    start_psn: int = 0
    ack_every: int = 8
    stats: ResponderStats = field(default_factory=ResponderStats)

    def __post_init__(self) -> None:
        self.epsn = self.start_psn
        self.msn = 0
        self.stream_offset = 0
        self._nak_sent = False
        self._since_ack = 0
        self._in_message = False
        self._intact: ParsedRoce | None = None  # the packet payload_crc() found intact


    def payload_crc(self, p: ParsedRoce) -> int | None:
        """``zlib.crc32(p.payload)`` if ``p`` is the packet expected next and carries the bytes
        expected, else None: lets the ICRC check skip its pass over the payload (see
        :func:`traffic.packets.parse_roce`). Comparing bytes costs a fraction of a CRC."""
        if p.psn != self.epsn:
            return None
        n = len(p.payload)
        if p.payload != pattern(self.stream_offset, n):
            return None
        self._intact = p  # on_data need not compare it again
        return pattern_crc(self.stream_offset, n)

    def on_data(self, p: ParsedRoce) -> tuple[int, int, int] | None:
        """Take a data packet; return (syndrome, psn, msn) of the ACK/NAK to send, or None."""
        stats = self.stats
        epsn = self.epsn
        if p.psn != epsn:
            if psn_diff(p.psn, epsn) < 0:
                stats.duplicates += 1
                stats.acks_sent += 1  # a duplicate is ACKed again: one more ACK on the wire
                return SYNDROME_ACK, (epsn - 1) & PSN_MASK, self.msn
            stats.out_of_order += 1
            if self._nak_sent:
                return None
            self._nak_sent = True
            stats.naks_sent += 1
            return SYNDROME_NAK_PSN_SEQ, epsn, self.msn
        # in order
        opcode, n = p.opcode, len(p.payload)
        intact = p is self._intact or p.payload == pattern(self.stream_offset, n)
        self._intact = None
        starts = opcode in _STARTS
        is_last = opcode in LAST_OPCODES
        if not intact or starts == self._in_message:
            stats.corrupt += 1
        self._in_message = not is_last
        self._nak_sent = False
        stats.packets += 1
        stats.bytes += n
        self.stream_offset += n
        self.epsn = epsn = (epsn + 1) & PSN_MASK
        if is_last:
            self.msn = (self.msn + 1) & 0xFFFFFF
            stats.messages += 1
        self._since_ack += 1
        if p.ack_req or self._since_ack >= self.ack_every:
            self._since_ack = 0
            stats.acks_sent += 1
            return SYNDROME_ACK, (epsn - 1) & PSN_MASK, self.msn
        return None

