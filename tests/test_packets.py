"""The fast frame builder agrees byte for byte with Scapy's RoCE layers; parsing round-trips."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from scapy.compat import raw
from scapy.layers.l2 import Ether

from traffic.layers import AETH, BTH, RETH, CNPPadding, scapy_roce
from traffic.packets import (
    ACK,
    CNP,
    REJECT_REASONS,
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
    Malformed,
    Rejected,
    RoceFrameBuilder,
    crc32_combine,
    icrc,
    ipv4_checksum,
    parse_pfc,
    parse_roce,
    pfc_frame,
    psn_add,
    psn_diff,
)

A = ("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1", 50000)


def fix_ip_checksum(f: bytearray) -> bytes:
    """The frame with its IPv4 header checksum recomputed, as a router does after it rewrites
    TTL or TOS (RFC 1624): a changed header that is still a valid one."""
    ihl = (f[14] & 0x0F) * 4
    f[24:26] = b"\x00\x00"
    f[24:26] = struct.pack("!H", ipv4_checksum(bytes(f[14:14 + ihl])))
    return bytes(f)


def ce_mark(frame: bytes) -> bytes:
    """What a switch's ECN marking does to a frame: TOS ECN bits to CE, checksum updated."""
    f = bytearray(frame)
    f[15] |= 3
    return fix_ip_checksum(f)


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
    marked = ce_mark(f)
    assert parse_roce(marked).icrc_ok and parse_roce(marked).ecn == 3
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
    pause = f[:14] + b"\x00\x01" + f[16:]  # 802.3x PAUSE (opcode 0x0001): not PFC
    assert parse_pfc(pause) is None and parse_pfc(f[:33]) is None
    assert parse_pfc(RoceFrameBuilder(*A).frame(ACK, 1, 1, ext=b"\x00" * 4)) is None


def test_one_pfc_parser_for_the_endpoint_and_the_switch_agent() -> None:
    import testbed.agent.switch
    import traffic.endpoint

    assert testbed.agent.switch.parse_pfc is traffic.endpoint.parse_pfc is parse_pfc


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
    assert parse_roce(ce_mark(f), known).icrc_ok  # CE on the path: masked out of the ICRC
    for i in (14 + 20 + 8 + 3, len(f) - 1):  # the PSN; the ICRC itself
        bad = bytearray(f)
        bad[i] ^= 0x10
        assert not parse_roce(bytes(bad), known).icrc_ok
    assert not parse_roce(bytes(bad), lambda p: None).icrc_ok  # None: the full check


def test_icrc_check_agrees_with_the_reference_on_damaged_frames() -> None:
    """parse_roce checks the ICRC from cached pieces; icrc() is the reference it must agree with,
    whatever byte of header, BTH, RETH, payload or ICRC is damaged. Damage to the IPv4 header
    gets its checksum fixed, as a router would after rewriting it: else the header checksum
    rejects the frame before its ICRC is looked at."""
    rng = random.Random(5)
    b = RoceFrameBuilder(*A)
    frames = [b.frame(WRITE_FIRST, 0x42, 9, bytes(range(200)), ext=b.reth(1, 2, 200)),
              b.frame(SEND_MIDDLE, 0x42, 10, b"abcde"), b.frame(ACK, 0x42, 11, ext=b.aeth(0, 1)),
              b.frame(CNP, 0x42, 0, b"\x00" * 16, becn=True)]
    checked = rejected = 0
    for _ in range(3000):
        f = bytearray(rng.choice(frames))
        i = rng.randrange(15, len(f))
        f[i] ^= 1 << rng.randrange(8)
        if i in (16, 17, 23, 36, 37) or f[14] != 0x45:  # length, protocol, port, IHL: no RoCE
            continue
        if 14 <= i < 34 and i not in (24, 25):
            fix_ip_checksum(f)
        try:
            p = parse_roce(bytes(f))
        except Rejected:  # MF/offset, checksum, UDP length, TVer: refused before the ICRC
            rejected += 1
            continue
        if p is None:
            continue
        end = 14 + struct.unpack("!H", f[16:18])[0]
        assert p.icrc_ok == (icrc(bytes(f[14:end - 4])) == f[end - 4:end]), i
        checked += 1
    assert checked > 2000 and rejected > 50


def _reject_reason(frame: bytes) -> str | None:
    """The reason parse_roce refuses ``frame`` with, or None if it parses."""
    try:
        parse_roce(frame)
    except Rejected as exc:
        return exc.reason
    return None


