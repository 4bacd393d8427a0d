"""RC queue pairs over a simulated path: loss, Go-Back-N, duplicates, ACK coalescing."""

from __future__ import annotations

import random

import pytest

from traffic.packets import (
    ACK,
    SYNDROME_ACK,
    SYNDROME_NAK_PSN_SEQ,
    WRITE_FIRST,
    WRITE_LAST,
    WRITE_MIDDLE,
    WRITE_ONLY,
    RoceFrameBuilder,
    parse_roce,
)
from traffic.qp import Requester, Responder, local_ack_timeout_s

B = RoceFrameBuilder("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1", 50000)
ACKB = RoceFrameBuilder("02:00:00:00:00:02", "02:00:00:00:00:01", "10.0.2.1", "10.0.1.1", 50000)


def run(req: Requester, resp: Responder, drop, max_steps: int = 200_000):
    """Alternate: the requester sends a frame, the path may drop it, the responder answers."""
    now = 0.0
    for _ in range(max_steps):
        if req.idle:
            return now
        now += 0.001
        out = req.next_frame(now)
        if out is None:
            req.check_timeout(now)
            continue
        frame, _seg = out
        if drop():
            continue
        reply = resp.on_data(parse_roce(frame))
        if reply is not None:
            syn, psn, msn = reply
            ack = ACKB.frame(0x11, req.qpn, psn, ext=ACKB.aeth(syn, msn))
            req.on_ack(parse_roce(ack), now)
    raise AssertionError("did not finish")


def test_segmentation_opcodes_and_ack_req() -> None:
    req = Requester(1, 2, B, mtu=1000)
    req.post("write", 3500, 0.0)
    req.post("write", 10, 0.0)
    frames = [parse_roce(req.next_frame(0.0)[0]) for _ in range(5)]
    assert [f.opcode for f in frames] == [WRITE_FIRST, WRITE_MIDDLE, WRITE_MIDDLE, WRITE_LAST,
                                          WRITE_ONLY]
    assert [len(f.payload) for f in frames] == [1000, 1000, 1000, 500, 10]
    assert [f.psn for f in frames] == [0, 1, 2, 3, 4]
    assert [f.ack_req for f in frames] == [False, False, False, True, True]
    assert all(f.icrc_ok for f in frames)


def test_lossless_transfer_is_complete_and_in_order() -> None:
    req, resp = Requester(1, 2, B, mtu=1024), Responder(2, 1)
    for _ in range(20):
        req.post("write", 5000, 0.0)
    run(req, resp, lambda: False)
    assert resp.stats.bytes == 100_000 and resp.stats.corrupt == 0
    assert resp.stats.messages == 20 and req.stats.messages_completed == 20
    assert req.stats.retransmitted == 0 and resp.stats.naks_sent == 0
    # coalesced: fewer ACKs than packets
    assert resp.stats.acks_sent < resp.stats.packets


def test_one_percent_loss_go_back_n_still_complete() -> None:
    rng = random.Random(7)
    req, resp = Requester(1, 2, B, mtu=1024), Responder(2, 1)
    for _ in range(50):
        req.post("send", 20_000, 0.0)
    run(req, resp, lambda: rng.random() < 0.01)
    assert resp.stats.bytes == 1_000_000 and resp.stats.corrupt == 0
    assert req.stats.naks > 0 and req.stats.retransmitted > 0
    assert req.stats.naks == resp.stats.naks_sent
    # Go-Back-N resends what followed the lost packet: more than the losses alone
    assert req.stats.packets_sent > resp.stats.packets


def test_nak_once_per_gap_and_duplicates_reacked() -> None:
    req, resp = Requester(1, 2, B, mtu=100), Responder(2, 1)
    req.post("write", 500, 0.0)
    frames = [req.next_frame(0.0)[0] for _ in range(5)]
    assert resp.on_data(parse_roce(frames[0])) is None  # in order, no AckReq yet
    nak = resp.on_data(parse_roce(frames[2]))  # PSN 1 lost
    assert nak == (SYNDROME_NAK_PSN_SEQ, 1, 0)
    assert resp.on_data(parse_roce(frames[3])) is None  # silent drop after the NAK
    resp.on_data(parse_roce(frames[1]))
    dup = resp.on_data(parse_roce(frames[0]))
    assert dup == (SYNDROME_ACK, 1, 0) and resp.stats.duplicates == 1


