"""PTF data-plane tests of p4/roce_switch.p4 on BMv2.

Run by tests/test_ptf.py (which starts the switch and wires ports 1-4 to ptf1-ptf4), or by hand:
    ptf --test-dir tests/ptf -i 1@ptf1 ... --test-params "grpc_addr='unix:///...';device_id=1"
The first case to run programs the switch over P4Runtime with the testbed's own control-plane
code (unless an earlier run did). Every case starts from the same state, whatever ran before it,
in this run or an earlier one: setUp zeroes every register of the program over Thrift (phantom
queues, pauses, the ports paused on each queue's account, admitted bytes, watchdog flags) and
puts the ECMP hash back, so the cases can run alone or in any order (test_ptf.py runs them in
file order, then in reverse on a switch left dirty on purpose). The test parameter reset=False
skips the reset, to show what the cases would see without it.
"""

from __future__ import annotations

import json
import time

import ptf
import ptf.testutils as tu
from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import P4Type
from ptf.base_tests import BaseTest
from ptf.mask import Mask
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether

from testbed.config.constants import AGENT_PORT
from testbed.config.models import FabricConfig
from testbed.control.entries import (
    BMV2_JSON_PATH,
    INGRESS,
    EntryBuilder,
    build_switch_program,
    load_p4info,
)
from testbed.control.p4runtime import SwitchSession
from testbed.topology.graph import NextHop, Port, Route, Switch
from traffic.wire import ETH_P_MAC_CONTROL, NUM_TCS, PFC_DST_MAC

SW_MAC = {p: f"02:4c:00:01:00:{p:02x}" for p in range(1, 6)}
PEER_MAC = {1: "02:00:0a:00:01:01", 2: "02:51:00:01:00:01", 3: "02:51:00:02:00:01",
            4: "02:51:00:03:00:01", 5: "02:00:0a:00:05:01"}
#: Port 5 runs at 10 kbit/s, so its phantom queue barely drains during a test: the queue
#: length a tick sets is the one the next packet sees.
SLOW_PORT, SLOW_MBPS = 5, 0.01
#: Port 1 runs at 400 Mbit/s: an XOFF toward it (65535 quanta of 1.28 ns) lasts 84 ms, so the
#: switch renews it within a test, where a 10 Mbit/s port's lasts 3.4 s.
FAST_PORT, FAST_MBPS = 1, 400.0
SLOW_NET_HOST = "10.0.5.9"
SRC_MAC = "02:00:0a:00:09:09"
H1 = "10.0.1.1"
REMOTE_NET_HOST = "10.0.2.7"
ECMP_PORTS = (2, 3, 4)
PFC_DST = "01:80:c2:00:00:01"
HASH_FIELDS = ["src_ip", "dst_ip", "ip_proto", "src_port", "dst_port"]
#: Every register array of the compiled program: the state a case could leave behind.
REGISTERS = [r["name"] for r in json.loads(BMV2_JSON_PATH.read_text())["register_arrays"]]


def cell(port: int, tc: int) -> int:
    """A per-(port, class) array's index."""
    return port * NUM_TCS + tc


def nh(port: int) -> NextHop:
    return NextHop(port, SW_MAC[port], PEER_MAC[port])


ROUTES = [
    Route(f"{H1}/32", (nh(1),)),
    Route("10.0.2.0/24", tuple(nh(p) for p in ECMP_PORTS)),
    Route("10.0.3.3/32", (nh(2),)),
    Route("10.0.5.0/24", (nh(SLOW_PORT),)),
]


def session() -> tuple[SwitchSession, EntryBuilder]:
    b = EntryBuilder(load_p4info())
    s = SwitchSession("dut", int(tu.test_param_get("device_id", 1)),
                      tu.test_param_get("grpc_addr"), b)
    s.connect()
    return s, b


def switch(seed: int = 0) -> Switch:
    sw = Switch("dut", "leaf", 1, int(tu.test_param_get("device_id", 1)), ecmp_seed=seed)
    rates = {SLOW_PORT: SLOW_MBPS, FAST_PORT: FAST_MBPS}
    sw.ports = {p: Port(p, SW_MAC[p], "peer", 1, rates.get(p, 10.0)) for p in range(1, 6)}
    return sw