def _set(f: bytearray, at: int, fmt: str, value: int) -> bytearray:
    struct.pack_into(fmt, f, at, value)
    return f


def _with_ip_option(frame: bytes) -> bytes:
    """The frame with a 4-byte IPv4 option (four NOPs, RFC 791) and every length and checksum
    made consistent with it: wrong only in carrying options."""
    f = bytearray(frame[:34] + b"\x01\x01\x01\x01" + frame[34:])
    f[14] = 0x46
    struct.pack_into("!H", f, 16, struct.unpack_from("!H", f, 16)[0] + 4)
    return fix_ip_checksum(f)


#: One field of a good frame broken, and the reason a NIC's receive path refuses it for. The
#: IPv4 header's checksum is fixed after each change (but the checksum's own cases), so the
#: frame is wrong in that one field only.
CORRUPTIONS = [
    ("ip_version", "version 6", lambda f: fix_ip_checksum(_set(f, 14, "!B", 0x65))),
    ("ip_ihl", "IHL 4", lambda f: fix_ip_checksum(_set(f, 14, "!B", 0x44))),
    ("ip_ihl", "options", lambda f: _with_ip_option(bytes(f))),
    ("ip_checksum", "checksum bit flipped", lambda f: bytes(_set(f, 25, "!B", f[25] ^ 0x80))),
    ("ip_checksum", "TTL rewritten, checksum not", lambda f: bytes(_set(f, 22, "!B", 63))),
    ("ip_fragment", "MF set", lambda f: fix_ip_checksum(_set(f, 20, "!H", 0x2000))),
    ("ip_fragment", "offset 185", lambda f: fix_ip_checksum(_set(f, 20, "!H", 185))),
    ("udp_port", "port 4792", lambda f: bytes(_set(f, 36, "!H", 4792))),
    ("udp_length", "UDP length + 4", lambda f: bytes(_set(f, 38, "!H", f[38] << 8 | f[39] + 4))),
    ("udp_length", "UDP length - 4", lambda f: bytes(_set(f, 38, "!H", (f[38] << 8 | f[39]) - 4))),
    ("bth_tver", "TVer 1", lambda f: bytes(_set(f, 43, "!B", f[43] | 1))),
]


def _good_frames() -> dict[str, bytes]:
    b = RoceFrameBuilder(*A)
    return {"write": b.frame(WRITE_FIRST, 0x42, 9, b"abcdefg", ext=b.reth(1, 2, 7)),
            "ack": b.frame(ACK, 0x42, 11, ext=b.aeth(SYNDROME_ACK, 1)),
            "cnp": RoceFrameBuilder(*A, dscp=48).frame(CNP, 0x42, 0, b"\x00" * 16, becn=True)}


@pytest.mark.parametrize("kind", ["write", "ack", "cnp"])
@pytest.mark.parametrize(("reason", "what", "corrupt"), CORRUPTIONS,
                         ids=[f"{r}-{w}" for r, w, _ in CORRUPTIONS])
def test_a_frame_a_nic_drops_is_rejected_with_its_reason(kind, reason, what, corrupt) -> None:
    """Each check of the strict receive path, alone: the good frame parses (and its header is
    cached as valid), the frame broken in one field is refused for that field's reason, every
    time (nothing invalid is cached), and the good frame still parses."""
    assert reason in REJECT_REASONS
    good = _good_frames()[kind]
    assert parse_roce(good).icrc_ok
    bad = corrupt(bytearray(good))
    assert bad != good
    with pytest.raises(Rejected) as exc:
        parse_roce(bad)
    assert exc.value.reason == reason and not isinstance(exc.value, Malformed), what
    assert _reject_reason(bad) == reason  # again: the refusal was not cached as valid
    p = parse_roce(good)
    assert p is not None and p.icrc_ok


def test_what_a_nic_accepts_or_leaves_to_the_host_is_not_rejected() -> None:
    """The checks refuse no more than they should: a datagram without DF is not a fragment, a
    CE-marked frame with its checksum updated is good, and IPv4 that is not UDP, or a frame
    that is not IPv4, is not RoCE (None, not rejected)."""
    good = _good_frames()["write"]
    # DF clear: not a fragment (the ICRC covers the flags, so it fails: not the point here)
    assert _reject_reason(fix_ip_checksum(_set(bytearray(good), 20, "!H", 0))) is None
    assert parse_roce(ce_mark(good)).icrc_ok
    tcp = fix_ip_checksum(_set(bytearray(good), 23, "!B", 6))
    assert parse_roce(tcp) is None
    arp = good[:12] + b"\x08\x06" + good[14:]
    assert parse_roce(arp) is None
    assert parse_roce(pfc_frame(A[0], {3: 1})) is None
    # a header check on a frame with a bad IPv4 checksum, even one not UDP, comes first
    assert _reject_reason(bytes(_set(bytearray(tcp), 22, "!B", 1))) == "ip_checksum"


