"""IB's credit flow control (traffic.credits): the flow control packet agrees bit for bit with
a Scapy layer built from the field list, a link never sends more than the receiver advertised
room for, across the counters' wrap, and a packet lost on the link costs no credit for good."""

from __future__ import annotations

import random

import pytest

from traffic.credits import (
    BLOCK_BYTES,
    CREDIT_MODULUS,
    MAX_CREDIT_BLOCKS,
    CreditReceiver,
    CreditTransmitter,
    FcOp,
    FlowControlPacket,
    XmitWait,
    blocks,
    credit_frame,
    parse_credit_frame,
)
from traffic.layers import IBFlowControl
from traffic.wire import ETH_P_CREDIT

MAC = "02:00:00:00:01:02"


def test_a_frame_costs_its_length_in_64_byte_blocks() -> None:
    assert [blocks(n) for n in (1, 63, 64, 65, 128, 4096 + 58)] == [1, 1, 1, 2, 2, 65]
    with pytest.raises(ValueError, match="positive length"):
        blocks(0)


@pytest.mark.parametrize(("op", "vl", "fctbs", "fccl"), [
    (FcOp.NORMAL, 3, 0xABC, 0x123), (FcOp.INIT, 15, 0xFFF, 0), (FcOp.NORMAL, 0, 0, 0xFFF)])
def test_the_packet_is_laid_out_as_the_spec_draws_it(op: FcOp, vl: int, fctbs: int,
                                                       fccl: int) -> None:
    ours = FlowControlPacket(vl=vl, fctbs=fctbs, fccl=fccl, op=op).pack()
    assert ours == bytes(IBFlowControl(op=int(op), fctbs=fctbs, vl=vl, fccl=fccl))
    back = IBFlowControl(ours)
    assert (back.op, back.vl, back.fctbs, back.fccl) == (op, vl, fctbs, fccl)
    assert FlowControlPacket.unpack(ours) == FlowControlPacket(vl=vl, fctbs=fctbs, fccl=fccl,
                                                               op=op)


def test_fields_out_of_range_and_reserved_ops_are_refused() -> None:
    with pytest.raises(ValueError, match="fctbs 4096 is outside 0..4095"):
        FlowControlPacket(vl=0, fctbs=4096, fccl=0)
    with pytest.raises(ValueError, match="vl 16"):
        FlowControlPacket(vl=16, fctbs=0, fccl=0)
    with pytest.raises(ValueError, match="reserved Op 2"):
        FlowControlPacket.unpack(bytes(IBFlowControl(op=2, fctbs=1, vl=1, fccl=1)))
    with pytest.raises(ValueError, match="truncated"):
        FlowControlPacket.unpack(b"\x00\x01\x02")


def test_a_credit_frame_carries_one_packet_a_lane_in_order() -> None:
    packets = [FlowControlPacket(vl=4, fctbs=7, fccl=90), FlowControlPacket(vl=0, fctbs=0, fccl=0),
               FlowControlPacket(vl=3, fctbs=4095, fccl=2047)]
    frame = credit_frame(MAC, packets)
    assert len(frame) == 60 and int.from_bytes(frame[12:14], "big") == ETH_P_CREDIT
    assert frame[6:12] == bytes.fromhex(MAC.replace(":", ""))
    # VL0's all-zero packet comes first, so it is read; the padding after the last is not
    assert parse_credit_frame(frame) == sorted(packets, key=lambda p: p.vl)
    with pytest.raises(ValueError, match="one flow control packet a lane"):
        credit_frame(MAC, packets + [FlowControlPacket(vl=3, fctbs=1, fccl=1)])
    with pytest.raises(ValueError, match="at least one"):
        credit_frame(MAC, [])
    assert parse_credit_frame(b"\xff" * 12 + b"\x08\x00" + bytes(46)) is None