def udp_pkt(dst: str = H1, sport: int = 49152, dport: int = 4791, ttl: int = 64, dscp: int = 26,
            ecn: int = 1, src: str = "10.0.9.9", payload_len: int = 100):
    return (Ether(dst=SW_MAC[2], src=SRC_MAC) /
            IP(src=src, dst=dst, ttl=ttl, tos=(dscp << 2) | ecn, id=1) /
            UDP(sport=sport, dport=dport) / (b"\xab" * payload_len))


def with_input(mac: str, in_port: int) -> str:
    """A port's MAC with the ingress port written into byte 2, as set_nexthop leaves a
    forwarded frame's source (testbed.machine.inputs reads it in mode ib-credit)."""
    b = mac.split(":")
    b[2] = f"{in_port:02x}"
    return ":".join(b)


def routed(pkt, out_port: int, in_port: int):
    """What the switch sends on ``out_port`` for ``pkt`` received on ``in_port``."""
    exp = pkt.copy()
    exp[Ether].src = with_input(SW_MAC[out_port], in_port)
    exp[Ether].dst = PEER_MAC[out_port]
    exp[IP].ttl -= 1
    del exp[IP].chksum
    return exp


def thrift():
    """BMv2's Thrift client and its transport (the harness runs us in the switch's namespace)."""
    from bm_runtime.standard import Standard
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
    from thrift.transport import TSocket, TTransport

    transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", 9090))
    transport.open()
    return Standard.Client(TMultiplexedProtocol.TMultiplexedProtocol(
        TBinaryProtocol.TBinaryProtocol(transport), "standard")), transport


def programmed(sess: SwitchSession, b: EntryBuilder) -> bool:
    """Whether the switch holds the test routes already (from an earlier case or run)."""
    assert sess.client is not None
    req = p4runtime_pb2.ReadRequest(device_id=sess.client.device_id)
    req.entities.add().table_entry.table_id = b.ctx.get_obj_id(P4Type.table,
                                                               f"{INGRESS}.ipv4_route")
    return any(resp.entities for resp in sess.client.stub.Read(req))


class RoceSwitchTest(BaseTest):
    """Programs the standard test routes if the switch has none; resets the switch's state."""

    def setUp(self) -> None:
        BaseTest.setUp(self)
        self.dataplane = ptf.dataplane_instance
        self.sess, self.b = session()
        self.bm, self._bm_transport = None, None
        try:
            if not programmed(self.sess, self.b):
                self.sess.apply(build_switch_program(self.b, switch(), ROUTES, FabricConfig()))
            self.bm, self._bm_transport = thrift()
            if tu.test_param_get("reset", True):
                self.reset()
        except BaseException:
            self._close()  # tearDown does not run when setUp fails: free the sessions
            raise
        self.dataplane.flush()

    def reset(self) -> None:
        """Every register cell to zero (no phantom backlog, no pause received or sent, no
        port paused on a queue's account, nothing admitted, no watchdog flag) and the ECMP hash
        to the default fields and seed. Counters stay: the cases read their differences."""
        for name in REGISTERS:
            self.bm.bm_register_reset(0, name)
        self.set_hash(HASH_FIELDS)

    def _close(self) -> None:
        if self._bm_transport is not None:
            self._bm_transport.close()
        self.sess.close()

    def tearDown(self) -> None:
        self._close()
        BaseTest.tearDown(self)

    def counter(self, name: str, index: int) -> tuple[int, int]:
        return self.sess.read_counter(name).get(index, (0, 0))

    def set_hash(self, fields, seed: int = 0) -> None:
        cfg = FabricConfig.model_validate({"ecmp": {"hash_fields": list(fields)}})
        prog = build_switch_program(self.b, switch(seed), [], cfg)
        self.sess.write(prog.modify, 2)  # MODIFY


class Forwarding(RoceSwitchTest):
    """A routed packet leaves on the route's port with MACs rewritten, TTL-1, checksum fixed."""

    def runTest(self) -> None:
        pkt = udp_pkt()
        tu.send_packet(self, 2, pkt)
        tu.verify_packet(self, routed(pkt, 1, 2), 1)
        tu.verify_no_other_packets(self)
        # a host route beats the /24 group
        pkt = udp_pkt(dst="10.0.3.3")
        tu.send_packet(self, 1, pkt)
        tu.verify_packet(self, routed(pkt, 2, 1), 2)
        tu.verify_no_other_packets(self)


