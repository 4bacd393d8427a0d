"""Per-queue QoS numbers derived from the config, a port's link rate and the fabric's MTU.

Every number the data plane, the kernel port and the hosts need (buffer, XOFF, XON, headroom,
ECN profile as fixed-point, pause time of the quanta, frame sizes and the RoCE path MTU, the
hosts' DSCPs) comes from here, so the P4 tables, the qdiscs, the endpoints and the docs agree.
:func:`check_qos` names each threshold that cannot work on the fabric's links;
:func:`port_specs` gives a switch's ports in the kernel (rate, class buffers, DSCP map).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.config.credit import MAX_CREDIT_BUFFER_BYTES
from testbed.config.models import FabricConfig, FabricShape, QosConfig
from testbed.config.phantoms import phantom_classes
from testbed.machine.ports import PortSpec, gate_burst_bytes
from testbed.topology.graph import Topology, intf_name
from traffic.wire import (
    ETH_HEADER_LEN,
    NUM_TCS,
    PFC_QUANTUM_BITS,
    ROCE_PACKET_OVERHEAD,
)

#: The interface MTU of a config that does not name one: FabricShape's default, one definition.
DEFAULT_MTU: int = FabricShape.model_fields["mtu"].default
#: The path MTUs an RDMA NIC can use (IBTA: 256..4096 bytes of payload per packet).
IB_MTUS = (256, 512, 1024, 2048, 4096)


def roce_mtu(mtu: int) -> int:
    """The RoCE path MTU an interface MTU carries: the largest IB MTU whose packet with every
    header fits (the Ethernet header rides outside the interface MTU), as a NIC derives its
    active_mtu from the netdev's. 9000 -> 4096, 4156 -> 4096, 1500 -> 1024."""
    fits = [m for m in IB_MTUS if m + ROCE_PACKET_OVERHEAD <= mtu]
    if not fits:
        raise ValueError(f"an interface MTU of {mtu} carries no RoCE packet (at least "
                         f"{IB_MTUS[0] + ROCE_PACKET_OVERHEAD} bytes)")
    return fits[-1]


def roce_frame_bytes(mtu: int = DEFAULT_MTU) -> int:
    """The largest RoCE frame on the wire, Ethernet header included, at this interface MTU."""
    return roce_mtu(mtu) + ROCE_PACKET_OVERHEAD + ETH_HEADER_LEN


def max_frame_bytes(mtu: int = DEFAULT_MTU) -> int:
    """The largest frame an interface of this MTU carries (what a port's gate must admit)."""
    return mtu + ETH_HEADER_LEN


def gate_leak_bytes(mtu: int = DEFAULT_MTU) -> int:
    """What an upstream gate lets through as it closes: its burst, the largest frame the fabric
    carries (a 9000-byte MTU admits two RoCE frames), as testbed.machine.ports sets it. A real MAC
    finishes one frame instead."""
    return gate_burst_bytes(max_frame_bytes(mtu))


def gate_leak_roce_bytes(mtu: int = DEFAULT_MTU) -> int:
    """What a closing gate lets through of a lossless queue of full-size RoCE frames: the whole
    frames its burst holds (tbf sends a frame while its tokens cover it), two at a 9000-byte
    MTU, one at 1500. The P4 phantom drains this as a pause begins; the headroom counts the
    whole burst (:func:`gate_leak_bytes`), the worst case of any mix of frames."""
    frame = roce_frame_bytes(mtu)
    return gate_leak_bytes(mtu) // frame * frame


#: The most a lossless queue's kernel limit grows to with the emulation's slack. Packets held in
#: a qdisc count against the sending socket's buffer (BMv2 sends on blocking sockets from one
#: thread, with net.core.wmem_default = 16 MiB set by the playbook), at about twice their size
#: (skb truesize): a limit of 4 MiB stays well under it, so the qdisc drops, visibly, before
#: the socket would block and stall the whole switch.
KERNEL_LIMIT_CAP_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class QueueProfile:
    tc: int
    buffer_bytes: int
    ecn: bool
    kmin: int
    kmax: int
    pmax: float
    pfc: bool
    xoff: int
    xon: int
    headroom: int
    pause_quanta: int
    kernel_limit: int  # the kernel queue's byte limit: the buffer, plus the emulation's slack
    phantom: bool = False  # the P4 program keeps a phantom of it (config.phantoms)

    @property
    def pmax_slope(self) -> int:
        """Marking probability per byte over kmin, scaled by 2^32 (the P4 program's form)."""
        return int(self.pmax * 2**32 / (self.kmax - self.kmin)) if self.ecn else 0


def quantum_us(rate_mbps: float) -> float:
    return PFC_QUANTUM_BITS / rate_mbps


