"""RoCEv2 endpoints in namespaces over real veths (no switch needed)."""

from __future__ import annotations

import csv
import json
import select
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from scapy.compat import raw
from scapy.utils import rdpcap

from tests.hostpair import IPS, MACS, bridge_counts, host_pair
from tests.test_packets import CORRUPTIONS
from traffic.layers import BTH
from traffic.packets import (
    ACK,
    REJECT_REASONS,
    SEND_FIRST,
    SEND_LAST,
    SEND_MIDDLE,
    SEND_ONLY,
    WRITE_FIRST,
    WRITE_LAST,
    WRITE_MIDDLE,
    WRITE_ONLY,
    RoceFrameBuilder,
    pfc_frame,
)

pytestmark = pytest.mark.root

MB = 1_000_000


def setup_qps(a, b, n: int, tc: int = 3, **kw) -> list[int]:
    qpns = []
    for i in range(n):
        sq, rq = 0x100 + i, 0x200 + i
        b.call(cmd="qp", qpn=rq, role="responder", peer_ip=IPS["a"], peer_qpn=sq, tc=tc)
        a.call(cmd="qp", qpn=sq, role="requester", peer_ip=IPS["b"], peer_qpn=rq, tc=tc, **kw)
        qpns.append(sq)
    return qpns


def all_idle(stats: dict) -> bool:
    return all(q.get("idle", True) for q in stats["qps"].values())