class TtlExpiry(RoceSwitchTest):
    def runTest(self) -> None:
        before = self.counter("RoceIngress.drops", 2 * 16 + 3)[0]
        tu.send_packet(self, 2, udp_pkt(ttl=1))
        tu.verify_no_other_packets(self)
        assert self.counter("RoceIngress.drops", 2 * 16 + 3)[0] == before + 1


class NoRoute(RoceSwitchTest):
    def runTest(self) -> None:
        before = self.counter("RoceIngress.drops", 2 * 16 + 4)[0]
        tu.send_packet(self, 2, udp_pkt(dst="192.0.2.1"))
        tu.verify_no_other_packets(self)
        assert self.counter("RoceIngress.drops", 2 * 16 + 4)[0] == before + 1


class DscpToClass(RoceSwitchTest):
    """DSCP 26 lands in class 3, DSCP 48 in class 6, others in class 0 (per-class counters)."""

    def runTest(self) -> None:
        for dscp, tc in ((26, 3), (48, 6), (0, 0), (10, 0)):
            rx0 = self.counter("RoceIngress.rx_port_tc", cell(3, tc))[0]
            tx0 = self.counter("RoceEgress.tx_port_tc", cell(1, tc))[0]
            pkt = udp_pkt(dscp=dscp)
            tu.send_packet(self, 3, pkt)
            tu.verify_packet(self, routed(pkt, 1, 3), 1)
            assert self.counter("RoceIngress.rx_port_tc", cell(3, tc))[0] == rx0 + 1, dscp
            assert self.counter("RoceEgress.tx_port_tc", cell(1, tc))[0] == tx0 + 1, dscp


def ecmp_choice(test: RoceSwitchTest, sport: int) -> int:
    pkt = udp_pkt(dst=REMOTE_NET_HOST, sport=sport)
    tu.send_packet(test, 1, pkt)
    masked = Mask(routed(pkt, ECMP_PORTS[0], 1))
    masked.set_do_not_care_scapy(Ether, "src")
    masked.set_do_not_care_scapy(Ether, "dst")
    idx, _ = tu.verify_packet_any_port(test, masked, list(ECMP_PORTS))
    return ECMP_PORTS[idx]


class EcmpMemberChoice(RoceSwitchTest):
    """32 flows differing only in UDP source port spread over every member; each flow is stable;
    the MACs match the chosen member; with the source port out of the hash they share one."""

    def _choices(self) -> dict[int, int]:
        return {sport: ecmp_choice(self, sport) for sport in range(49152, 49152 + 32)}

    def runTest(self) -> None:
        try:
            first = self._choices()
            assert set(first.values()) == set(ECMP_PORTS), first
            assert self._choices() == first, "a flow changed path"
            # the packet carries the MACs of the member it left on
            pkt = udp_pkt(dst=REMOTE_NET_HOST, sport=49152)
            tu.send_packet(self, 1, pkt)
            tu.verify_packet(self, routed(pkt, first[49152], 1), first[49152])
            self.set_hash(["src_ip", "dst_ip", "ip_proto", "dst_port"])
            assert len(set(self._choices().values())) == 1
            # a different seed moves flows: the hash is per switch
            self.set_hash(HASH_FIELDS, seed=40503)
            assert self._choices() != first
        finally:
            self.set_hash(HASH_FIELDS)
        tu.verify_no_other_packets(self)


class EcmpHashesTcpPorts(RoceSwitchTest):
    """TCP connections between one host pair, differing only in their source port, spread over
    the members as UDP flows do (mode tcp's connections would otherwise share one path), and
    leave with their TCP header as it came (sequence numbers, flags, checksum untouched)."""

    def runTest(self) -> None:
        choices = {}
        for sport in range(40000, 40032):
            pkt = (Ether(dst=SW_MAC[2], src=SRC_MAC) /
                   IP(src="10.0.9.9", dst=REMOTE_NET_HOST, tos=(26 << 2) | 2, id=1) /
                   TCP(sport=sport, dport=18515, seq=12345, flags="PA") / (b"\xab" * 100))
            tu.send_packet(self, 1, pkt)
            masked = Mask(routed(pkt, ECMP_PORTS[0], 1))
            masked.set_do_not_care_scapy(Ether, "src")
            masked.set_do_not_care_scapy(Ether, "dst")
            idx, _ = tu.verify_packet_any_port(self, masked, list(ECMP_PORTS))
            choices[sport] = ECMP_PORTS[idx]
        assert set(choices.values()) == set(ECMP_PORTS), choices
        tu.verify_no_other_packets(self)


