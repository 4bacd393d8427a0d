"""The tester's counters (testbed.analysis.tester) and the conformance checks that hold them
against the switches' (testbed.conformance.checks): hand-made endpoint snapshots and switch
counters, each packet counted in the class it travelled in."""

from __future__ import annotations

from testbed.analysis.tester import (
    FlowQps,
    build_tester,
    frame_mismatches,
    pfc_mismatches,
    total_counted,
)
from testbed.conformance import checks as c
from traffic.endpoint_telemetry import STATS_COLUMNS, EndpointStats


def _snapshots() -> dict[str, dict]:
    """h3 writes h1 over two QPs (data in class 3, ACKs in class 5), CNPs in
    class 6; h1 was paused 4 times on class 3 and once on class 4; h2 stormed class 3 twice."""
    pfc = [0] * 8
    return {
        "h3": {"qps": {"11": {"packets_sent": 100, "retransmitted": 4, "acks": 30, "naks": 1,
                              "cnps_received": 5},
                       "12": {"packets_sent": 50, "acks": 10, "cnps_received": 2}},
               "stats": {"pfc_rx_by_class": pfc, "pfc_tx_by_class": pfc}},
        "h1": {"qps": {"21": {"packets": 95, "duplicates": 2, "out_of_order": 3, "ce_marked": 7,
                              "acks_sent": 31, "naks_sent": 1, "cnps_sent": 5},
                       "22": {"packets": 50, "acks_sent": 10, "cnps_sent": 2}},
               "stats": {"pfc_rx_by_class": [0, 0, 0, 4, 1, 0, 0, 0],
                         "pfc_tx_by_class": pfc}},
        "h2": {"qps": {}, "stats": {"pfc_rx_by_class": pfc,
                                    "pfc_tx_by_class": [0, 0, 0, 2, 0, 0, 0, 0]}},
    }


def _view(leaf_sent_h1: int = 4, leaf_got_h2: int = 2, to_h1: int = 150) -> dict:
    flows = [FlowQps("h3", "h1", tc=3, ack_tc=5, pairs=((11, 21), (12, 22)))]
    ports = {"h1": ("leaf1", 1), "h2": ("leaf1", 2), "h3": ("leaf2", 1)}
    pfc_tx = {"leaf1": {(1, 3): leaf_sent_h1, (1, 4): 1, (3, 3): 50}}  # port 3: an uplink
    pfc_rx = {"leaf1": {(2, 3): leaf_got_h2}}
    ecn = {"leaf1": {(1, 3): 6}, "spine1": {(1, 3): 3}}
    # every frame per port and class: h3's 150 data frames in at leaf2, out to h1 at leaf1;
    # h1's 42 ACK/NAK frames (class 5) in at leaf1; the uplinks' counts are not the hosts'
    tx_tc = {"leaf1": {(1, 3): to_h1, (3, 5): 42}, "leaf2": {(1, 5): 41}}
    rx_tc = {"leaf1": {(1, 5): 42, (3, 3): 150}, "leaf2": {(1, 3): 150}}
    return build_tester(flows, _snapshots(), 6, ports, pfc_tx, pfc_rx, ecn, tx_tc, rx_tc)


def test_each_packet_is_counted_in_the_class_it_travelled_in() -> None:
    v = _view()
    h3, h1 = v["hosts"]["h3"], v["hosts"]["h1"]
    assert (h3["3"]["data_sent"], h3["3"]["retransmitted"]) == (150, 4)
    assert (h3["5"]["acks_received"], h3["5"]["naks_received"]) == (40, 1)  # the ack class
    assert h3["6"]["cnps_received"] == 7 and set(h3) == {"3", "5", "6"}
    assert (h1["3"]["data_received"], h1["3"]["sequence_errors"], h1["3"]["ce_received"]) \
        == (150, 3, 7)  # in order, duplicates and out of sequence: every arrival
    assert (h1["5"]["acks_sent"], h1["5"]["naks_sent"], h1["6"]["cnps_sent"]) == (41, 1, 7)
    assert (h1["3"]["pfc_received"], h1["4"]["pfc_received"]) == (4, 1)
    assert v["hosts"]["h2"] == {"3": {**dict.fromkeys(h1["3"], 0), "pfc_sent": 2}}
    # the switch side: only the host's own port, never an uplink's 50 frames
    zero = {"pfc_sent": 0, "pfc_received": 0, "frames_sent": 0, "frames_received": 0}
    assert v["ports"] == {"h1": {"3": {**zero, "pfc_sent": 4, "frames_sent": 150},
                                 "4": {**zero, "pfc_sent": 1},
                                 "5": {**zero, "frames_received": 42}},
                          "h2": {"3": {**zero, "pfc_received": 2}},
                          "h3": {"3": {**zero, "frames_received": 150},
                                 "5": {**zero, "frames_sent": 41}}}
    assert v["ce_marked_by_class"] == {"3": 9}
    assert total_counted(v, 3, "ce_received") == 7 and total_counted(v, 6, "cnps_sent") == 7