def test_no_credit_before_the_first_limit_and_exactly_the_advertised_room_after() -> None:
    tx, rx = CreditTransmitter(), CreditReceiver()
    assert not tx.may_send(64) and tx.credit_blocks() == 0
    tx.heard(rx.limit(free_bytes=10 * BLOCK_BYTES + 63))  # 10 whole blocks of room
    assert tx.credit_blocks() == 10
    for _ in range(5):  # five 2-block frames fill it
        assert tx.may_send(100)
        tx.sent(100)
        rx.received(100)
    assert not tx.may_send(1) and tx.credit_blocks() == 0
    tx.heard(rx.limit(free_bytes=3 * BLOCK_BYTES))  # the receiver drained 3 blocks' worth
    assert tx.may_send(3 * BLOCK_BYTES) and not tx.may_send(3 * BLOCK_BYTES + 1)


def test_a_receiver_advertises_at_most_2048_blocks_ahead() -> None:
    rx = CreditReceiver(abr=4000)
    assert rx.limit(free_bytes=10**9) == (4000 + MAX_CREDIT_BLOCKS) % CREDIT_MODULUS
    tx = CreditTransmitter(fctbs=4000)
    tx.heard(rx.limit(free_bytes=10**9))
    assert tx.credit_blocks() == MAX_CREDIT_BLOCKS


def test_a_limit_behind_the_count_gives_no_credit() -> None:
    """A limit heard before the transmitter's last frames reads, after the wrap, as more than
    2,048 ahead: it is behind, and no credit."""
    tx = CreditTransmitter(fctbs=10)
    tx.heard(5)
    assert tx.credit_blocks() == 0 and not tx.may_send(64)


def test_a_frame_lost_on_the_link_is_written_off_by_the_next_flow_control_packet() -> None:
    tx, rx = CreditTransmitter(), CreditReceiver()
    tx.heard(rx.limit(free_bytes=20 * BLOCK_BYTES))
    tx.sent(10 * BLOCK_BYTES)  # lost: the receiver never counts it
    # without the resync the receiver's limit stays 10 blocks short for good
    tx.heard(rx.limit(free_bytes=20 * BLOCK_BYTES))
    assert tx.credit_blocks() == 10
    rx.heard(tx.fctbs)  # the transmitter's flow control packet
    tx.heard(rx.limit(free_bytes=20 * BLOCK_BYTES))
    assert tx.credit_blocks() == 20


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_link_never_overruns_its_receiver_across_the_wrap(seed: int) -> None:
    """A transmitter with frames of any size, a receiver whose buffer drains at random, flow
    control packets at random times (the limit the transmitter holds is often stale): the
    buffer never holds more than its size, and the counters wrap many times."""
    rng = random.Random(seed)
    buffer_bytes = 32 * 1024
    tx, rx = CreditTransmitter(), CreditReceiver()
    held: list[int] = []
    in_flight: list[int] = []  # sent, not yet at the receiver
    sent_blocks = 0
    next_frame = rng.randint(60, 4200)
    for _ in range(60_000):
        event = rng.random()
        if event < 0.5:
            if tx.may_send(next_frame):
                tx.sent(next_frame)
                in_flight.append(next_frame)
                sent_blocks += blocks(next_frame)
                next_frame = rng.randint(60, 4200)
        elif event < 0.75 and in_flight:
            size = in_flight.pop(0)
            rx.received(size)
            held.append(size)
            assert sum(held) <= buffer_bytes
        elif event < 0.9 and held:
            held.pop(0)
        else:  # the receiver knows its own buffer alone, not what is on the way
            if not in_flight:  # the transmitter's packet, behind the data it counts
                rx.heard(tx.fctbs)
            tx.heard(rx.limit(buffer_bytes - sum(held)))
    assert sent_blocks > 4 * CREDIT_MODULUS


def test_xmit_wait_counts_the_time_a_frame_waited_for_credit() -> None:
    wait = XmitWait()
    wait.note(1.0, False)
    wait.note(2.0, True)
    wait.note(2.5, True)
    assert wait.total(3.0) == pytest.approx(1.0)
    wait.note(3.5, False)
    wait.note(4.0, True)
    wait.note(4.25, False)
    assert (wait.seconds, wait.stalls) == (pytest.approx(1.75), 2)