class NonIpDropped(RoceSwitchTest):
    def runTest(self) -> None:
        before = self.counter("RoceIngress.drops", 2 * 16 + 1)[0]
        tu.send_packet(self, 2, Ether(dst="ff:ff:ff:ff:ff:ff", src=SRC_MAC) / ARP(pdst=H1))
        tu.verify_no_other_packets(self)
        assert self.counter("RoceIngress.drops", 2 * 16 + 1)[0] == before + 1
        # still forwarding
        pkt = udp_pkt()
        tu.send_packet(self, 2, pkt)
        tu.verify_packet(self, routed(pkt, 1, 2), 1)


class PlugsDroppedUnderNoReason(RoceSwitchTest):
    """Plugs (testbed.machine.ports.plug_sizes): 9014-byte frames of the agents' EtherType.
    A neighbour's crossed the link: rx_port counts it, as the veth does, and it is dropped
    under no drop reason (it is no fault; a drop reason would flag the run). The switch's own,
    from the port's MAC, is what BMv2's packet socket saw the agent send out of the port: it
    never arrived, so rx_port does not count it, or the hidden loss would come out negative.
    Mode ib-credit's credit frames (traffic.credits), which the agents send out of their ports
    as they send plugs, are told apart the same way."""

    def runTest(self) -> None:
        from testbed.config.constants import ETH_P_KICK, NUM_DROP_REASONS
        from traffic.wire import CREDIT_DST_MAC, ETH_P_CREDIT

        cells = [2 * NUM_DROP_REASONS + r for r in range(NUM_DROP_REASONS)]
        before = [self.counter("RoceIngress.drops", c)[0] for c in cells]
        rx = self.counter("RoceIngress.rx_port", 2)[0]
        for etype, dst, size in ((ETH_P_KICK, "02:02:02:02:02:02", 9014),
                                 (ETH_P_CREDIT, CREDIT_DST_MAC, 60)):
            for src, counted in ((PEER_MAC[2], 1), (SW_MAC[2], 0)):
                frame = Ether(dst=dst, src=src, type=etype) / (b"\x00" * (size - 14))
                tu.send_packet(self, 2, frame)
                tu.verify_no_other_packets(self)
                assert self.counter("RoceIngress.rx_port", 2)[0] == rx + counted, (etype, src)
                rx += counted
        assert [self.counter("RoceIngress.drops", c)[0] for c in cells] == before


class TruncatedPackets(RoceSwitchTest):
    """Frames cut inside the IPv4, UDP and BTH headers: dropped or forwarded, never a crash."""

    def runTest(self) -> None:
        full = bytes(udp_pkt(payload_len=0))
        before = self.counter("RoceIngress.drops", 2 * 16 + 2)[0]
        for cut in (14 + 10, 14 + 20 + 4, 14 + 20 + 8 + 6):
            tu.send_packet(self, 2, full[:cut] + b"")
        # cut in the IPv4 header: parse error, counted (BMv2 works asynchronously: wait)
        import time

        deadline = time.monotonic() + 2
        while self.counter("RoceIngress.drops", 2 * 16 + 2)[0] <= before:
            assert time.monotonic() < deadline, "truncated IPv4 not counted as a parse error"
            time.sleep(0.05)
        # a bare Ethernet header claiming IPv4 (the kernel refuses anything shorter)
        tu.send_packet(self, 2, bytes(Ether(dst=SW_MAC[2], src=SRC_MAC, type=0x0800)))
        self.dataplane.flush()
        pkt = udp_pkt()
        tu.send_packet(self, 2, pkt)
        tu.verify_packet(self, routed(pkt, 1, 2), 1)
        assert self.sess.client is not None and self.sess.read_counter("RoceIngress.rx_port")


class BadChecksumDropped(RoceSwitchTest):
    def runTest(self) -> None:
        pkt = udp_pkt()
        pkt[IP].chksum = 0x1234
        before = self.counter("RoceIngress.drops", 2 * 16 + 6)[0]
        tu.send_packet(self, 2, pkt)
        tu.verify_no_other_packets(self)
        assert self.counter("RoceIngress.drops", 2 * 16 + 6)[0] == before + 1