def pause_renewal_us(qos: QosConfig, rate_mbps: float) -> int:
    """How often an XOFF sent on a link of this rate is renewed while its queue stays full:
    ``refresh_fraction`` of the pause it asks for, which lasts ``pause_quanta`` quanta of that
    link (IEEE 802.1Qbb). A switch renews each XOFF at the rate of the link it went out on, so
    a pause toward a fast link does not lapse while a slow queue is still full."""
    return int(qos.pfc.pause_quanta * quantum_us(rate_mbps) * qos.pfc.refresh_fraction)


def required_headroom(qos: QosConfig, rate_mbps: float, frame: int | None = None,
                      gate_leak: int | None = None, *, mtu: int = DEFAULT_MTU) -> int:
    """What one ingress port delivers after XOFF is sent: the round trip on the wire, a frame
    in flight at each end, what the upstream sends while it reacts (SONiC's headroom formula),
    and what the upstream's gate lets through as it closes. ``frame`` and ``gate_leak``
    default to what the interface ``mtu`` (fabric.mtu) makes them."""
    frame = roce_frame_bytes(mtu) if frame is None else frame
    gate_leak = gate_leak_bytes(mtu) if gate_leak is None else gate_leak
    bytes_per_us = rate_mbps / 8
    wire = 2 * bytes_per_us * qos.pfc.link_delay_us
    react = bytes_per_us * qos.pfc.reaction_ms * 1000
    return int(wire + 2 * frame + react + gate_leak)