def test_timeout_resends_when_everything_is_lost() -> None:
    req = Requester(1, 2, B, mtu=100, rto_s=0.5)
    req.post("write", 100, 0.0)
    req.next_frame(0.0)
    assert not req.check_timeout(0.4)
    assert req.check_timeout(0.6)
    frame, seg = req.next_frame(0.6)
    assert seg.psn == 0 and req.stats.retransmitted == 1
    assert parse_roce(frame).opcode == WRITE_ONLY


def test_receive_fast_path_still_checks_payload_and_icrc() -> None:
    req, resp = Requester(1, 2, B, mtu=1024), Responder(2, 1)
    req.post("write", 5000, 0.0)
    frames = [req.next_frame(0.0)[0] for _ in range(3)]
    p = parse_roce(frames[0], resp.payload_crc)
    assert p.icrc_ok and resp.on_data(p) is None and resp.stats.corrupt == 0
    bad = bytearray(frames[1])
    bad[-1] ^= 1
    assert not parse_roce(bytes(bad), resp.payload_crc).icrc_ok
    # a well-formed frame, right PSN, wrong payload bytes: its ICRC is good, the data is not
    wrong = B.frame(WRITE_MIDDLE, 2, 1, b"\x00" * 1024)
    p = parse_roce(wrong, resp.payload_crc)
    assert p.icrc_ok
    resp.on_data(p)
    assert resp.stats.corrupt == 1


def test_acks_say_unlimited_credits_as_rxe_and_any_credit_count_is_an_ack() -> None:
    """The responder's ACKs, coalesced or for a duplicate, carry syndrome 0x1F (ACK, credit
    count 0b11111), as rxe's do (AETH_ACK_UNLIMITED); its NAK stays 0x60. The requester reads
    the top three bits, so an ACK with any credit count, 0 as a NIC with credits sends, counts."""
    req, resp = Requester(1, 2, B, mtu=100), Responder(2, 1, ack_every=2)
    req.post("write", 400, 0.0)
    frames = [req.next_frame(0.0)[0] for _ in range(4)]
    replies = [resp.on_data(parse_roce(f)) for f in frames[:2]]
    assert replies == [None, (0x1F, 1, 0)]
    assert resp.on_data(parse_roce(frames[0])) == (0x1F, 1, 0)  # duplicate: ACKed again
    assert resp.on_data(parse_roce(frames[3]))[0] == SYNDROME_NAK_PSN_SEQ == 0x60
    for credits, psn in ((0x1F, 0), (0x00, 1)):
        req.on_ack(parse_roce(ACKB.frame(ACK, 1, psn, ext=ACKB.aeth(credits, 0))), 0.0)
    assert req.stats.acks == 2 and len(req.unacked) == 2 and req.stats.naks == 0



def test_time_paused_at_the_nic_does_not_count_toward_the_timeout() -> None:
    """A QP held by PFC at its own NIC has lost nothing: the timer counts only the time it was
    free to send and heard no ACK."""
    req = Requester(1, 2, B, mtu=100, rto_s=0.5)
    req.post("write", 100, 0.0)
    req.next_frame(0.0)
    assert not req.check_timeout(0.3, paused_s=0.0)
    assert not req.check_timeout(0.6, paused_s=0.25)  # 0.35 s not paused
    assert not req.check_timeout(0.7, paused_s=0.25)  # 0.45 s
    assert req.check_timeout(0.8, paused_s=0.25)  # 0.55 s with no ACK: Go-Back-N
    assert req.stats.timeouts == 1


def test_a_pause_before_anything_was_sent_does_not_put_the_timer_off() -> None:
    req = Requester(1, 2, B, mtu=100, rto_s=0.5)
    assert not req.check_timeout(1.0, paused_s=0.9)  # idle: nothing to time out
    req.post("write", 100, 1.0)
    req.next_frame(1.0)
    assert req.check_timeout(1.6, paused_s=0.9)