class PfcConsumed(RoceSwitchTest):
    """A PFC frame is counted per enabled class and never forwarded."""

    def runTest(self) -> None:
        before3 = self.counter("RoceIngress.pfc_rx", cell(4, 3))[0]
        before0 = self.counter("RoceIngress.pfc_rx", cell(4, 0))[0]
        frame = Ether(dst=PFC_DST_MAC, src=SRC_MAC, type=ETH_P_MAC_CONTROL) / \
            MACControlClassBasedFlowControl(_reserved=0, c3_enabled=1, c3_pause_time=100)
        tu.send_packet(self, 4, frame)
        tu.verify_no_other_packets(self)
        assert self.counter("RoceIngress.pfc_rx", cell(4, 3))[0] == before3 + 1
        assert self.counter("RoceIngress.pfc_rx", cell(4, 0))[0] == before0


def tick(port: int, tc: int, backlog: int) -> bytes:
    from testbed.agent import tick_frame

    return tick_frame("02:00:00:00:00:fe", port, tc, backlog)


def profile(tc: int = 3, rate: float = SLOW_MBPS):
    from testbed.topology.qos import queue_profiles

    return queue_profiles(FabricConfig().qos, rate)[tc]


class EcnMarkingFollowsRed(RoceSwitchTest):
    """At a held queue length the CE fraction follows RED (Kmin, Kmax, Pmax) at three points;
    above Kmax every ECT packet is marked; non-ECT packets are never marked."""

    N = 300

    def fraction(self, backlog: int, ecn: int = 1) -> float:
        # The queue at this level before the first packet: a tick and a data packet come in on
        # different ports, which BMv2 reads on different threads, so a packet can overtake its
        # tick and see the level the previous point left (Kmax + 1000 before the last point:
        # one mark in 300 on the default build, whose pipeline is slower).
        tu.send_packet(self, AGENT_PORT, tick(SLOW_PORT, 3, backlog))
        time.sleep(0.2)
        marked = 0
        for i in range(self.N):
            tu.send_packet(self, AGENT_PORT, tick(SLOW_PORT, 3, backlog))
            pkt = udp_pkt(dst=SLOW_NET_HOST, ecn=ecn, sport=49152 + i % 64)
            tu.send_packet(self, 1, pkt)
            res = tu.dp_poll(self, device_number=0, port_number=SLOW_PORT, timeout=2)
            assert isinstance(res, self.dataplane.PollSuccess), "packet not forwarded"
            if Ether(res.packet)[IP].tos & 3 == 3:
                marked += 1
        return marked / self.N

    def runTest(self) -> None:
        p = profile()
        length = len(udp_pkt())
        results = []
        for frac in (0.25, 0.5, 0.75):
            backlog = int(p.kmin + frac * (p.kmax - p.kmin))
            expect = p.pmax * (backlog + length - p.kmin) / (p.kmax - p.kmin)
            got = self.fraction(backlog)
            results.append((backlog, expect, got))
            # binomial: 300 samples, p <= 0.2 -> sd <= 0.023; 3 sd
            assert abs(got - expect) <= 0.07, results
        assert self.fraction(p.kmax + 1000) == 1.0
        assert self.fraction(p.kmax + 1000, ecn=0) == 0.0
        assert self.fraction(max(p.kmin - 2 * length, 0)) == 0.0
        print("ECN operating points (backlog, expected, measured):", results)


def expect_pfc(test: RoceSwitchTest, port: int, quanta: int, cause=(SLOW_PORT, 3)):
    """The PFC frame for class 3 on ``port``, which names the queue (port, class) on whose
    account it was sent, where the switch agent reads it (testbed.agent.frames.pfc_cause)."""
    from testbed.agent.frames import pfc_cause

    res = tu.dp_poll(test, device_number=0, port_number=port, timeout=2)
    assert isinstance(res, test.dataplane.PollSuccess), f"no PFC frame on port {port}"
    f = Ether(res.packet)
    assert f.dst == PFC_DST_MAC and f.type == ETH_P_MAC_CONTROL, f.summary()
    c = f[MACControlClassBasedFlowControl]
    assert c.c3_enabled == 1 and c.c3_pause_time == quanta, c.show(dump=True)
    assert c.c0_enabled == 0 and c.c6_enabled == 0
    assert f.src == SW_MAC[port]
    assert pfc_cause(res.packet) == cause, res.packet.hex()
    return res.packet


