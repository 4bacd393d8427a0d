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