def test_checked_only_when_timeout_at_says_the_timer_fires_as_checked_every_ms() -> None:
    """The endpoint checks a QP's timer only once its timeout_at has come, no longer every
    10 ms: with loss, lost ACKs and pauses, the timeouts must fire at the same moments as a
    twin's checked every millisecond."""
    rng = random.Random(5)
    clock = [0.0]  # the class's time paused so far
    every, lazy = (Requester(1, 2, B, mtu=100, rto_s=0.05, paused=lambda _now: clock[0])
                   for _ in range(2))
    replies = {id(every): Responder(2, 1), id(lazy): Responder(2, 1)}
    for r in (every, lazy):
        r.post("write", 100 * 600, 0.0)
    fired: dict[int, list[int]] = {id(every): [], id(lazy): []}
    due, looks = 0.0, 0
    for i in range(1, 20_000):
        now = i * 0.001
        held = rng.random() < 0.2
        if held:
            clock[0] += 0.001
        lose_data, lose_ack = rng.random() < 0.03, rng.random() < 0.5
        for r in (every, lazy):
            if r is every or now >= due:
                if r.check_timeout(now):
                    fired[id(r)].append(i)
                if r is lazy:
                    due, looks = r.timeout_at(now), looks + 1
            out = None if held else r.next_frame(now)
            if out is None or lose_data:
                continue
            reply = replies[id(r)].on_data(parse_roce(out[0]))
            if reply is not None and not lose_ack:
                syn, psn, msn = reply
                r.on_ack(parse_roce(ACKB.frame(0x11, 1, psn, ext=ACKB.aeth(syn, msn))), now)
        if every.idle and lazy.idle:
            break
    assert every.idle and lazy.idle
    assert len(fired[id(every)]) >= 5
    assert fired[id(lazy)] == fired[id(every)]
    assert looks < i / 5
    assert lazy.timeout_at(now) == float("inf")  # idle: no timer


def test_out_of_retries_the_qp_fails_and_flushes_what_was_posted() -> None:
    """IB's retry count: retry_count timeouts in a row with no ACK are resent; the next one
    puts the QP in the error state, its messages flushed unsent, and what is posted after is
    flushed too. An ACK that moves restarts the count."""
    req = Requester(1, 2, B, mtu=100, rto_s=0.5, retry_count=2)
    req.post("write", 300, 0.0)
    req.post("write", 100, 0.0)
    while req.next_frame(0.0) is not None:
        pass
    assert req.check_timeout(0.6, paused_s=0.0)  # retry 1
    assert req.check_timeout(1.2, paused_s=0.0)  # retry 2
    assert not req.failed
    assert not req.check_timeout(1.8, paused_s=0.0)  # a third: out of retries
    assert req.failed and req.idle and req.stats.retry_exceeded == 1
    assert req.stats.timeouts == 3 and req.stats.messages_flushed == 2
    req.post("write", 100, 2.0)
    assert req.idle and req.next_frame(2.0) is None and req.stats.messages_flushed == 3


def test_progress_restarts_the_retry_count() -> None:
    req = Requester(1, 2, B, mtu=100, rto_s=0.5, retry_count=1)
    resp = Responder(2, 1)
    req.post("write", 100, 0.0)
    req.post("write", 100, 0.0)
    first, _seg = req.next_frame(0.0)
    req.next_frame(0.0)
    assert req.check_timeout(0.6, paused_s=0.0)  # retry 1 of 1
    syn, psn, msn = resp.on_data(parse_roce(first))
    req.on_ack(parse_roce(ACKB.frame(0x11, req.qpn, psn, ext=ACKB.aeth(syn, msn))), 0.7)
    assert req.check_timeout(1.3, paused_s=0.0)  # the count started over at the ACK
    assert not req.failed


def test_the_local_ack_timeout_is_ibs_scaled_to_the_link() -> None:
    assert local_ack_timeout_s(14, 40e9) == 4.096e-6 * 2 ** 14  # 67 ms, unscaled at 40 Gbit/s
    assert local_ack_timeout_s(8, 10e6) == pytest.approx(4.194304)  # x 4000 at 10 Mbit/s
    with pytest.raises(ValueError, match="1..31"):
        local_ack_timeout_s(0, 10e6)