def test_10mb_on_4_qps_every_byte_once_in_order_and_tshark_clean(tmp_path: Path) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark (apt install tshark)")
    with host_pair(tmp_path, line_mbps=80) as hp:
        cap = tmp_path / "cap.pcap"
        tcpdump = hp.run("b", "tcpdump", "-i", "eth0", "-w", str(cap), "-s", "0", "-U",
                         "udp port 4791", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        a, b = hp.endpoint("a"), hp.endpoint("b")
        qps = setup_qps(a, b, 4)
        for i, q in enumerate(qps):  # WRITEs on two QPs, SENDs on two
            a.call(cmd="post", qpn=q, kind="write" if i < 2 else "send", size=250_000, count=10)
        st = a.wait(all_idle, timeout=60)
        assert all_idle(st), st
        bs = b.call(cmd="stats")
        time.sleep(0.3)
        tcpdump.terminate()
        tcpdump.wait(5)
    for i, q in enumerate(qps):
        r = bs["qps"][str(0x200 + i)]
        assert r["bytes"] == 2_500_000 and r["corrupt"] == 0 and r["messages"] == 10
        s = st["qps"][str(q)]
        assert s["bytes_acked"] == 2_500_000 and s["messages_completed"] == 10
    assert sum(st["qps"][str(q)]["bytes_acked"] for q in qps) == 10 * MB
    # tshark: every frame dissects as InfiniBand over UDP 4791, nothing malformed, ICRC good.
    # RPC-over-RDMA off: Wireshark tries its heuristic on SEND payloads and reports the ones it
    # misreads as "Malformed: RPCoRDMA"; we send none (tests/test_packets.py says more).
    tshark = ["tshark", "--disable-protocol", "rpcordma", "-r", str(cap), "-T", "fields"]
    r = subprocess.run([*tshark, "-e", "frame.protocols", "-e", "_ws.malformed", "-e",
                        "_ws.expert.severity", "-e", "infiniband.bth.opcode"],
                       capture_output=True, text=True)
    assert "No such protocol" not in r.stderr, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) > 2500
    assert all("infiniband" in ln for ln in lines), lines[:3]
    assert not any("malformed" in ln.lower() for ln in lines)
    opcodes = {int(ln.split("\t")[3]) for ln in lines}
    assert {SEND_FIRST, SEND_MIDDLE, SEND_LAST, WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST,
            ACK} <= opcodes, opcodes
    # ICRC: tshark shows it but does not check it, so recompute each one with Scapy's reference
    # implementation and check it equals the value tshark decoded
    r2 = subprocess.run([*tshark, "-e", "infiniband.invariant.crc"], capture_output=True,
                        text=True)
    tshark_crcs = [int(x, 16) for x in r2.stdout.split()]
    frames = rdpcap(str(cap))
    assert len(tshark_crcs) == len(frames) == len(lines)
    for pkt, crc in zip(frames, tshark_crcs, strict=True):
        ref = pkt.copy()
        ref[BTH].icrc = None
        assert raw(ref) == raw(pkt), f"bad ICRC in {pkt.summary()}"
        assert raw(pkt)[-4:] in (struct.pack("<I", crc), struct.pack(">I", crc))
    # message log written with a completion time per message
    with open(tmp_path / "a" / "messages.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 40 and all(float(x["fct_s"]) > 0 for x in rows)


def test_one_percent_loss_nak_go_back_n_complete(tmp_path: Path) -> None:
    with host_pair(tmp_path, line_mbps=40, bridge_args=["--drop", "0.01", "--seed", "3"]) as hp:
        a, b = hp.endpoint("a"), hp.endpoint("b")
        qps = setup_qps(a, b, 2)
        for q in qps:
            a.call(cmd="post", qpn=q, kind="send", size=100_000, count=10)
        st = a.wait(all_idle, timeout=90)
        bs = b.call(cmd="stats")
        counts = bridge_counts(hp)
    assert all_idle(st), st
    assert counts["dropped"] > 0
    naks = sum(st["qps"][str(q)]["naks"] for q in qps)
    retx = sum(st["qps"][str(q)]["retransmitted"] for q in qps)
    assert naks > 0 and retx >= counts["dropped"]
    for i in range(2):
        r = bs["qps"][str(0x200 + i)]
        assert r["bytes"] == MB and r["corrupt"] == 0
    sent = sum(st["qps"][str(q)]["packets_sent"] for q in qps)
    print(f"loss: dropped {counts['dropped']} of {counts['data']}, NAKs {naks}, retransmitted "
          f"{retx}, goodput cost {retx / sent:.1%} of packets")


def test_ce_marks_cnps_spaced_rate_falls_then_recovers(tmp_path: Path) -> None:
    interval = 0.1
    # The defaults scale [Z15] to the link and take minutes to climb back to line rate at
    # 20 Mbit/s (about 1000 additive steps, as at 40G); larger steps keep the test short.
    dcqcn = json.dumps({"timer_period_s": 0.05, "alpha_period_s": 0.05, "rai_bps": 1e6,
                        "rhai_bps": 2e6, "byte_counter_bytes": 262144})
    with host_pair(tmp_path, line_mbps=20, bridge_args=["--mark", "1.0", "--mark-for", "1.5"]
                   ) as hp:
        a = hp.endpoint("a", "--dcqcn", dcqcn, "--sample-period", "0.05")
        b = hp.endpoint("b", "--cnp-interval", str(interval))
        (q,) = setup_qps(a, b, 1)
        a.call(cmd="post", qpn=q, kind="write", size=4096 * 4, count=400)
        time.sleep(1.4)
        mid = a.call(cmd="stats")["qps"][str(q)]
        st = a.wait(lambda s: s["qps"][str(q)]["rate_bps"] > 0.95 * 20e6, timeout=30)
        bst = b.call(cmd="stats")
        counts = bridge_counts(hp)
    assert counts["marked"] > 50
    assert mid["cnps_received"] >= 5
    assert mid["rate_bps"] < 0.3 * 20e6, mid
    # recovered once marks stopped
    assert st["qps"][str(q)]["rate_bps"] > 0.95 * 20e6
    # at most one CNP per interval: over the 1.5 s marking window
    cnps = bst["qps"][str(0x200)]["cnps_sent"]
    assert cnps <= 1.5 / interval + 2, cnps
    assert cnps >= 0.5 * 1.5 / interval
    with open(tmp_path / "a" / "qp_timeseries.csv") as fh:
        rows = list(csv.DictReader(fh))
    rates = [float(r["rate_bps"]) for r in rows if r["role"] == "requester"]
    assert min(rates) < 0.3 * 20e6 and max(rates) > 0.95 * 20e6


def _send_raw(hp, host: str, frames: list[bytes]) -> None:
    script = ("import socket,sys,json\n"
              "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n"
              "s.bind(('eth0',0))\n"
              "for h in json.load(sys.stdin): s.send(bytes.fromhex(h))\n")
    p = hp.run(host, "python3", "-c", script, stdin=subprocess.PIPE, text=True)
    p.communicate(json.dumps([f.hex() for f in frames]), timeout=30)


def test_pfc_pauses_only_its_class_for_the_quanta(tmp_path: Path) -> None:
    line = 10e6
    with host_pair(tmp_path, line_mbps=10) as hp:
        a, b = hp.endpoint("a"), hp.endpoint("b")
        q3 = setup_qps(a, b, 1, tc=3)[0]
        b.call(cmd="qp", qpn=0x300, role="responder", peer_ip=IPS["a"], peer_qpn=0x301, tc=0)
        a.call(cmd="qp", qpn=0x301, role="requester", peer_ip=IPS["b"], peer_qpn=0x300, tc=0)
        for q in (q3, 0x301):
            a.call(cmd="post", qpn=q, kind="write", size=4096, count=2000)
        time.sleep(0.5)
        quanta = 20000  # 20000 x 512 bit / 10 Mbit/s = 1.024 s
        expect = quanta * 512 / line
        before = a.call(cmd="stats")
        _send_raw(hp, "b", [pfc_frame(MACS["b"], {3: quanta})])
        time.sleep(0.1)
        s1 = a.call(cmd="stats")
        time.sleep(expect - 0.3)
        s2 = a.call(cmd="stats")
        time.sleep(0.6)
        s3 = a.call(cmd="stats")
        # XON ends a pause early
        _send_raw(hp, "b", [pfc_frame(MACS["b"], {3: 0xFFFF})])
        time.sleep(0.2)
        x1 = a.call(cmd="stats")
        _send_raw(hp, "b", [pfc_frame(MACS["b"], {3: 0})])
        time.sleep(0.3)
        x2 = a.call(cmd="stats")

    def sent(s, q):
        return s["qps"][str(q)]["packets_sent"]

    assert s1["paused"][3] and not s1["paused"][0]
    assert sent(s2, q3) == sent(s1, q3), "class 3 sent while paused"
    assert sent(s2, 0x301) > sent(s1, 0x301) + 50, "class 0 stopped too"
    assert sent(s3, q3) > sent(s2, q3), "class 3 did not resume after the quanta"
    paused = s3["paused_s"][3] - before["paused_s"][3]
    assert paused == pytest.approx(expect, rel=0.05)
    assert x1["paused"][3] and not x2["paused"][3]
    assert sent(x2, q3) > sent(x1, q3)


def _writing_then_paused(hp, paused: list[str], *a_args: str):
    """Endpoints a (with ``a_args``) and b, a QP from a to b on class 3 writing 64 KB messages,
    then, half a second in, PFC pausing class 3 on each host of ``paused`` for 20000 quanta
    (1.024 s at 10 Mbit/s). Returns a, b and the QP."""
    a, b = hp.endpoint("a", *a_args), hp.endpoint("b")
    q3 = setup_qps(a, b, 1, tc=3)[0]
    a.call(cmd="post", qpn=q3, kind="write", size=65536, count=200)
    time.sleep(0.5)
    for host in paused:  # the frame comes from the other host, as from its switch
        other = "a" if host == "b" else "b"
        _send_raw(hp, other, [pfc_frame(MACS[other], {3: 20000})])
    return a, b, q3

def test_a_pause_longer_than_the_timeout_resends_nothing(tmp_path: Path) -> None:
    """PFC pauses class 3 on both NICs for about a second, twice the retransmission timeout,
    while the sender has packets the receiver got but cannot acknowledge (its ACKs wait out the
    pause too). Nothing was lost, so nothing may be resent: a real NIC's timer is thousands of
    times a pause, and here it stands still while the sender's NIC is paused."""
    with host_pair(tmp_path, line_mbps=10) as hp:
        a, b, q3 = _writing_then_paused(hp, ["b", "a"])  # b's ACKs stop, then a
        time.sleep(0.1)
        during = a.call(cmd="stats")
        time.sleep(1.5)
        after = a.call(cmd="stats")
        got = b.call(cmd="stats")

    qp = after["qps"][str(q3)]
    assert during["paused"][3] and not after["paused"][3]
    assert during["qps"][str(q3)]["unacked"] > 0, "nothing was in flight during the pause"
    assert qp["packets_sent"] > during["qps"][str(q3)]["packets_sent"], "a did not resume"
    assert qp["timeouts"] == 0 and qp["retransmitted"] == 0, qp
    resp = next(q for q in got["qps"].values() if q.get("role") == "responder")
    assert resp["duplicates"] == 0 and resp["out_of_order"] == 0, resp


@pytest.mark.parametrize(("n", "timed_out"), [(4, True), (7, False)])
def test_the_local_ack_timeout_set_reaches_the_qps(tmp_path: Path, n: int,
                                                   timed_out: bool) -> None:
    """Only the receiver is paused (about a second), so its ACKs wait while the sender is free:
    that wait counts toward the sender's timer, IB's Local ACK Timeout set with
    --local-ack-timeout (the scenario's endpoints.local_ack_timeout), scaled to the 10 Mbit/s
    link: n = 4 is 0.26 s, n = 7 is 2.1 s."""
    with host_pair(tmp_path, line_mbps=10) as hp:
        a, _b, q3 = _writing_then_paused(hp, ["b"], "--local-ack-timeout", str(n))
        time.sleep(1.5)
        qp = a.call(cmd="stats")["qps"][str(q3)]
    assert (qp["timeouts"] > 0) is timed_out, qp


def test_malformed_input_is_counted_and_dropped(tmp_path: Path) -> None:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import fuzz

    with host_pair(tmp_path, line_mbps=10) as hp:
        a, b = hp.endpoint("a"), hp.endpoint("b")
        setup_qps(a, b, 1)
        bld = RoceFrameBuilder(MACS["b"], MACS["a"], IPS["b"], IPS["a"], 50000)
        good = bld.frame(WRITE_ONLY, 0x100, 0, b"x" * 16, ext=bld.reth(0, 0, 16))
        truncated = good[:14 + 20 + 8 + 6]
        trunc_fixed = bytearray(truncated)
        trunc_fixed[16:18] = struct.pack("!H", len(truncated) - 14)
        bad_icrc = good[:-1] + bytes([good[-1] ^ 0xFF])
        unknown_qp = bld.frame(ACK, 0x7777, 0, ext=bld.aeth(0, 0))
        wrong_opcode = bld.frame(0x64, 0x100, 0, b"\x00" * 8)
        data_to_requester = bld.frame(SEND_ONLY, 0x100, 0, b"y" * 8)
        ip = IP(src=IPS["b"], dst=IPS["a"])
        fuzzed = [bytes(fuzz(Ether(src=MACS["b"], dst=MACS["a"]) / ip / UDP(sport=50000,
                                                                          dport=4791) / BTH()))
                  for _ in range(500)]
        fuzzed += [bytes(Ether(src=MACS["b"], dst=MACS["a"]) / ip / UDP(sport=50000, dport=4791)
                         / fuzz(BTH()) / (b"z" * 32)) for _ in range(500)]
        # one frame per check of the strict receive path, each counted under its reason
        before = a.call(cmd="stats")["stats"]
        _send_raw(hp, "b", [corrupt(bytearray(good)) for _r, _w, corrupt in CORRUPTIONS])
        time.sleep(0.5)
        rejected = a.call(cmd="stats")["stats"]
        _send_raw(hp, "b", [bytes(trunc_fixed), bad_icrc, unknown_qp, wrong_opcode,
                            data_to_requester, *fuzzed])
        time.sleep(1.0)
        st = a.call(cmd="stats")["stats"]
        # still alive and working
        a.call(cmd="post", qpn=0x100, kind="write", size=10_000)
        done = a.wait(all_idle, timeout=10)
    for reason in REJECT_REASONS:
        sent = sum(r == reason for r, _w, _c in CORRUPTIONS)
        assert rejected["rx_rejected"][reason] - before["rx_rejected"][reason] == sent, reason
    assert rejected["malformed"] == before["malformed"]
    assert st["malformed"] >= 3  # truncated BTH, unsupported opcode, data to a requester
    assert st["bad_icrc"] >= 1 and st["unknown_qp"] >= 1
    # every one of the bad frames (1005, and one per header check) is counted as dropped for a
    # reason
    dropped = (st["malformed"] + st["bad_icrc"] + st["unknown_qp"] + st["not_roce"]
               + sum(st["rx_rejected"].values()))
    assert st["frames_rx"] >= 1005 + len(CORRUPTIONS), st
    assert dropped >= 1005 + len(CORRUPTIONS), st
    assert all_idle(done)
    assert done["qps"][str(0x100)]["bytes_acked"] == 10_000


def _listening(tcpdump: subprocess.Popen, timeout_s: float = 10.0) -> subprocess.Popen:
    """``tcpdump`` once it says it is capturing ("listening on"), which its first start in a
    session may take seconds to say: a fixed wait lost a whole short capture in a CI run."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([tcpdump.stderr], [], [], left)
        line = tcpdump.stderr.readline() if ready else ""
        if "listening on" in line:
            return tcpdump
        if not line:
            break
    raise AssertionError(f"tcpdump did not start capturing within {timeout_s:g} s")


@pytest.mark.parametrize(("ack_tc", "timed_out"), [(None, True), (6, False)])
def test_acks_in_a_class_of_their_own_pass_a_pause_of_the_data_class(
        tmp_path: Path, ack_tc: int | None, timed_out: bool) -> None:
    """SONiC's RoCEv2 test plan, case 11: the receiver is paused on class 3 for about a second
    with a 0.26 s Local ACK Timeout (n = 4 at 10 Mbit/s). ACKs in the data's class wait out the
    pause and the sender times out; ACKs in class 6 (the responder's ack_tc) pass, and nothing
    times out. The ACKs carry their class's DSCP (48 for class 6)."""
    with host_pair(tmp_path, line_mbps=10) as hp:
        a, b = hp.endpoint("a", "--local-ack-timeout", "4"), hp.endpoint("b")
        extra = {} if ack_tc is None else {"ack_tc": ack_tc}
        b.call(cmd="qp", qpn=0x200, role="responder", peer_ip=IPS["a"], peer_qpn=0x100, tc=3,
               **extra)
        a.call(cmd="qp", qpn=0x100, role="requester", peer_ip=IPS["b"], peer_qpn=0x200, tc=3)
        cap = tmp_path / "acks.pcap"
        tcpdump = _listening(hp.run("a", "tcpdump", "-i", "eth0", "-w", str(cap), "-s", "0",
                                    "-U", "udp port 4791 and inbound",
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True))
        a.call(cmd="post", qpn=0x100, kind="write", size=65536, count=200)
        time.sleep(0.5)
        _send_raw(hp, "a", [pfc_frame(MACS["a"], {3: 20000})])  # b pauses class 3, 1.024 s
        time.sleep(1.5)
        qp = a.call(cmd="stats")["qps"][str(0x100)]
        tcpdump.terminate()
        tcpdump.wait(5)
    assert (qp["timeouts"] > 0) is timed_out, qp
    from scapy.layers.inet import IP
    dscps = {p[IP].tos >> 2 for p in rdpcap(str(cap)) if IP in p}
    assert dscps == {26 if ack_tc is None else 48}, dscps