def test_a_truncated_frame_is_malformed_not_rejected() -> None:
    """Malformed keeps its meaning (RoCEv2 by its headers, but broken): the endpoint counts it
    apart from the header checks' rejections."""
    good = _good_frames()["write"]
    with pytest.raises(Malformed) as exc:
        parse_roce(good[:-8])  # shorter than its IPv4 total length
    assert exc.value.reason == "malformed"
    short = bytearray(good[:14 + 20 + 8 + 8])  # lengths agree, too short for BTH and ICRC
    struct.pack_into("!H", short, 16, 20 + 8 + 8)
    struct.pack_into("!H", short, 38, 8 + 8)
    with pytest.raises(Malformed):
        parse_roce(fix_ip_checksum(short))


def test_acks_carry_unlimited_credits_and_naks_their_code() -> None:
    """An ACK's AETH syndrome is 0b000 + credit count 0b11111, as Linux rxe sends
    (AETH_ACK_UNLIMITED); a NAK's is 0x60, PSN sequence error. Scapy's AETH reads them so."""
    b = RoceFrameBuilder(*A)
    assert SYNDROME_ACK == 0x1F and SYNDROME_NAK_PSN_SEQ == 0x60
    ack = Ether(b.frame(ACK, 0x42, 5, ext=b.aeth(SYNDROME_ACK, 3)))
    assert ack[AETH].syndrome == 0x1F and ack[AETH].syndrome >> 5 == 0 and ack[AETH].msn == 3
    nak = Ether(b.frame(ACK, 0x42, 5, ext=b.aeth(SYNDROME_NAK_PSN_SEQ, 3)))
    assert nak[AETH].syndrome == 0x60


def _tshark(pcap: Path, *fields: str) -> list[list[str]]:
    """tshark's fields per frame, with RPC-over-RDMA off: Wireshark tries its heuristic on every
    SEND payload and calls a short one "Malformed: RPCoRDMA". We send no RPC-over-RDMA."""
    r = subprocess.run(["tshark", "--disable-protocol", "rpcordma", "-r", str(pcap), "-T",
                        "fields", "-E", "separator=|", "-E", "occurrence=f",
                        *(x for f in fields for x in ("-e", f))],
                       capture_output=True, text=True, check=True)
    assert "No such protocol" not in r.stderr, r.stderr
    return [ln.split("|") for ln in r.stdout.splitlines()]


