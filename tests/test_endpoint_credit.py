"""Mode ib-credit at the NIC (traffic.endpoint_credit), on real veths: a credited class sends
what its leaf's credit covers, to the frame, and waits for more; other classes go on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.hostpair import IPS, MACS, host_pair
from tests.test_endpoint import _send_raw, setup_qps
from traffic.credits import BLOCK_BYTES, FlowControlPacket, credit_frame

pytestmark = pytest.mark.root

#: A 4096-byte WRITE_ONLY on the wire: Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16, payload,
#: ICRC 4: also the largest frame the NIC sends at path MTU 4096, so the credit a frame needs.
FRAME = 4096 + 14 + 20 + 8 + 12 + 16 + 4


def test_a_credited_class_sends_what_its_credit_covers_and_no_more(tmp_path: Path) -> None:
    with host_pair(tmp_path, line_mbps=10) as hp:
        a, b = hp.endpoint("a", "--credit-classes", "3"), hp.endpoint("b")
        q3 = setup_qps(a, b, 1, tc=3)[0]
        b.call(cmd="qp", qpn=0x300, role="responder", peer_ip=IPS["a"], peer_qpn=0x301, tc=0)
        a.call(cmd="qp", qpn=0x301, role="requester", peer_ip=IPS["b"], peer_qpn=0x300, tc=0)
        for q in (q3, 0x301):
            a.call(cmd="post", qpn=q, kind="write", size=4096, count=500)
        time.sleep(0.5)
        s0 = a.call(cmd="stats")  # no limit heard yet: no credit

        def grant(limit_bytes: int) -> dict:
            packet = FlowControlPacket(vl=3, fctbs=0, fccl=limit_bytes // BLOCK_BYTES)
            _send_raw(hp, "b", [credit_frame(MACS["b"], [packet])])  # as the leaf would
            time.sleep(0.5)
            return a.call(cmd="stats")

        s1 = grant(20 * 4096)  # 81,920 bytes: 19 frames, 2,690 bytes short of a 20th
        s2 = grant(40 * 4096)  # 163,840 in all: 39 frames
        time.sleep(0.3)
        s3 = a.call(cmd="stats")

    def sent(s: dict, q: int) -> int:
        return s["qps"][str(q)]["packets_sent"]

    assert sent(s0, q3) == 0 and s0["paused"][3] and sent(s0, 0x301) > 50
    assert sent(s1, q3) == 19 and s1["paused"][3]
    assert sent(s2, q3) == 39 == sent(s3, q3) and s3["paused"][3]
    assert sent(s3, 0x301) > sent(s1, 0x301) + 50  # class 0 never waited
    assert s3["paused_s"][3] > 1.0 and s3["paused_s"][0] == 0  # the wait, as PortXmitWait
    assert s3["stats"]["credit_rx"] == 2


def test_a_class_short_of_credit_stops_the_local_ack_timer_as_a_pause_does(
        tmp_path: Path) -> None:
    """A QP sends its whole window (3 frames) on its leaf's credit, and the credit left falls
    short of a frame; nothing acknowledges the frames (b has no such QP), and nothing waits to
    be sent, so the port is not waiting (PortXmitWait). For 1.2 s, six times the QP's 0.2 s
    timer, it resends nothing: the class cannot send, so the timer stands still, as it does
    while PFC pauses the class (test_endpoint's pause test). In a credit loop deadlock this is
    what keeps a sender whose frames are stuck further on from resending, as under PFC. Given
    credit again, the timer runs, and with still no ACK it fires."""
    with host_pair(tmp_path, line_mbps=10) as hp:
        a = hp.endpoint("a", "--credit-classes", "3")
        a.call(cmd="qp", qpn=0x101, role="requester", peer_ip=IPS["b"], peer_qpn=0x201, tc=3,
               max_outstanding=3, rto_s=0.2)
        a.call(cmd="post", qpn=0x101, kind="write", size=4096, count=10)

        def grant(limit_bytes: int, wait_s: float) -> dict:
            packet = FlowControlPacket(vl=3, fctbs=0, fccl=limit_bytes // BLOCK_BYTES)
            _send_raw(hp, "b", [credit_frame(MACS["b"], [packet])])  # as the leaf would
            time.sleep(wait_s)
            return a.call(cmd="stats")

        short = grant(3 * FRAME + 1000, 1.2)  # 3 frames and 937 bytes
        again = grant(9 * FRAME + 1000, 0.6)  # 6 frames more

    qp = short["qps"]["257"]
    assert qp["packets_sent"] == 3 and qp["unacked"] == 3, qp
    assert qp["timeouts"] == 0 and qp["retransmitted"] == 0, qp
    assert not short["paused"][3]  # short of credit, but no frame waits for it
    qp = again["qps"]["257"]
    assert qp["timeouts"] >= 1 and qp["retransmitted"] >= 3, qp