class PfcGeneration(RoceSwitchTest):
    """Over XOFF the switch pauses the port a lossless packet came from (once per refresh
    interval); when a tick finds the queue under XON, it resumes exactly the ports it paused.
    tshark decodes the frames as PFC with the right class vector and quanta."""

    def runTest(self) -> None:
        p = profile()
        frames = []
        tu.send_packet(self, AGENT_PORT, tick(SLOW_PORT, 3, p.xoff + 1000))
        tu.verify_no_other_packets(self)  # nobody paused yet: the tick is dropped
        for port in (2, 3):
            pkt = udp_pkt(dst=SLOW_NET_HOST, dscp=26, ecn=0)
            tu.send_packet(self, port, pkt)
            frames.append(expect_pfc(self, port, p.pause_quanta))
            tu.verify_packet(self, routed(pkt, SLOW_PORT, port), SLOW_PORT)
        # within the refresh interval: forwarded, no second XOFF
        pkt = udp_pkt(dst=SLOW_NET_HOST, dscp=26, ecn=0)
        tu.send_packet(self, 2, pkt)
        tu.verify_packet(self, routed(pkt, SLOW_PORT, 2), SLOW_PORT)
        tu.verify_no_other_packets(self)
        # lossy class 0 over XOFF: never pauses anyone
        pkt0 = udp_pkt(dst=SLOW_NET_HOST, dscp=0, ecn=0)
        tu.send_packet(self, 4, pkt0)
        tu.verify_packet(self, routed(pkt0, SLOW_PORT, 4), SLOW_PORT)
        tu.verify_no_other_packets(self)
        # the queue drains under XON: XON to ports 2 and 3 only
        tu.send_packet(self, AGENT_PORT, tick(SLOW_PORT, 3, 0))
        frames.append(expect_pfc(self, 2, 0))
        frames.append(expect_pfc(self, 3, 0))
        tu.verify_no_other_packets(self)
        assert self.counter("RoceEgress.pfc_egress.pfc_tx", cell(2, 3))[0] >= 2
        self._tshark(frames)

    def _tshark(self, frames) -> None:
        import shutil
        import subprocess
        import tempfile

        from scapy.utils import wrpcap

        if shutil.which("tshark") is None:
            return
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/pfc.pcap"
            wrpcap(path, [Ether(f) for f in frames])
            out = subprocess.run(
                ["tshark", "-r", path, "-T", "fields", "-e", "macc.opcode", "-e",
                 "macc.cbfc.enbv", "-e", "macc.cbfc.pause_time.c3", "-e", "_ws.malformed"],
                capture_output=True, text=True).stdout.split("\n")
        rows = [r.split("\t") for r in out if r.strip()]
        quanta = profile().pause_quanta
        assert [r[2] for r in rows] == [str(quanta), str(quanta), "0", "0"], rows
        assert all(r[0] in ("0x0101", "257") and int(r[1], 0) == 0x08 for r in rows), rows
        assert all(len(r) < 4 or not r[3] for r in rows), rows


class XoffRenewalFollowsTheIngressLink(RoceSwitchTest):
    """An XOFF lasts its quanta times 512 bit times of the link it goes out on, so while a
    queue stays over XOFF the switch renews it at that link's pace: toward the 400 Mbit/s port
    (an 84 ms pause, renewed after 42 ms) within this test, toward a 10 Mbit/s port (3.4 s)
    not. Renewed at the congested queue's own pace (the 10 kbit/s port's), the fast port's
    pause would lapse while the queue was still full, and its sender flood the buffer."""

    def runTest(self) -> None:
        from testbed.topology.qos import pause_renewal_us

        p = profile()
        tu.send_packet(self, AGENT_PORT, tick(SLOW_PORT, 3, p.xoff + 1000))
        tu.verify_no_other_packets(self)

        def send(port: int):
            pkt = udp_pkt(dst=SLOW_NET_HOST, dscp=26, ecn=0)
            tu.send_packet(self, port, pkt)
            return pkt

        for port in (FAST_PORT, 2):
            pkt = send(port)
            expect_pfc(self, port, p.pause_quanta)
            tu.verify_packet(self, routed(pkt, SLOW_PORT, port), SLOW_PORT)
        renewal_s = pause_renewal_us(FabricConfig().qos, FAST_MBPS) / 1e6
        assert renewal_s < 0.05
        time.sleep(2 * renewal_s)  # past the fast port's renewal, far inside port 2's
        for port in (FAST_PORT, 2):
            pkt = send(port)
            tu.verify_packet(self, routed(pkt, SLOW_PORT, port), SLOW_PORT)
        expect_pfc(self, FAST_PORT, p.pause_quanta)
        tu.verify_no_other_packets(self)  # none toward port 2


