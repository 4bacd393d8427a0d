"""Per-queue QoS numbers derived from the config and a port's link rate.

Every number the data plane and the kernel port need (buffer, XOFF, XON, headroom, ECN profile
as fixed-point, pause time of the quanta) comes from here, so the P4 tables, the qdiscs and the
docs agree. :func:`check_qos` names each threshold that cannot work on the fabric's links.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.config import FabricConfig, QosConfig

ROCE_FRAME_BYTES = 4096 + 14 + 20 + 8 + 12 + 16 + 4  # RoCE MTU payload with every header
PFC_QUANTUM_BITS = 512


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
    refresh_us: int
    kernel_limit: int  # the kernel queue's byte limit: the buffer, plus the emulation's slack

    @property
    def pmax_slope(self) -> int:
        """Marking probability per byte over kmin, scaled by 2^32 (the P4 program's form)."""
        return int(self.pmax * 2**32 / (self.kmax - self.kmin)) if self.ecn else 0


def quantum_us(rate_mbps: float) -> float:
    return PFC_QUANTUM_BITS / rate_mbps


#: What an upstream gate lets through as it closes: its burst, the largest frame the fabric
#: carries (a 9000-byte MTU admits two RoCE frames). A real MAC finishes one frame instead.
GATE_LEAK_BYTES = 9014


def required_headroom(qos: QosConfig, rate_mbps: float, frame: int = ROCE_FRAME_BYTES,
                      gate_leak: int = GATE_LEAK_BYTES) -> int:
    """What one ingress port delivers after XOFF is sent: the round trip on the wire, a frame
    in flight at each end, what the upstream sends while it reacts (SONiC's headroom formula),
    and what the upstream's gate lets through as it closes."""
    bytes_per_us = rate_mbps / 8
    wire = 2 * bytes_per_us * qos.pfc.link_delay_us
    react = bytes_per_us * qos.pfc.reaction_ms * 1000
    return int(wire + 2 * frame + react + gate_leak)


def queue_profiles(qos: QosConfig, rate_mbps: float, frame: int = ROCE_FRAME_BYTES,
                   fan_in: int = 1) -> dict[int, QueueProfile]:
    """Profiles of one port's eight queues. ``fan_in``: how many ingress ports can feed them;
    each gets its own headroom, as real switches reserve headroom per ingress port."""
    out = {}
    headroom = qos.pfc.headroom_bytes or required_headroom(qos, rate_mbps, frame)
    pause_us = qos.pfc.pause_quanta * quantum_us(rate_mbps)
    for tc in range(8):
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
        out[tc] = QueueProfile(
            tc=tc, buffer_bytes=buffer, ecn=e is not None, kmin=e.kmin_bytes if e else 0,
            kmax=kmax, pmax=e.pmax if e else 0.0, pfc=lossless, xoff=xoff, xon=xon,
            headroom=headroom, pause_quanta=qos.pfc.pause_quanta,
            refresh_us=int(pause_us * qos.pfc.refresh_fraction), kernel_limit=buffer + slack)
    return out


def check_qos(cfg: FabricConfig) -> list[str]:
    """One message per threshold that cannot work on this fabric's links."""
    q = cfg.qos
    problems = []
    for tier, rate in (("host_link_mbps", cfg.fabric.host_link_mbps),
                       ("fabric_link_mbps", cfg.fabric.fabric_link_mbps)):
        need = required_headroom(q, rate)
        if q.pfc.headroom_bytes is not None and q.pfc.headroom_bytes < need:
            problems.append(
                f"qos.pfc.headroom_bytes: {q.pfc.headroom_bytes} is too small for the round trip "
                f"of a {rate:g} Mbit/s link (fabric.{tier}): at least {need} bytes are in flight "
                f"after XOFF (2 frames + rate x reaction_ms {q.pfc.reaction_ms:g} + wire)")
        for tc, p in queue_profiles(q, rate).items():
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
