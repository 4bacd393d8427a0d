"""Typed, validated configuration of a fabric.

A fabric is described declaratively (containerlab style: defaults at the top, overrides where
needed) in YAML or by CLI flags; both end up in :class:`FabricConfig`. Every rate, size and
timer is a named field with a default and, in its description, its real-world counterpart, so
that a user can read the scale of the emulation off the config itself.

Bad input never produces a traceback: :mod:`testbed.topology.validate` turns a file or data into a
config or a :class:`ConfigError`, which carries one line per problem, each naming the field and
what is allowed. The models here check each field and the rules among fields;
:mod:`testbed.topology.validate` adds the checks that need the derived numbers
(:mod:`testbed.topology.qos`) or the built topology, so that this module imports neither.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from testbed.config.agent import PfcWatchdogConfig as PfcWatchdogConfig  # re-exported
from testbed.config.agent import SwitchAgentConfig as SwitchAgentConfig  # re-exported
from testbed.config.base import ConfigError as ConfigError  # re-exported: callers import it here
from testbed.config.base import _refuse, _Strict
from testbed.config.bmv2_build import BuildChoice
from testbed.config.constants import PFC_PORT_BITMAP_BITS
from testbed.config.credit import CreditConfig as CreditConfig  # re-exported
from testbed.config.fidelity import FidelityConfig as FidelityConfig  # re-exported
from testbed.config.phantoms import too_many_levels
from traffic.names import NAME_PATTERN
from traffic.wire import DSCP_CNP, DSCP_ROCE, NUM_TCS, PFC_MAX_QUANTA

#: Fields of the packet that ECMP may hash on. The UDP source port is the only per-QP entropy a
#: RoCEv2 flow carries, so leaving it out is how polarization is shown.
HashField = Literal["src_ip", "dst_ip", "ip_proto", "src_port", "dst_port"]
HASH_FIELDS: tuple[str, ...] = ("src_ip", "dst_ip", "ip_proto", "src_port", "dst_port")

#: Upper bounds of the address plan: hosts are 10.0.<leaf>.<host>, so both must fit in a byte
#: (254 hosts leaves room for the gateway .254); switch ports are 9-bit in v1model, 511 is drop.
MAX_LEAVES = 250
MAX_HOSTS_PER_LEAF = 250
MAX_SPINES = 64
MAX_PORTS = 510
#: PFC_PORT_BITMAP_BITS is the width of the P4 program's paused-ports bitmaps (``paused_by`` in
#: p4/lossless.p4, ``pfc_ports`` in p4/headers.p4): bit n stands for port n. Ports are numbered
#: from 1, so with PFC on a switch can have ports 1..63 and no more (a shift by 64 is 0 in P4:
#: port 64 could never be paused).
MAX_PFC_PORTS = PFC_PORT_BITMAP_BITS - 1
#: Every link's rate unless a scenario says otherwise (Mbit/s). The incasts run faithfully
#: faster (17.5-40, benchmarks/capacity.py); the shipped runs that load every link at once, the
#: deadlock runs, are at the edge here on two cores (benchmarks/scenario_rates.py).
DEFAULT_LINK_MBPS = 10.0
#: A watchdog port name: switch, colon, port number (e.g. leaf1:3).


class FabricShape(_Strict):
    """The leaf-spine graph and its link rates."""

    spines: int = Field(2, ge=0, le=MAX_SPINES, description="Spine switches. 0: a single "
                        "leaf and its hosts (SONiC's test plans' topology 1, one switch).")
    leaves: int = Field(4, ge=1, le=MAX_LEAVES, description="Leaf (top-of-rack) switches.")
    hosts_per_leaf: int = Field(
        2, ge=1, le=MAX_HOSTS_PER_LEAF, description="Hosts (NICs) below each leaf."
    )
    parallel_links: int = Field(
        1, ge=1, le=16, description="Links between each spine and each leaf (all used by ECMP)."
    )
    host_link_mbps: float = Field(
        DEFAULT_LINK_MBPS, gt=0, le=1000, description=(
            "Host-to-leaf link rate in Mbit/s. Real counterpart: 100-400 Gbit/s NIC ports; the "
            "emulation runs 10^4 times slower so that BMv2 on two cores keeps up. In a "
            "scenario, `auto`: the highest rate at which its flows' load fits this machine's "
            "measured budget (testbed calibrate; docs/BUDGET.md)."))
    fabric_link_mbps: float = Field(
        DEFAULT_LINK_MBPS, gt=0, le=1000,
        description="Leaf-to-spine link rate in Mbit/s (real: 100-800 Gbit/s); `auto` as "
        "host_link_mbps.")
    mtu: int = Field(
        9000,
        ge=1500,
        le=9216,
        description=(
            "Interface MTU in bytes. Jumbo frames carry the RoCE MTU of 4096 bytes, so the fabric "
            "spends its packet budget (BMv2 forwards packets, not bits) on few large frames."
        ),
    )

    @property
    def leaf_ports(self) -> int:
        """Ports of each leaf (numbered 1..this): its hosts, then its uplinks."""
        return self.hosts_per_leaf + self.spines * self.parallel_links

    @property
    def spine_ports(self) -> int:
        """Ports of each spine (numbered 1..this): one per leaf and parallel link."""
        return self.leaves * self.parallel_links

    @model_validator(mode="after")
    def _ports_fit(self) -> FabricShape:
        leaf_ports, spine_ports = self.leaf_ports, self.spine_ports
        if self.spines == 0 and self.leaves != 1:
            raise ValueError(
                f"spines: 0 with {self.leaves} leaves leaves them unconnected: several leaves "
                "need a spine (spines >= 1); for a single switch, use leaves: 1")
        if leaf_ports > MAX_PORTS:
            raise ValueError(
                f"a leaf would need {leaf_ports} ports (hosts_per_leaf + spines x parallel_links);"
                f" BMv2 ports are 9-bit, at most {MAX_PORTS}: use fewer hosts, spines or links"
            )
        if spine_ports > MAX_PORTS:
            raise ValueError(
                f"a spine would need {spine_ports} ports (leaves x parallel_links); at most "
                f"{MAX_PORTS}: use fewer leaves or parallel links"
            )
        return self


class EcmpConfig(_Strict):
    """How switches spread flows over equal-cost next hops."""

    hash_fields: list[HashField] = Field(
        default_factory=lambda: list(HASH_FIELDS),
        min_length=1,
        description=(
            "Packet fields in the ECMP hash. Real switches hash the 5-tuple; take src_port out "
            "and all QPs between two hosts share one path (polarization)."
        ),
    )
    seed: int | Literal["per_switch"] = Field(
        "per_switch",
        description=(
            "Hash seed. 'per_switch' gives each switch its own (as vendors randomise it); one "
            "integer for all switches reproduces the polarization of identical hash functions."
        ),
    )

    @field_validator("hash_fields")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("hash_fields lists a field twice; name each field once")
        return v

    @field_validator("seed", mode="before")
    @classmethod
    def _seed_range(cls, v: object) -> object:
        ok = v == "per_switch" or (isinstance(v, int) and not isinstance(v, bool)
                                   and 0 <= v <= 0xFFFF)
        if not ok:
            raise ValueError("seed must be an integer 0..65535 or 'per_switch'")
        return v


class SwitchConfig(_Strict):
    """How each BMv2 process runs."""

    log: bool = Field(
        False, description="Write a BMv2 log file per switch (slows BMv2 by about 10x)."
    )
    build: BuildChoice = Field(
        "auto", description="Which BMv2 build the switches run: 'fast' (configured with "
        "--disable-logging-macros --disable-elogger, -O3: half the instructions per packet, "
        "no packet log), 'default' (the p4lang packages' build, which can log), or "
        "'auto': the fast build when it is installed and switch.log is off. A real switch's "
        "pipeline has no counterpart: this is how fast the emulation can go (see "
        "benchmarks/capacity.py).")
    log_max_mb: int = Field(
        20, ge=1, le=1000, description="Size at which a switch's log file is truncated."
    )
    start_timeout_s: float = Field(
        15.0, gt=0, le=300, description="How long a switch may take to accept gRPC."
    )
    thrift_port: int = Field(
        9090,
        ge=1024,
        le=65535,
        description="BMv2 Thrift port, reachable only inside the switch's own namespace.",
    )
    queue_depth_pkts: int = Field(
        1024,
        ge=64,
        le=65536,
        description=(
            "Depth of BMv2's own egress queues. They are a hand-off to the kernel port, not the "
            "switch buffer, so they are deep enough never to drop (BMv2's default is 64)."
        ),
    )
    nice: int = Field(
        -5, ge=-20, le=19, description="Scheduling priority of each BMv2 process (nice). A "
        "real switch's pipeline runs at line rate whatever its hosts do; here it shares the "
        "cores with the hosts' endpoints, so it runs ahead of them: when the cores saturate, "
        "the hosts slow down rather than the switches falling behind.")
    realtime_priority: int = Field(
        5, ge=0, le=99, description="SCHED_FIFO priority of every BMv2 thread, 0 for none "
        "(switch.nice alone); below agent.realtime_priority, so that a PFC frame still "
        "preempts the switch. Real-time, a switch with a packet runs at once instead of "
        "outweighing the hosts' endpoints in the fair scheduler: an 8-host permutation on "
        "2x4x2 stayed faithful up to 14 Mbit/s (85.5 Mbit/s of goodput) against 8 (48.7) at "
        "nice, 3 of 3 runs each (docs/PERFORMANCE.md). A switch that drains at once may hold "
        "no packet when it stalls, so the fidelity guard times the stall itself (bmv2_stall). "
        "Where the machine refuses it, the switches run at switch.nice and the run says so; "
        "written in the config, a refusal stops the run.")
    one_core_each: bool = Field(
        True, description="Hold each BMv2 process, every thread of it, on one core, the "
        "switches dealt round robin over the cores the run may use (taskset(1) at start). "
        "BMv2 hands every packet from thread to thread (receive, ingress, egress, transmit); "
        "on one core a hand-off is a switch of task, across cores a wake-up of the other core "
        "and often a migration. Real software switches pin their packet threads the same way "
        "(Open vSwitch with DPDK: pmd-cpu-mask). On an 8-host permutation on 2x4x2 at 16 "
        "Mbit/s, BMv2 took 72-81 us of CPU a packet pass held, against 127-142 free, 3 "
        "interleaved runs each, all faithful (docs/PERFORMANCE.md). false: the kernel places "
        "the threads.")

    @model_validator(mode="after")
    def _log_needs_a_build_that_logs(self) -> SwitchConfig:
        if self.log and self.build == "fast":
            raise ValueError("switch.log is on but switch.build is fast, a BMv2 build with no "
                             "packet log; set switch.build to default (or auto) to log, or "
                             "leave switch.log off")
        return self


class EcnProfile(_Strict):
    """WRED_PROFILE for one class: RED marking on the queue length, in bytes."""

    kmin_bytes: int = Field(
        8400, ge=0, description="green_min_threshold. Real: 5 KB at 40G [Z15], 400 KB at "
        "100G [HPCC]; here two RoCE frames.")
    kmax_bytes: int = Field(
        42000, gt=0, description="green_max_threshold. Real: 200 KB at 40G [Z15]; here ten frames.")
    pmax: float = Field(
        0.2, gt=0, le=1, description="green_drop_probability at kmax (marking). Real: 1% [Z15], "
        "0.2 [HPCC].")

    @model_validator(mode="after")
    def _order(self) -> EcnProfile:
        if self.kmax_bytes <= self.kmin_bytes:
            raise ValueError("kmax_bytes must be above kmin_bytes")
        return self


class PfcConfig(_Strict):
    """PFC thresholds. Left empty, XOFF, XON and headroom are derived from the link rate."""

    xoff_bytes: int | None = Field(
        None, gt=0, description="Queue length that sends XOFF upstream. Default: kmax + two "
        "frames, so ECN acts before PFC does (as DCQCN deployments tune it).")
    xon_bytes: int | None = Field(
        None, ge=0, description="Queue length under which XON is sent. Default: xoff - two "
        "frames (SONiC's xon_offset).")
    headroom_bytes: int | None = Field(
        None, gt=0, description="Room above XOFF for what is in flight after XOFF. Default: "
        "2 x rate x link delay + 2 frames + rate x reaction time (SONiC's headroom formula).")
    pause_quanta: int = Field(
        PFC_MAX_QUANTA, ge=1, le=PFC_MAX_QUANTA, description="Quanta in each XOFF (512 bit "
        "times each): 3.36 ms at 10G, 3.36 s at 10 Mbit/s.")
    refresh_fraction: float = Field(
        0.5, gt=0, lt=1, description="Refresh XOFF after this fraction of its pause time.")
    link_delay_us: float = Field(
        0.0, ge=0, description="One-way wire delay of a link (0: no netem on this kernel).")
    reaction_ms: float = Field(
        20.0, gt=0, description="Time from XOFF sent to the upstream gate closed, with margin: "
        "BMv2 making and forwarding the frame and the agent's gate change (measured here: "
        "0.3 ms mean, 1.5 ms max, under a 4:1 incast), plus BMv2's own queueing on two busy "
        "cores. Real NICs and switches react in about a microsecond.")
    emulation_slack_ms: float = Field(
        200.0, ge=0, le=10_000, description="Room beyond a lossless queue's buffer (xoff + "
        "headroom per ingress port), per ingress port, for what the emulation itself delays: "
        "on saturated cores BMv2 can hold packets for a hundred ms and more (measured here: "
        "p99 118 ms, up to 214 ms over 24 random incasts) and an agent can close a gate tens of "
        "ms late, and the upstream keeps sending meanwhile. A real switch has no counterpart (it "
        "reacts in a microsecond), so bytes that use this room are not dropped as a headroom "
        "overflow would be: the run's fidelity check says how far past the buffer a queue went.")


#: Named QoS layouts (``qos.profile``): the fields each sets, which fields written beside it
#: replace. ``sonic``: SONiC's default QoS template (sonic-buildimage's qos_config.j2, its
#: DSCP_TO_TC_MAP "AZURE"), the layout sonic-mgmt's RoCEv2, PFC and PFC-watchdog test plans
#: assume: lossless classes 3 and 4 (DSCP 3 and 4), lossy 0-2 (DSCP 8 to class 0, DSCP 5 to
#: class 2, every other DSCP to class 1), DSCP 46 to class 5, CNPs in class 6 by DSCP 48, and
#: WRED/ECN on both lossless queues.
QOS_PROFILES: dict[str, dict] = {
    "sonic": {"dscp_to_tc_map": {3: 3, 4: 4, 8: 0, 5: 2, 46: 5, DSCP_CNP: 6},
              "default_tc": 1, "cnp_dscp": DSCP_CNP, "pfc_enable": [3, 4],
              "ecn": {3: {}, 4: {}}},
}


class QosConfig(_Strict):
    """Classification, buffers, ECN and PFC, in SONiC's names."""

    profile: Literal["sonic"] | None = Field(
        None, description="A named QoS layout (QOS_PROFILES): `sonic` is SONiC's default "
        "template as the test plans assume it: lossless classes 3 and 4 (DSCP 3 and 4), lossy "
        "0-2, CNPs in class 6 by DSCP 48, ECN on 3 and 4. It sets dscp_to_tc_map, default_tc, "
        "cnp_dscp, pfc_enable and ecn; any of them written beside it replaces the profile's.")

    @model_validator(mode="before")
    @classmethod
    def _apply_profile(cls, data: object) -> object:
        """The profile's fields first, the ones the user wrote over them."""
        if isinstance(data, dict) and data.get("profile") in QOS_PROFILES:
            return {**QOS_PROFILES[data["profile"]], **data}
        return data

    dscp_to_tc_map: dict[int, int] = Field(
        default_factory=lambda: {DSCP_ROCE: 3, DSCP_CNP: 6},
        description=(
            "DSCP_TO_TC_MAP: DSCP -> traffic class. RoCE data on DSCP 26 -> class 3, CNPs on "
            "DSCP 48 -> class 6 (NVIDIA/Onyx 'roce lossless' defaults). The hosts mark each "
            "class with a DSCP this map puts in it (see QosConfig.tc_to_dscp)."
        ),
    )
    default_tc: int = Field(
        0, ge=0, le=NUM_TCS - 1, description="Class of any DSCP not in the map.")
    cnp_dscp: int = Field(
        DSCP_CNP, ge=0, le=63, description="DSCP the hosts' NICs mark CNPs with; the map gives its "
        "class, which must not be lossless. Real counterpart: ConnectX's cnp_dscp "
        "(/sys/class/net/<if>/ecn/roce_np/cnp_dscp, default 48), which SONiC and NVIDIA's "
        "'roce lossless' defaults map to class 6.")
    pfc_enable: list[int] = Field(
        default_factory=lambda: [3], description="Lossless classes (SONiC PORT_QOS_MAP "
        "pfc_enable). Empty: a lossy fabric.")
    buffer_bytes: int = Field(
        200_000, ge=10_000, description="Buffer of each lossy class per port (the kernel "
        "queue's byte limit). Real: MBs shared by all ports of an ASIC.")
    ecn: dict[int, EcnProfile] = Field(
        default_factory=lambda: {3: EcnProfile()},
        description="WRED/ECN profile per class; classes not listed are never marked.")
    pfc: PfcConfig = Field(default_factory=PfcConfig)
    credit_enable: list[int] = Field(
        default_factory=list, description="Classes under InfiniBand-style credit flow control "
        "(set by mode ib-credit): a port sends them only while the next hop has room. Empty: "
        "none.")
    credit: CreditConfig = Field(default_factory=CreditConfig)

    @field_validator("dscp_to_tc_map")
    @classmethod
    def _dscp_range(cls, v: dict[int, int]) -> dict[int, int]:
        bad = [f"{d}->{t}" for d, t in v.items() if not (0 <= d <= 63 and 0 <= t < NUM_TCS)]
        if bad:
            raise ValueError(
                f"entries {', '.join(bad)} are out of range: DSCP is 0..63, class is "
                f"0..{NUM_TCS - 1}"
            )
        return v

    @field_validator("pfc_enable", "credit_enable")
    @classmethod
    def _classes(cls, v: list[int]) -> list[int]:
        bad = [c for c in v if not 0 <= c < NUM_TCS]
        if bad:
            raise ValueError(f"classes {bad} are out of range 0..{NUM_TCS - 1}")
        return sorted(set(v))

    @field_validator("ecn")
    @classmethod
    def _ecn_classes(cls, v: dict[int, EcnProfile]) -> dict[int, EcnProfile]:
        bad = [c for c in v if not 0 <= c < NUM_TCS]
        if bad:
            raise ValueError(f"classes {bad} are out of range 0..{NUM_TCS - 1}")
        return v

    @model_validator(mode="after")
    def _cnps_never_paused(self) -> QosConfig:
        """A paused CNP would hold back the very signal that slows the senders down."""
        tc = self.cnp_tc
        if tc in self.pfc_enable:
            how = (f"qos.cnp_dscp {self.cnp_dscp} -> class {tc}"
                   if self.cnp_dscp in self.dscp_to_tc_map else
                   f"qos.cnp_dscp {self.cnp_dscp} is unmapped, so in default_tc {tc}")
            _refuse("QosConfig", [(("pfc_enable",), (
                f"class {tc} carries CNPs ({how}) and must never be paused: leave class {tc} "
                "out, or map cnp_dscp to a lossy class in qos.dscp_to_tc_map"),
                self.pfc_enable)])
        both = sorted(set(self.pfc_enable) & set(self.credit_enable))
        if both:
            _refuse("QosConfig", [(("credit_enable",), (
                f"classes {both} are both paused by PFC and credited: a class has one flow "
                "control; use mode ib-credit (credits) or roce-lossless (PFC)"),
                self.credit_enable)])
        problem = too_many_levels(self)
        if problem:
            _refuse("QosConfig", [(("pfc_enable",), problem, self.pfc_enable)])
        return self

    @property
    def cnp_tc(self) -> int:
        """The class CNPs travel in: the map's class of cnp_dscp, else default_tc."""
        return self.dscp_to_tc_map.get(self.cnp_dscp, self.default_tc)

    def tc_to_dscp(self) -> dict[int, int]:
        """The DSCP a host marks each class with, for every class some DSCP reaches.

        The switches classify by DSCP (dscp_to_tc_map, anything unmapped to default_tc), so a
        host must send a class with a DSCP that lands in it. Where several do, the conventional
        one is taken: 26 for class 3 (RoCE), else the class selector tc << 3 (0, 8, .. 24 for
        class 3, .. 48, 56), else the lowest. A class no DSCP reaches is left out: it cannot be
        sent, and a scenario's flow in it is refused.
        """
        out = {}
        for tc in range(NUM_TCS):
            dscps = {d for d, t in self.dscp_to_tc_map.items() if t == tc}
            if tc == self.default_tc:
                dscps |= set(range(64)) - set(self.dscp_to_tc_map)
            if dscps:
                preferred = [d for d in ((DSCP_ROCE, 24) if tc == 3 else (tc << 3,)) if d in dscps]
                out[tc] = preferred[0] if preferred else min(dscps)
        return out