def test_the_pfc_check_passes_when_every_host_port_matches_and_names_the_one_that_does_not(
        ) -> None:
    assert pfc_mismatches(_view(), 3) == (6, 6, [])
    ok = c.tester_pfc_matches(3)({"tester": _view()})
    assert ok.ok and "switch ports 6, tester 6" in ok.measured
    off = c.tester_pfc_matches(3)({"tester": _view(leaf_sent_h1=5)})
    assert not off.ok and "h1: switch 5, tester 4 PFC frames to the host" in off.measured
    lost = c.tester_pfc_matches(3)({"tester": _view(leaf_got_h2=1)})
    assert not lost.ok and "h2: switch 1, tester 2 PFC frames from the host" in lost.measured
    none = c.tester_pfc_matches(3)({"tester": _view(leaf_sent_h1=0, leaf_got_h2=0) | {
        "hosts": {}}})
    assert not none.ok  # no PFC at all is not "PFC seen"
    assert not c.tester_pfc_matches(3)({}).ok  # unknown is not ok


def test_ce_and_cnp_checks() -> None:
    v = _view()
    assert c.tester_ce(3)({"tester": v}).ok
    assert not c.tester_ce(3)({"tester": v | {"ce_marked_by_class": {"3": 6}}}).ok  # 7 > 6
    assert not c.tester_ce(4)({"tester": v}).ok  # none seen
    assert c.tester_cnps({"tester": v}).measured == "class 6: 7 sent, 7 received"
    v["hosts"]["h3"]["6"]["cnps_received"] = 6
    assert not c.tester_cnps({"tester": v}).ok
    assert not c.tester_cnps({}).ok


def test_the_endpoint_counts_pfc_per_class_beside_its_total() -> None:
    stats = EndpointStats()
    assert stats.pfc_rx_by_class == [0] * 8 and stats.pfc_tx_by_class == [0] * 8
    assert {"pfc_rx_by_class", "pfc_tx_by_class"} <= {n for n, _ in STATS_COLUMNS}


def test_the_frame_check_holds_every_frame_of_a_lossless_class_against_the_switch() -> None:
    """Class 3 carried h3's data to h1: 150 frames in at h3's port and 150 out at h1's, as
    both hosts counted them. One frame the switch sent h1 and h1 never counted fails it, with
    the host named; so does a class with no frame at all, and no tester."""
    assert frame_mismatches(_view(), 3) == (300, 300, [])
    ok = c.tester_frames_match(3)({"tester": _view()})
    assert ok.ok and "switch ports 300, tester 300 frames" in ok.measured
    lost = c.tester_frames_match(3)({"tester": _view(to_h1=151)})
    assert not lost.ok and "h1: switch 151, tester 150 frames to the host" in lost.measured
    # class 5, the ACK class: h1 sent 41 ACKs and a NAK, which h3 counted as 40 and 1
    assert frame_mismatches(_view(), 5) == (83, 83, [])
    assert not c.tester_frames_match(4)({"tester": _view()}).ok  # nothing in class 4
    assert not c.tester_frames_match(3)({}).ok  # unknown is not ok


def test_a_duplicate_is_acked_and_the_ack_is_counted() -> None:
    """The responder ACKs a duplicate again (its requester missed the first ACK): the tester's
    ACK counter counts every ACK on the wire, or the frame check would miss one."""
    from traffic.packets import ParsedRoce
    from traffic.qp import Responder

    r = Responder(qpn=21, dqpn=11)
    first = ParsedRoce(addrs=bytes(8), ecn=0, src_port=49152, opcode=10, becn=False, dqpn=21,
                       ack_req=True, psn=0, payload=b"")
    assert r.on_data(first) is not None and r.stats.acks_sent == 1
    assert r.on_data(first) is not None  # again: a duplicate
    assert (r.stats.duplicates, r.stats.acks_sent) == (1, 2)