def test_every_kind_of_frame_dissects_in_tshark(tmp_path: Path) -> None:
    """Wireshark's dissectors are an independent reading of the IBA and 802.1Qbb formats: every
    kind of frame the endpoint sends decodes with the fields we meant and nothing malformed."""
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark (apt install tshark)")
    from scapy.utils import wrpcap

    b = RoceFrameBuilder(*A)
    cnp = RoceFrameBuilder(*A, dscp=48).frame(CNP, 0x42, 0, b"\x00" * 16, becn=True)
    # (frame, opcode, PSN, payload length) for RoCE; short SEND payloads are the ones the
    # RPC-over-RDMA heuristic misreads
    roce = [(b.frame(SEND_FIRST, 0x42, 1, b"ab"), SEND_FIRST, 1, 2),
            (b.frame(SEND_MIDDLE, 0x42, 2, b"abc"), SEND_MIDDLE, 2, 3),
            (b.frame(SEND_LAST, 0x42, 3, b"abcd", ack_req=True), SEND_LAST, 3, 4),
            (b.frame(SEND_ONLY, 0x42, 4, b"x", ack_req=True), SEND_ONLY, 4, 1),
            (b.frame(WRITE_FIRST, 0x42, 5, b"abcde", ext=b.reth(0x1000, 7, 12)), WRITE_FIRST,
             5, 5),
            (b.frame(WRITE_MIDDLE, 0x42, 6, b"ab"), WRITE_MIDDLE, 6, 2),
            (b.frame(WRITE_LAST, 0x42, 7, b"abcde", ack_req=True), WRITE_LAST, 7, 5),
            (b.frame(WRITE_ONLY, 0x42, 8, b"z", ext=b.reth(0x2000, 7, 1)), WRITE_ONLY, 8, 1),
            (b.frame(ACK, 0x42, 9, ext=b.aeth(SYNDROME_ACK, 3)), ACK, 9, 0),
            (b.frame(ACK, 0x42, 10, ext=b.aeth(SYNDROME_NAK_PSN_SEQ, 3)), ACK, 10, 0),
            (cnp, CNP, 0, 16)]
    pfc = pfc_frame(A[0], {3: 1000, 6: 0})
    pcap = tmp_path / "frames.pcap"
    wrpcap(str(pcap), [Ether(f) for f, *_ in roce] + [Ether(pfc)])
    rows = _tshark(pcap, "frame.protocols", "_ws.malformed", "infiniband.bth.opcode",
                   "infiniband.bth.psn", "infiniband.bth.destqp", "infiniband.bth.tver",
                   "infiniband.bth.padcnt", "infiniband.bth.a", "infiniband.reth.dmalen",
                   "infiniband.aeth.syndrome.opcode", "infiniband.aeth.syndrome.credit_count",
                   "infiniband.aeth.syndrome.error_code", "infiniband.aeth.msn",
                   "infiniband.invariant.crc", "ip.dsfield.dscp", "macc.opcode",
                   "macc.cbfc.enbv", "macc.cbfc.pause_time.c3", "macc.cbfc.pause_time.c6")
    assert len(rows) == len(roce) + 1
    assert not any(r[1] or "malformed" in r[0] for r in rows), rows
    for (frame, opcode, psn, plen), r in zip(roce, rows[:-1], strict=True):
        (protos, _, op, tpsn, dqp, tver, padcnt, a, dmalen, aeth_op, credits, err, msn, crc,
         dscp) = r[:15]
        assert protos.startswith("eth:ethertype:ip:udp:infiniband"), protos
        assert (int(op), int(tpsn), int(dqp, 16), int(tver)) == (opcode, psn, 0x42, 0)
        assert int(dscp) == (48 if opcode == CNP else 26)
        if opcode != CNP:  # Wireshark 4.0 knows no CNP: its pad and ICRC are "vendor data"
            assert int(padcnt) == -plen & 3
            assert int(crc, 16) in struct.unpack("<I", frame[-4:]) + struct.unpack(">I",
                                                                                 frame[-4:])
        ack_req = opcode in (SEND_LAST, SEND_ONLY, WRITE_LAST)
        assert a == ("1" if ack_req else "0") or a == str(ack_req), a
        if opcode in (WRITE_FIRST, WRITE_ONLY):
            assert int(dmalen) == (12 if opcode == WRITE_FIRST else 1)
        if opcode == ACK and psn == 9:  # ACK, 31 credits: "unlimited"
            assert (int(aeth_op), int(credits), int(msn)) == (0, 31, 3)
        elif opcode == ACK:  # NAK (opcode 3), code 0: PSN sequence error
            assert (int(aeth_op), int(err), int(msn)) == (3, 0, 3)
    *_, mac_op, enbv, c3, c6 = rows[-1]
    assert rows[-1][0] == "eth:ethertype:macc"
    assert (int(mac_op, 16), int(enbv, 16), int(c3), int(c6)) == (0x0101, 0x48, 1000, 0)


def test_the_endpoint_counts_each_rejection_under_its_reason() -> None:
    """The endpoint's frame handler (alone: no sockets, so no root) counts a refused frame once,
    under ``rx_rejected[reason]``, a Malformed one under ``malformed`` only, and a good frame to
    no QP under ``unknown_qp``."""
    from traffic.endpoint import Endpoint, EndpointStats

    ep = Endpoint.__new__(Endpoint)  # _on_frame needs only the counters and the QP table
    ep.stats, ep.qps = EndpointStats(), {}
    expected = dict.fromkeys(REJECT_REASONS, 0)
    for good in _good_frames().values():
        for reason, _what, corrupt in CORRUPTIONS:
            ep._on_frame(corrupt(bytearray(good)), 0.0)
            expected[reason] += 1
        ep._on_frame(good, 0.0)
    ep._on_frame(good[:-8], 0.0)  # truncated: Malformed
    st = ep.stats
    assert st.rx_rejected == expected and set(expected) == set(REJECT_REASONS)
    assert (st.malformed, st.unknown_qp, st.not_roce, st.bad_icrc) == (1, 3, 0, 0)
    assert st.frames_rx == 3 * len(CORRUPTIONS) + 3 + 1