class FabricConfig(_Strict):
    """A whole fabric: what `testbed up` brings up."""

    name: str = Field(
        "fabric",
        pattern=NAME_PATTERN,
        description="Run name, used for the results folder.",
    )
    fabric: FabricShape = Field(default_factory=FabricShape)
    ecmp: EcmpConfig = Field(default_factory=EcmpConfig)
    switch: SwitchConfig = Field(default_factory=SwitchConfig)
    qos: QosConfig = Field(default_factory=QosConfig)
    agent: SwitchAgentConfig = Field(default_factory=SwitchAgentConfig)
    fidelity: FidelityConfig = Field(default_factory=FidelityConfig)

    @model_validator(mode="after")
    def _agents_preempt_switches(self) -> FabricConfig:
        """The agent is the switch's MAC for PFC: real-time, it must outrank BMv2, or a pause
        would wait behind the packets it is meant to stop."""
        sw, ag = self.switch.realtime_priority, self.agent.realtime_priority
        if sw and ag and sw >= ag:
            _refuse("FabricConfig", [(("switch", "realtime_priority"), (
                f"switch.realtime_priority {sw} is not below agent.realtime_priority {ag}: a "
                "PFC frame must preempt the switch it pauses; set switch.realtime_priority "
                f"below {ag} (or 0)"), sw)])
        return self

    @model_validator(mode="after")
    def _pfc_ports_fit(self) -> FabricConfig:
        """With PFC on, the P4 program records the ports it paused in a bitmap of
        PFC_PORT_BITMAP_BITS; a port past it would be paused and never resumed by XON."""
        if not self.qos.pfc_enable:
            return self
        errors = []
        for role, n, what, fix in (
                ("leaf", self.fabric.leaf_ports, "hosts_per_leaf + spines x parallel_links",
                 "hosts per leaf, spines or parallel links"),
                ("spine", self.fabric.spine_ports, "leaves x parallel_links",
                 "leaves or parallel links")):
            if n > MAX_PFC_PORTS:
                errors.append((("fabric",), (
                    f"a {role} would have {n} ports ({what}), but with PFC on (qos.pfc_enable "
                    f"{self.qos.pfc_enable}) a switch has at most {MAX_PFC_PORTS}: the P4 "
                    f"program keeps the ports it paused in a {PFC_PORT_BITMAP_BITS}-bit map "
                    f"(paused_by), bit n for port n; use fewer {fix}, or no lossless class "
                    "(qos.pfc_enable: [])"), self.fabric))
        if errors:
            _refuse("FabricConfig", errors)
        return self