class ForgedTickDropped(RoceSwitchTest):
    """A tick from anywhere but the agent's port is dropped."""

    def runTest(self) -> None:
        tu.send_packet(self, 1, tick(SLOW_PORT, 3, 10**6))
        tu.verify_no_other_packets(self)


class PauseBringsThePhantomUpToDate(RoceSwitchTest):
    """A pause freezes the phantom as it stands when the pause begins, drained until then: not
    as it stood at its last packet or tick (which overstated the queue by the port's rate times
    that gap, at every pause)."""

    def runTest(self) -> None:
        port, backlog, gap_s = 2, 200_000, 0.1  # a 10 Mbit/s port drains 125 KB in 0.1 s
        tu.send_packet(self, AGENT_PORT, tick(port, 3, backlog))
        time.sleep(gap_s)
        frame = Ether(dst=PFC_DST_MAC, src=SRC_MAC, type=ETH_P_MAC_CONTROL) / \
            MACControlClassBasedFlowControl(_reserved=0, c3_enabled=1, c3_pause_time=65535)
        tu.send_packet(self, port, frame)
        tu.verify_no_other_packets(self)
        try:
            q = self.bm.bm_register_read(0, "q_bytes", cell(port, 3))
            # drained for at least most of the gap (the frames' own delays only add to it)
            assert q <= backlog - 10e6 / 8 * gap_s * 0.8, q
            assert self.bm.bm_register_read(0, "paused_until", cell(port, 3)) > \
                self.bm.bm_register_read(0, "q_time", cell(port, 3))
        finally:
            self.bm.bm_register_write(0, "paused_until", cell(port, 3), 0)


class PauseDrainsWhatTheClosingGateLetsThrough(RoceSwitchTest):
    """A pause that begins drains the phantom by what the kernel gate lets through as it
    closes (two 4 KB RoCE frames at a 9000-byte MTU), as the kernel queue does; a PFC frame
    that refreshes the pause in force drains nothing more."""

    def runTest(self) -> None:
        from testbed.topology.qos import gate_leak_roce_bytes

        leak = gate_leak_roce_bytes(FabricConfig().fabric.mtu)
        assert leak == 2 * 4170
        port, backlog = SLOW_PORT, 100_000  # 10 kbit/s: 1.25 bytes a millisecond
        pause = Ether(dst=PFC_DST_MAC, src=SRC_MAC, type=ETH_P_MAC_CONTROL) / \
            MACControlClassBasedFlowControl(_reserved=0, c3_enabled=1, c3_pause_time=65535)
        tu.send_packet(self, AGENT_PORT, tick(port, 3, backlog))
        # BMv2 may take frames from two ports in either order: the tick must be in first
        tu.verify_no_other_packets(self)
        tu.send_packet(self, port, pause)
        tu.verify_no_other_packets(self)
        try:
            q = self.bm.bm_register_read(0, "q_bytes", cell(port, 3))
            assert backlog - leak - 1500 <= q <= backlog - leak, q  # under a second's drain
            tu.send_packet(self, port, pause)
            tu.verify_no_other_packets(self)
            assert self.bm.bm_register_read(0, "q_bytes", cell(port, 3)) == q
        finally:
            self.bm.bm_register_write(0, "paused_until", cell(port, 3), 0)


