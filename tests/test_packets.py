"""The fast frame builder agrees byte for byte with Scapy's RoCE layers; parsing round-trips."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
from scapy.compat import raw
from scapy.layers.l2 import Ether

from traffic.layers import AETH, BTH, RETH, CNPPadding, scapy_roce
from traffic.packets import (
    ACK,
    CNP,
    SEND_MIDDLE,
    SYNDROME_ACK,
    SYNDROME_NAK_PSN_SEQ,
    WRITE_FIRST,
    WRITE_ONLY,
    Malformed,
    RoceFrameBuilder,
    crc32_combine,
    icrc,
    parse_pfc,
    parse_roce,
    pfc_frame,
    psn_add,
    psn_diff,
)

A = ("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1", 50000)


@pytest.mark.parametrize("payload_len", [0, 1, 3, 4, 100, 4096])
def test_data_frames_match_scapy(payload_len: int) -> None:
    b = RoceFrameBuilder(*A)
    payload = bytes(range(256)) * (payload_len // 256 + 1)
    payload = payload[:payload_len]
    for opcode, ext, sext in ((SEND_MIDDLE, b"", None),
                              (WRITE_FIRST, b.reth(0xABC, 7, 9000), RETH(va=0xABC, rkey=7,
                                                                         dlen=9000))):
        fast = b.frame(opcode, 0xABCDE, 0xFFFFFE, payload, ack_req=True, ext=ext)
        ref = raw(scapy_roce(*A, opcode, 0xABCDE, 0xFFFFFE, payload, True, ext=sext))
        assert fast == ref


def test_ack_and_cnp_match_scapy() -> None:
    b = RoceFrameBuilder(*A)
    ack = b.frame(ACK, 0x11, 5, ext=b.aeth(0x60, 3))
    assert ack == raw(scapy_roce(*A, ACK, 0x11, 5, ext=AETH(syndrome=0x60, msn=3)))
    cnp_fast = RoceFrameBuilder(*A, dscp=48).frame(CNP, 0x11, 0, b"\x00" * 16, becn=True)
    p = Ether(cnp_fast)
    assert p[BTH].opcode == CNP and p[BTH].becn == 1 and p.haslayer(CNPPadding)
    q = p.copy()
    q[BTH].icrc = None
    assert raw(q) == cnp_fast


def test_parse_roundtrip_and_icrc_check() -> None:
    b = RoceFrameBuilder(*A)
    f = b.frame(WRITE_ONLY, 0x42, 9, b"abcde", ack_req=True, ext=b.reth(1, 2, 5))
    p = parse_roce(f)
    assert (p.opcode, p.dqpn, p.psn, p.ack_req, p.payload, p.icrc_ok) == (
        WRITE_ONLY, 0x42, 9, True, b"abcde", True)
    # ECN marking on the path keeps the ICRC valid (TOS is masked)
    marked = bytearray(f)
    marked[15] |= 3
    assert parse_roce(bytes(marked)).icrc_ok
    bad = bytearray(f)
    bad[-6] ^= 1
    assert not parse_roce(bytes(bad)).icrc_ok
    with pytest.raises(Malformed):
        parse_roce(f[:14 + 20 + 8 + 4])


def test_pfc_frame() -> None:
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl

    f = pfc_frame("02:00:00:00:00:09", {3: 1000, 6: 0})
    assert len(f) == 60
    p = Ether(f)
    c = p[MACControlClassBasedFlowControl]
    assert c.c3_enabled == 1 and c.c3_pause_time == 1000 and c.c6_enabled == 1
    assert c.c0_enabled == 0 and p.dst == "01:80:c2:00:00:01"
    assert parse_pfc(f) == {3: 1000, 6: 0}


def test_psn_serial_arithmetic() -> None:
    assert psn_add(0xFFFFFF, 2) == 1
    assert psn_diff(1, 0xFFFFFF) == 2 and psn_diff(0xFFFFFF, 1) == -2


@pytest.mark.parametrize(("a_len", "b_len"), [(0, 0), (5, 0), (0, 7), (13, 4096), (40, 1)])
def test_crc32_combine_is_the_crc_of_the_concatenation(a_len: int, b_len: int) -> None:
    a, b = bytes(range(7, 7 + a_len % 249)) * (a_len // 249 + 1), bytes(range(b_len % 256)) * 17
    a, b = a[:a_len], b[:b_len]
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize("payload_len", [0, 1, 3, 4, 4095, 4096])
def test_a_known_payload_crc_gives_the_same_frame_and_the_same_icrc_check(payload_len: int
                                                                          ) -> None:
    b = RoceFrameBuilder(*A)
    payload = (bytes(range(251)) * 17)[:payload_len]
    ext = b.reth(0x1000, 7, payload_len)
    f = b.frame(WRITE_FIRST, 0x42, 9, payload, ext=ext, payload_crc=zlib.crc32(payload))
    assert f == b.frame(WRITE_FIRST, 0x42, 9, payload, ext=ext)
    asked = []

    def known(p):
        asked.append(p.psn)
        return zlib.crc32(p.payload)

    p = parse_roce(f, known)
    assert asked == [9] and p.icrc_ok and p.payload == payload
    marked = bytearray(f)
    marked[15] |= 3  # CE on the path: masked out of the ICRC
    assert parse_roce(bytes(marked), known).icrc_ok
    for i in (14 + 20 + 8 + 3, len(f) - 1):  # the PSN; the ICRC itself
        bad = bytearray(f)
        bad[i] ^= 0x10
        assert not parse_roce(bytes(bad), known).icrc_ok
    assert not parse_roce(bytes(bad), lambda p: None).icrc_ok  # None: the full check


def test_icrc_check_agrees_with_the_reference_on_damaged_frames() -> None:
    """parse_roce checks the ICRC from cached pieces; icrc() is the reference it must agree with,
    whatever byte of header, BTH, RETH, payload or ICRC is damaged."""
    rng = random.Random(5)
    b = RoceFrameBuilder(*A)
    frames = [b.frame(WRITE_FIRST, 0x42, 9, bytes(range(200)), ext=b.reth(1, 2, 200)),
              b.frame(SEND_MIDDLE, 0x42, 10, b"abcde"), b.frame(ACK, 0x42, 11, ext=b.aeth(0, 1)),
              b.frame(CNP, 0x42, 0, b"\x00" * 16, becn=True)]
    checked = 0
    for _ in range(3000):
        f = bytearray(rng.choice(frames))
        i = rng.randrange(15, len(f))
        f[i] ^= 1 << rng.randrange(8)
        if i in (16, 17, 23, 36, 37) or f[14] != 0x45:  # length, protocol, port, IHL: no RoCE
            continue
        try:
            p = parse_roce(bytes(f))
        except Malformed:
            continue
        if p is None:
            continue
        end = 14 + struct.unpack("!H", f[16:18])[0]
        assert p.icrc_ok == (icrc(bytes(f[14:end - 4])) == f[end - 4:end]), i
        checked += 1
    assert checked > 2000


def test_acks_carry_unlimited_credits_and_naks_their_code() -> None:
    """An ACK's AETH syndrome is 0b000 + credit count 0b11111, as Linux rxe sends
    (AETH_ACK_UNLIMITED); a NAK's is 0x60, PSN sequence error. Scapy's AETH reads them so."""
    b = RoceFrameBuilder(*A)
    assert SYNDROME_ACK == 0x1F and SYNDROME_NAK_PSN_SEQ == 0x60
    ack = Ether(b.frame(ACK, 0x42, 5, ext=b.aeth(SYNDROME_ACK, 3)))
    assert ack[AETH].syndrome == 0x1F and ack[AETH].syndrome >> 5 == 0 and ack[AETH].msn == 3
    nak = Ether(b.frame(ACK, 0x42, 5, ext=b.aeth(SYNDROME_NAK_PSN_SEQ, 3)))
    assert nak[AETH].syndrome == 0x60
