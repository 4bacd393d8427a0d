"""The tbf gate's rtnetlink request, byte for byte: what `tc qdisc change ... tbf` sends."""

from __future__ import annotations

import struct

import pytest

from testbed.machine.qdisc_netlink import (
    NLMSG_ERROR,
    RTM_DELQDISC,
    RTM_NEWQDISC,
    ack_error,
    delete_request,
    tbf_options,
    tbf_request,
)

# `tc qdisc change dev d0 parent 1:13 handle 13: tbf rate 1000bit burst 9014 limit 100000`
# (iproute2 6.1 on Linux 6.1), its TCA_OPTIONS up to the rate table, as strace showed them:
# TCA_TBF_PARMS (ratespec: cell_log 3, Ethernet, cell_align -1, 125 bytes/s; limit 100000,
# buffer 1,126,750,000 ticks), TCA_TBF_BURST 9014, the rate table's header.
TC_CLOSED = bytes.fromhex(
    "28000100" "030100 00ffff0000 7d000000" "000000000000000000000000" "a0860100" "30d72843"
    "00000000" "08000600" "36230000" "04040200".replace(" ", ""))


def test_a_closed_gates_options_are_the_bytes_tc_sends() -> None:
    opts = tbf_options(1000, 9014, 100000)
    assert struct.unpack_from("HH", opts) == (len(opts), 2)  # TCA_OPTIONS, nested
    assert opts[4:4 + len(TC_CLOSED)] == TC_CLOSED
    rtab = struct.unpack_from("256I", opts, 4 + len(TC_CLOSED))
    # 8-byte cells: 8 bytes at 125 bytes/s are 64 ms, 15.625 ticks a microsecond
    assert rtab[0] == 1_000_000 and rtab[255] == 256_000_000
    assert len(opts) == 4 + 40 + 8 + 1028


def test_an_open_gates_options_round_each_time_as_tc_does() -> None:
    opts = tbf_options(1_000_000_000, 9014, 100000)
    rate, limit, buffer = (struct.unpack_from("I", opts, 4 + 4 + 8)[0],
                           *struct.unpack_from("II", opts, 4 + 4 + 24))
    assert (rate, limit) == (125_000_000, 100000)
    assert buffer == 72 * 15.625  # 72.112 us, whole microseconds first
    assert struct.unpack_from("I", opts, 4 + 4 + 36 + 4)[0] == 9014  # the burst, in bytes


@pytest.mark.parametrize("how, flags", [("change", 0x5), ("add", 0x605), ("replace", 0x505)])
def test_a_request_asks_what_tc_asks(how: str, flags: int) -> None:
    msg = tbf_request(how, 7, 0x10013, 0x130000, 1000, 9014, 100000)
    n, kind, got, seq, pid = struct.unpack_from("IHHII", msg)
    assert (n, kind, got, seq, pid) == (len(msg), RTM_NEWQDISC, flags, 0, 0)
    assert struct.unpack_from("BxxxiIII", msg, 16) == (0, 7, 0x130000, 0x10013, 0)
    assert msg[36:44] == b"\x08\x00\x01\x00tbf\x00"  # TCA_KIND


def test_a_delete_names_the_gate_and_nothing_else() -> None:
    msg = delete_request(7, 0x10013, 0x130000)
    assert struct.unpack_from("IHH", msg) == (36, RTM_DELQDISC, 0x5)
    assert struct.unpack_from("iII", msg, 20) == (7, 0x130000, 0x10013)


def test_the_acknowledgement_gives_the_kernels_errno() -> None:
    def ack(err: int) -> bytes:
        return struct.pack("IHHIIi", 36, NLMSG_ERROR, 0, 1, 0, -err) + bytes(16)

    assert ack_error(ack(0)) == 0
    assert ack_error(ack(19)) == 19  # ENODEV
    with pytest.raises(ValueError, match="not an acknowledgement"):
        ack_error(struct.pack("IHHII", 36, RTM_NEWQDISC, 0, 1, 0) + bytes(20))
    with pytest.raises(ValueError, match="a netlink reply of 16 bytes"):
        ack_error(struct.pack("IHHII", 16, NLMSG_ERROR, 0, 1, 0))