class WatchdogIgnoredPfc(RoceSwitchTest):
    """Where the agent's watchdog has a queue ignore PFC (register pfc_ignored), a received
    pause leaves the phantom draining; other classes on the port still pause."""

    def runTest(self) -> None:
        bm = self.bm
        port = 3
        bm.bm_register_write(0, "pfc_ignored", cell(port, 3), 1)
        try:
            frame = Ether(dst=PFC_DST_MAC, src=SRC_MAC, type=ETH_P_MAC_CONTROL) / \
                MACControlClassBasedFlowControl(_reserved=0, c3_enabled=1, c3_pause_time=1000,
                                                c0_enabled=1, c0_pause_time=1000)
            before = self.counter("RoceIngress.pfc_rx", cell(port, 3))[0]
            tu.send_packet(self, port, frame)
            tu.verify_no_other_packets(self)
            assert self.counter("RoceIngress.pfc_rx", cell(port, 3))[0] == before + 1
            assert bm.bm_register_read(0, "paused_until", cell(port, 3)) == 0
            assert bm.bm_register_read(0, "paused_until", cell(port, 0)) > 0
        finally:
            bm.bm_register_write(0, "pfc_ignored", cell(port, 3), 0)
            bm.bm_register_write(0, "paused_until", cell(port, 0), 0)


def table_key(ent) -> bytes:
    """A table entry's table and match, what P4Runtime identifies it by."""
    te = ent.table_entry
    return te.table_id.to_bytes(4, "big") + b"".join(m.SerializeToString() for m in te.match)


class ClassesSharingAPortDrainInPriorityOrder(RoceSwitchTest):
    """SONiC's layout: lossless classes 3 and 4, and class 5 above them (DSCP 46), each with a
    phantom on one port, which serves class 5 first, then 4, then 3 (strict priority). A class
    holds while a class above it has a backlog, to the byte, and drains with what the classes
    above leave once they are empty. Each used to drain at the port's full rate."""

    def timer_tick(self, port: int, tc: int) -> None:
        from testbed.config.constants import TICK_TIMER_ONLY

        tu.send_packet(self, AGENT_PORT, tick(port, tc, TICK_TIMER_ONLY))
        tu.verify_no_other_packets(self)

    def phantoms(self, port: int) -> dict[int, int]:
        return {tc: self.bm.bm_register_read(0, "q_bytes", cell(port, tc)) for tc in (3, 4, 5)}

    def runTest(self) -> None:
        from testbed.control.entries import lossless_entries

        one = {table_key(e): e for e in lossless_entries(self.b, switch(), FabricConfig())}
        three = lossless_entries(self.b, switch(), FabricConfig.model_validate(
            {"qos": {"profile": "sonic"}}))
        changed = [e for e in three if table_key(e) in one and one[table_key(e)] != e]
        new = [e for e in three if table_key(e) not in one]
        assert changed and new
        self.sess.write(changed, p4runtime_pb2.Update.MODIFY)
        self.sess.write(new, p4runtime_pb2.Update.INSERT)
        # a 10 Mbit/s port drains 125 KB in 0.1 s, a megabyte in 0.8 s: longer than each step
        # (its waits for no other packet included)
        port, backlog, big, rate = 2, 200_000, 1_000_000, 10e6 / 8  # bytes a second
        try:
            for tc, b in ((5, big), (4, big), (3, backlog)):
                tu.send_packet(self, AGENT_PORT, tick(port, tc, b))
            tu.verify_no_other_packets(self)
            time.sleep(0.1)
            self.timer_tick(port, 3)
            q = self.phantoms(port)
            assert 0 < q[5] <= big - rate * 0.1 * 0.8, q  # class 5 has the port
            assert (q[4], q[3]) == (big, backlog), q  # and the classes below none of it
            # class 5 found empty by its resync: class 4 has the port, class 3 still none
            tu.send_packet(self, AGENT_PORT, tick(port, 5, 0))
            tu.verify_no_other_packets(self)
            time.sleep(0.1)
            self.timer_tick(port, 3)
            q = self.phantoms(port)
            assert 0 < q[4] <= big - rate * 0.1 * 0.8, q
            assert q[3] == backlog, q
            # class 4 found empty too: from then on class 3 has the port
            tu.send_packet(self, AGENT_PORT, tick(port, 4, 0))
            tu.verify_no_other_packets(self)
            time.sleep(0.1)
            self.timer_tick(port, 3)
            q = self.phantoms(port)
            assert q[3] <= backlog - rate * 0.1 * 0.8, q
        finally:
            self.sess.write([one[table_key(e)] for e in changed], p4runtime_pb2.Update.MODIFY)
            self.sess.write(new, p4runtime_pb2.Update.DELETE)