def queue_profiles(qos: QosConfig, rate_mbps: float, frame: int | None = None,
                   fan_in: int = 1, *, mtu: int = DEFAULT_MTU) -> dict[int, QueueProfile]:
    """Profiles of one port's eight queues. ``fan_in``: how many ingress ports can feed them;
    each gets its own headroom, as real switches reserve headroom per ingress port. ``frame``
    defaults to the largest RoCE frame at the interface ``mtu`` (fabric.mtu)."""
    frame = roce_frame_bytes(mtu) if frame is None else frame
    out = {}
    headroom = qos.pfc.headroom_bytes or required_headroom(qos, rate_mbps, frame, mtu=mtu)
    phantoms = phantom_classes(qos)
    for tc in range(NUM_TCS):
        e = qos.ecn.get(tc)
        lossless = tc in qos.pfc_enable
        kmax = e.kmax_bytes if e else 0
        xoff = qos.pfc.xoff_bytes or (kmax + 2 * frame if e else qos.buffer_bytes // 2)
        xon = qos.pfc.xon_bytes if qos.pfc.xon_bytes is not None else max(xoff - 2 * frame, 0)
        # A lossless class holds XOFF plus headroom and no more: a drop there means the
        # headroom was too small, which is what a real switch would show too.
        buffer = xoff + headroom * fan_in if lossless else qos.buffer_bytes
        slack = int(rate_mbps / 8 * qos.pfc.emulation_slack_ms * 1000) * fan_in if lossless \
            else 0
        slack = min(slack, max(KERNEL_LIMIT_CAP_BYTES - buffer, 0))
        out[tc] = QueueProfile(
            tc=tc, buffer_bytes=buffer, ecn=e is not None, kmin=e.kmin_bytes if e else 0,
            kmax=kmax, pmax=e.pmax if e else 0.0, pfc=lossless, xoff=xoff, xon=xon,
            headroom=headroom, pause_quanta=qos.pfc.pause_quanta, kernel_limit=buffer + slack,
            phantom=tc in phantoms)
    return out


def check_qos(cfg: FabricConfig) -> list[str]:
    """One message per threshold that cannot work on this fabric's links."""
    q, mtu = cfg.qos, cfg.fabric.mtu
    problems = []
    for tier, rate in (("host_link_mbps", cfg.fabric.host_link_mbps),
                       ("fabric_link_mbps", cfg.fabric.fabric_link_mbps)):
        need = required_headroom(q, rate, mtu=mtu)
        if q.pfc.headroom_bytes is not None and q.pfc.headroom_bytes < need:
            problems.append(
                f"qos.pfc.headroom_bytes: {q.pfc.headroom_bytes} is too small for the round trip "
                f"of a {rate:g} Mbit/s link (fabric.{tier}): at least {need} bytes are in flight "
                f"after XOFF (2 frames of {roce_frame_bytes(mtu)} B at fabric.mtu {mtu} + rate x "
                f"reaction_ms {q.pfc.reaction_ms:g} + wire + the closing gate's "
                f"{gate_leak_bytes(mtu)} B)")
        for tc, p in queue_profiles(q, rate, mtu=mtu).items():
            if not p.pfc:
                continue
            if p.xoff + p.headroom > q.buffer_bytes:
                problems.append(
                    f"qos.pfc.xoff_bytes: {p.xoff} plus headroom {p.headroom} exceeds the class "
                    f"{tc} buffer qos.buffer_bytes ({q.buffer_bytes}): lower xoff_bytes or raise "
                    "buffer_bytes")
            if p.xon > p.xoff:
                problems.append(f"qos.pfc.xon_bytes: {p.xon} is above xoff_bytes {p.xoff}")
    return sorted(set(problems))


def endpoint_args(cfg: FabricConfig) -> list[str]:
    """What a host's NIC must know of the fabric, as traffic.endpoint arguments: the RoCE path
    MTU its interface carries, the DSCP of each class (as the switches classify it) and of
    CNPs, the CNP's class (which the NIC's own PFC pause must hold back), and in mode
    ib-credit the classes it sends only on its leaf's credit."""
    q = cfg.qos
    table = ",".join(f"{tc}={dscp}" for tc, dscp in sorted(q.tc_to_dscp().items()))
    credited = ["--credit-classes", ",".join(map(str, q.credit_enable))] \
        if q.credit_enable else []
    return ["--mtu", str(roce_mtu(cfg.fabric.mtu)), "--tc-dscp", table,
            "--cnp-dscp", str(q.cnp_dscp), "--cnp-tc", str(q.cnp_tc), *credited]


# -- a fabric's switch ports ------------------------------------------------------------------

def switch_queue_profiles(cfg: FabricConfig, topo: Topology, switch: str,
                          rate_mbps: float) -> dict[int, QueueProfile]:
    """A port's eight queue profiles on this switch: every other port may feed it."""
    fan_in = max(len(topo.switch(switch).ports) - 1, 1)
    return queue_profiles(cfg.qos, rate_mbps, fan_in=fan_in, mtu=topo.mtu)


def port_specs(cfg: FabricConfig, topo: Topology, switch: str) -> list[PortSpec]:
    """Each port of the switch in the kernel: its rate, the class buffers, the DSCP map, and
    in mode ib-credit the credited classes' FIFOs per input port (every port of the switch may
    feed every other, and itself on a bounce route), each of the largest credit buffer among
    the switch's links plus the emulation's slack, as PFC's lossless queues have it."""
    q = cfg.qos
    ports = topo.switch(switch).ports
    inputs = tuple(sorted(ports)) if q.credit_enable else ()
    input_limit = max((credit_buffer_bytes(q, p.rate_mbps, topo.mtu)
                       + int(p.rate_mbps / 8 * q.pfc.emulation_slack_ms * 1000)
                       for p in ports.values()), default=0) if inputs else 0
    return [PortSpec(intf_name(switch, p.number), p.rate_mbps,
                     tuple(prof.kernel_limit for prof in
                           switch_queue_profiles(cfg, topo, switch, p.rate_mbps).values()),
                     tuple(q.dscp_to_tc_map.items()), q.default_tc, max_frame_bytes(topo.mtu),
                     credited=tuple(q.credit_enable), inputs=inputs, input_limit=input_limit)
            for p in ports.values()]


def credit_buffer_bytes(qos: QosConfig, rate_mbps: float, mtu: int = DEFAULT_MTU) -> int:
    """Mode ib-credit's receive buffer per (input port, credited class) on a link of this
    rate: qos.credit.buffer_bytes, else what a PFC switch keeps for one ingress port of its
    lossless class (XOFF + headroom), at most what a credit limit reaches ahead."""
    if qos.credit.buffer_bytes is not None:
        return qos.credit.buffer_bytes
    tc = min(qos.credit_enable, default=3)
    prof = queue_profiles(qos, rate_mbps, mtu=mtu)[tc]
    return min(prof.xoff + prof.headroom, MAX_CREDIT_BUFFER_BYTES)


def credit_buffers(cfg: FabricConfig, topo: Topology) -> dict[tuple[str, int, int], int]:
    """Mode ib-credit: (switch, input port, class) -> the credit buffer of every credited
    class's input (what the switch advertises room for)."""
    q = cfg.qos
    return {(sw.name, p.number, tc): credit_buffer_bytes(q, p.rate_mbps, topo.mtu)
            for sw in topo.switches for p in sw.ports.values() for tc in q.credit_enable}


def lossless_buffers(cfg: FabricConfig, topo: Topology) -> dict[tuple[str, int, int], int]:
    """(switch, port, class) -> the configured buffer of every lossless queue (what a real
    switch with this headroom holds; the kernel limit adds the emulation's slack)."""
    return {(sw.name, p.number, tc): prof.buffer_bytes for sw in topo.switches
            for p in sw.ports.values()
            for tc, prof in switch_queue_profiles(cfg, topo, sw.name, p.rate_mbps).items()
            if prof.pfc}
