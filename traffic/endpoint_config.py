"""The endpoint's configuration and command line: :class:`EndpointConfig` and the arguments of
``python -m traffic.endpoint`` (:func:`build_parser`, :func:`config_from_args`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from traffic.dcqcn import PROFILES
from traffic.qp import DEFAULT_RTO_S, local_ack_timeout_s
from traffic.wire import DSCP_CNP, DSCP_ROCE, LOCAL_ACK_TIMEOUT, NUM_TCS, RETRY_COUNT

#: DSCP for each traffic class when no table is given (run by hand): the class selectors, and
#: 26 for RoCE. The testbed passes its fabric's own (--tc-dscp, from qos.dscp_to_tc_map), so
#: that each class lands in that class at the switches.
TC_TO_DSCP = {tc: tc << 3 for tc in range(NUM_TCS)} | {3: DSCP_ROCE}
#: The class of CNPs when none is given: where DSCP_CNP lands in the fabric's default map.
CNP_TC = 6


@dataclass
class EndpointConfig:
    intf: str
    mac: str
    ip: str
    next_hop_mac: str
    line_rate_bps: float
    control_socket: Path
    out_dir: Path
    mtu: int = 4096  # RoCE path MTU: payload bytes per packet
    tc_to_dscp: dict[int, int] = field(default_factory=lambda: dict(TC_TO_DSCP))
    cnp_dscp: int = DSCP_CNP
    cnp_tc: int = CNP_TC  # the class the CNP's DSCP lands in: a pause of it holds CNPs back
    sample_period_s: float = 0.1
    cnp_interval_s: float | None = None  # default: the DCQCN profile's, scaled to the link
    dcqcn: dict = field(default_factory=dict)  # overrides of DcqcnParams.scaled
    dcqcn_profile: str = "paper"  # traffic.dcqcn.PROFILES: paper ([Z15]) or connectx
    dcqcn_enabled: bool = True
    rx_buffer_packets: int = 256  # slow-receiver queue before it drops
    #: Go-Back-N's retransmission timer (IB's Local ACK Timeout, scaled to the link:
    #: traffic.qp.local_ack_timeout_s), for QPs that do not set one
    rto_s: float = DEFAULT_RTO_S
    retry_count: int = RETRY_COUNT  # IB's retry_cnt: timeouts in a row before the QP fails
    t0_monotonic: float | None = None  # origin of t_s; the testbed passes the run's
    transport: str = "roce"  # roce, or tcp: the flows over the host's kernel TCP
    tcp_congestion: str = "cubic"  # TCP's congestion control (tcp(7) TCP_CONGESTION)
    tcp_ecn: bool = True  # RFC 3168 ECN on the host's TCP connections
    #: Mode ib-credit: the classes the NIC sends only on its leaf's credit (traffic.credits)
    credited: tuple[int, ...] = ()


def _tc_dscp_table(text: str) -> dict[int, int]:
    """``3=26,6=48`` -> {3: 26, 6: 48}, for --tc-dscp."""
    try:
        table = {int(tc): int(d) for tc, d in (kv.split("=") for kv in text.split(",") if kv)}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write TC=DSCP pairs, e.g. 3=26,6=48") \
            from None
    if not all(0 <= tc <= 7 and 0 <= d <= 63 for tc, d in table.items()):
        raise argparse.ArgumentTypeError(f"{text!r}: classes are 0..7, DSCPs 0..63")
    return table


def _classes(text: str) -> tuple[int, ...]:
    """``3`` or ``3,4``: traffic classes."""
    try:
        out = tuple(sorted({int(x) for x in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: classes as 3 or 3,4") from None
    if not all(0 <= c < NUM_TCS for c in out):
        raise argparse.ArgumentTypeError(f"{text!r}: classes are 0..7")
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m traffic.endpoint",
        description="RoCEv2 endpoint (RC QPs, Go-Back-N, DCQCN, PFC) on one interface.")
    ap.add_argument("--intf", required=True)
    ap.add_argument("--mac", required=True)
    ap.add_argument("--ip", required=True)
    ap.add_argument("--next-hop-mac", required=True, help="the leaf's (or peer's) MAC")
    ap.add_argument("--line-rate-mbps", type=float, default=10.0)
    ap.add_argument("--mtu", type=int, default=4096, help="RoCE path MTU (payload per packet); "
                    "the testbed derives it from fabric.mtu")
    ap.add_argument("--tc-dscp", type=_tc_dscp_table, default=dict(TC_TO_DSCP),
                    help="DSCP of each class the host may send, as TC=DSCP pairs, e.g. "
                         "0=0,3=26,6=48 (the testbed's comes from qos.dscp_to_tc_map); "
                         "default: the class selectors, and 26 for class 3")
    ap.add_argument("--cnp-dscp", type=int, default=DSCP_CNP, choices=range(64), metavar="DSCP",
                    help="DSCP of CNPs (qos.cnp_dscp)")
    ap.add_argument("--cnp-tc", type=int, default=CNP_TC, choices=range(NUM_TCS), metavar="TC",
                    help="class the CNP DSCP lands in: CNPs wait while it is paused")
    ap.add_argument("--control", type=Path, required=True, help="unix socket for commands")
    ap.add_argument("--out", type=Path, required=True, help="folder for the CSV time series")
    ap.add_argument("--sample-period", type=float, default=0.1)
    ap.add_argument("--cnp-interval", type=float, default=None)
    ap.add_argument("--no-dcqcn", action="store_true")
    ap.add_argument("--dcqcn-profile", choices=sorted(PROFILES), default="paper",
                    help="DCQCN parameters: paper (Zhu et al. 2015) or connectx (NVIDIA's "
                         "defaults), scaled to the link; also sets the receiver's CNP interval")
    ap.add_argument("--dcqcn", type=json.loads, default={},
                    help='DCQCN overrides as JSON, e.g. \'{"timer_period_s": 0.1}\'')
    ap.add_argument("--t0", type=float, default=None,
                    help="origin of t_s (CLOCK_MONOTONIC seconds), default: now")
    ap.add_argument("--local-ack-timeout", type=int, default=LOCAL_ACK_TIMEOUT,
                    choices=range(1, 32), metavar="N",
                    help="the QPs' retransmission timer, IB's Local ACK Timeout 4.096 us x 2^N, "
                         "scaled to the link as DCQCN's timers are (endpoints.local_ack_timeout)")
    ap.add_argument("--retry-count", type=int, default=RETRY_COUNT, choices=range(8),
                    metavar="N", help="IB's retry_cnt: timeouts in a row without progress "
                    "before a QP fails (endpoints.retry_count)")
    ap.add_argument("--transport", choices=("roce", "tcp"), default="roce",
                    help="tcp: carry the flows over the host's kernel TCP (mode tcp: "
                         "traffic.tcp_endpoint) instead of RoCE RC QPs")
    ap.add_argument("--tcp-congestion", default="cubic",
                    help="TCP's congestion control (one of the kernel's: "
                         "net.ipv4.tcp_available_congestion_control)")
    ap.add_argument("--no-tcp-ecn", action="store_true",
                    help="TCP without ECN (default: RFC 3168 ECN on)")
    ap.add_argument("--credit-classes", type=_classes, default=(),
                    help="classes sent only on the leaf's credit (mode ib-credit), e.g. 3 or "
                         "3,4 (qos.credit_enable)")
    ap.add_argument("--log", default="INFO")
    return ap


def config_from_args(a: argparse.Namespace) -> EndpointConfig:
    return EndpointConfig(
        intf=a.intf, mac=a.mac, ip=a.ip, next_hop_mac=a.next_hop_mac,
        line_rate_bps=a.line_rate_mbps * 1e6, control_socket=a.control, out_dir=a.out, mtu=a.mtu,
        tc_to_dscp=a.tc_dscp, cnp_dscp=a.cnp_dscp, cnp_tc=a.cnp_tc,
        sample_period_s=a.sample_period, cnp_interval_s=a.cnp_interval, dcqcn=a.dcqcn,
        dcqcn_enabled=not a.no_dcqcn, dcqcn_profile=a.dcqcn_profile, t0_monotonic=a.t0,
        rto_s=local_ack_timeout_s(a.local_ack_timeout, a.line_rate_mbps * 1e6),
        retry_count=a.retry_count, transport=a.transport, tcp_congestion=a.tcp_congestion,
        tcp_ecn=not a.no_tcp_ecn, credited=a.credit_classes)
