"""Per-queue QoS numbers (testbed.topology.qos) against figures computed by hand, and the checks
that refuse thresholds which cannot work: pure arithmetic, no root needed.

The default config at MTU 9000: the largest RoCE frame is 4096 + 60 + 14 = 4170 bytes, the
closing gate lets 9014 bytes (one 9000-byte frame with its header) through, links have no
wire delay, the reaction budget is 20 ms, the emulation's slack 200 ms, class 3 is lossless
with ECN between 8400 and 42000 bytes (pmax 0.2), the lossy buffer 200000 bytes.
"""

from __future__ import annotations

import pytest

from testbed.config.models import ConfigError, FabricConfig, QosConfig
from testbed.config.phantoms import phantom_classes, resynced_classes
from testbed.topology.qos import (
    KERNEL_LIMIT_CAP_BYTES,
    check_qos,
    pause_renewal_us,
    queue_profiles,
    required_headroom,
)
from testbed.topology.validate import parse_config

FRAME, LEAK = 4170, 9014


def qos(**kw) -> QosConfig:
    return QosConfig.model_validate(kw)


# rate: (bytes sent during the 20 ms reaction, the emulation's 200 ms of slack, the PFC
# quantum in us: 512 bits at the rate)
AT = {10.0: (25_000, 250_000, 51.2), 40.0: (100_000, 1_000_000, 12.8)}


@pytest.mark.parametrize("rate", [10.0, 40.0])
def test_lossless_class_at_the_default_config(rate: float) -> None:
    react, slack, quantum = AT[rate]
    headroom = 2 * FRAME + react + LEAK               # 42354 at 10, 117354 at 40
    assert required_headroom(QosConfig(), rate) == headroom == {10.0: 42354, 40.0: 117354}[rate]
    p = queue_profiles(QosConfig(), rate)[3]
    assert (p.pfc, p.ecn) == (True, True)
    assert p.xoff == 42_000 + 2 * FRAME == 50_340      # kmax + two frames: ECN acts first
    assert p.xon == p.xoff - 2 * FRAME == 42_000        # SONiC's xon_offset of two frames
    assert p.headroom == headroom
    assert p.buffer_bytes == p.xoff + headroom == {10.0: 92_694, 40.0: 167_694}[rate]
    assert p.kernel_limit == p.buffer_bytes + slack == {10.0: 342_694, 40.0: 1_167_694}[rate]
    assert (p.kmin, p.kmax, p.pmax) == (8400, 42_000, 0.2)
    assert p.pause_quanta == 65535
    # an XOFF on a link of this rate is renewed at half its pause
    assert pause_renewal_us(QosConfig(), rate) == int(65535 * quantum / 2) == \
        {10.0: 1_677_696, 40.0: 419_424}[rate]


@pytest.mark.parametrize("rate", [10.0, 40.0])
def test_lossy_classes_at_the_default_config(rate: float) -> None:
    profiles = queue_profiles(QosConfig(), rate)
    assert sorted(profiles) == list(range(8))
    for tc in (0, 1, 2, 4, 5, 6, 7):
        p = profiles[tc]
        assert (p.pfc, p.ecn, p.pmax_slope) == (False, False, 0), tc
        assert p.buffer_bytes == p.kernel_limit == 200_000  # the lossy buffer, no slack
        assert (p.xoff, p.xon) == (100_000, 100_000 - 2 * FRAME)  # never used: no PFC


def test_fan_in_gives_each_ingress_port_its_headroom_and_slack() -> None:
    one, three = queue_profiles(QosConfig(), 10.0), queue_profiles(QosConfig(), 10.0, fan_in=3)
    assert three[3].buffer_bytes == 50_340 + 3 * 42_354 == 177_402
    assert three[3].kernel_limit == 177_402 + 3 * 250_000 == 927_402
    assert (three[3].xoff, three[3].xon, three[3].headroom) == \
        (one[3].xoff, one[3].xon, one[3].headroom)  # the thresholds do not move
    assert three[0] == one[0]  # a lossy class has one buffer, whatever feeds it


def test_the_slack_stops_at_the_kernel_limit_cap() -> None:
    """40 ingress ports would get 10 MB of slack: the kernel limit stops at 4 MiB, under the
    switch's 16 MiB socket buffer, so the qdisc drops before BMv2's send would block."""
    wide = queue_profiles(QosConfig(), 10.0, fan_in=40)[3]
    assert wide.buffer_bytes == 50_340 + 40 * 42_354 == 1_744_500
    assert wide.kernel_limit == KERNEL_LIMIT_CAP_BYTES == 4 * 1024 * 1024


def test_wire_delay_and_the_configured_thresholds() -> None:
    # 50 us each way at 1.25 bytes/us: 125 bytes more on the wire, there and back
    assert required_headroom(qos(pfc={"link_delay_us": 50}), 10.0) == 42_354 + 125
    assert required_headroom(qos(pfc={"reaction_ms": 2}), 10.0) == 2 * FRAME + 2_500 + LEAK
    p = queue_profiles(qos(pfc={"headroom_bytes": 60_000, "xoff_bytes": 30_000}), 10.0)[3]
    assert (p.headroom, p.xoff, p.xon, p.buffer_bytes) == (60_000, 30_000, 30_000 - 2 * FRAME,
                                                           90_000)
    p = queue_profiles(qos(pfc={"xon_bytes": 0}), 10.0)[3]
    assert (p.xoff, p.xon) == (50_340, 0)
    # xon never below zero when xoff is small
    assert queue_profiles(qos(pfc={"xoff_bytes": 5000}), 10.0)[3].xon == 0


def test_a_lossy_fabric_and_an_ecn_only_class() -> None:
    lossy = queue_profiles(qos(pfc_enable=[]), 10.0)[3]
    assert (lossy.pfc, lossy.ecn) == (False, True)  # still marked
    assert lossy.buffer_bytes == lossy.kernel_limit == 200_000
    q = qos(ecn={3: {}, 1: {"kmin_bytes": 1000, "kmax_bytes": 5000, "pmax": 0.5}})
    p = queue_profiles(q, 10.0)[1]
    assert (p.pfc, p.ecn, p.kmin, p.kmax) == (False, True, 1000, 5000)
    assert p.xoff == 5000 + 2 * FRAME and p.buffer_bytes == 200_000


@pytest.mark.parametrize(("kmin", "kmax", "pmax", "slope"), [
    (8400, 42_000, 0.2, 25_565),          # the default: 0.2 * 2^32 / 33600
    (0, 1 << 16, 1.0, 1 << 16),
    (1000, 5000, 0.5, 536_870),
])
def test_ecn_slope_is_the_p4_programs_fixed_point_of_pmax(kmin: int, kmax: int, pmax: float,
                                                         slope: int) -> None:
    q = qos(ecn={3: {"kmin_bytes": kmin, "kmax_bytes": kmax, "pmax": pmax}})
    p = queue_profiles(q, 10.0)[3]
    assert p.pmax_slope == slope
    # as the program uses it: ((q - kmin) * slope) >> 16 against a 16-bit random number
    for frac in (0.25, 0.5, 1.0):
        over = int(frac * (kmax - kmin))
        prob = (over * p.pmax_slope >> 16) / 65536
        assert prob == pytest.approx(frac * pmax, abs=2e-4), frac


# -- refusing what cannot work ------------------------------------------------------------------

def config(**qos_kw) -> FabricConfig:
    return FabricConfig.model_validate({"fabric": {"host_link_mbps": 10, "fabric_link_mbps": 40},
                                        "qos": qos_kw})


def test_the_default_config_passes() -> None:
    assert check_qos(config()) == []
    assert check_qos(FabricConfig()) == []


def test_too_small_a_headroom_is_named_for_each_link_tier() -> None:
    problems = check_qos(config(pfc={"headroom_bytes": 30_000}))
    assert len(problems) == 2
    host, fabric = sorted(problems, key=lambda p: "fabric_link_mbps" in p)
    for text, tier, need in ((host, "host_link_mbps", 42_354), (fabric, "fabric_link_mbps",
                                                                117_354)):
        assert text.startswith("qos.pfc.headroom_bytes: 30000 is too small")
        assert f"(fabric.{tier})" in text and f"at least {need} bytes" in text
    # enough for the host links, not for the faster fabric links
    (only,) = check_qos(config(pfc={"headroom_bytes": 50_000}))
    assert "fabric.fabric_link_mbps" in only and "at least 117354" in only


def test_xoff_plus_headroom_over_the_buffer_is_named() -> None:
    (p,) = check_qos(config(pfc={"xoff_bytes": 150_000}))  # 150000 + 117354 at 40 Mbit/s
    assert p == ("qos.pfc.xoff_bytes: 150000 plus headroom 117354 exceeds the class 3 buffer "
                 "qos.buffer_bytes (200000): lower xoff_bytes or raise buffer_bytes")
    assert len(check_qos(config(pfc={"xoff_bytes": 190_000}))) == 2  # at both rates


def test_xon_above_xoff_is_named() -> None:
    assert check_qos(config(pfc={"xon_bytes": 60_000})) == [
        "qos.pfc.xon_bytes: 60000 is above xoff_bytes 50340"]


def test_parse_config_refuses_each_impossible_threshold_by_name() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"fabric": {"fabric_link_mbps": 40},
                      "qos": {"pfc": {"headroom_bytes": 30_000, "xoff_bytes": 180_000,
                                      "xon_bytes": 190_000}}})
    names = sorted(p.split(":")[0] for p in err.value.problems)
    assert names == ["qos.pfc.headroom_bytes", "qos.pfc.headroom_bytes", "qos.pfc.xoff_bytes",
                     "qos.pfc.xon_bytes"]  # the headroom at both tiers, 210000 > 200000
    with pytest.raises(ConfigError) as err:
        parse_config({"fabric": {"host_link_mbps": 10, "fabric_link_mbps": 10},
                      "qos": {"pfc": {"headroom_bytes": 42_354, "xoff_bytes": 160_000}}})
    assert [p.split(":")[0] for p in err.value.problems] == ["qos.pfc.xoff_bytes"]


def test_the_classes_with_a_phantom_and_those_the_agent_resyncs() -> None:
    """The P4 program keeps a phantom of each marked or lossless class, and of each class above
    the lowest lossless one that data reaches (a lossless class drains with what they leave);
    not of the class only CNPs reach. The agent resyncs the lossless ones and those above."""
    default = QosConfig()  # DSCP 26 -> 3 (lossless, ECN), 48 -> 6 (CNPs only)
    assert phantom_classes(default) == {3}
    assert resynced_classes(default) == [3]
    sonic = QosConfig.model_validate({"profile": "sonic"})  # 46 -> 5, default class 1
    assert phantom_classes(sonic) == {3, 4, 5}
    assert resynced_classes(sonic) == [3, 4, 5]
    assert phantom_classes(sonic.model_copy(update={"default_tc": 7})) == {3, 4, 5, 7}
    ecn_below = QosConfig.model_validate({"profile": "sonic", "pfc_enable": [4],
                                          "ecn": {1: {}, 4: {}}})
    assert phantom_classes(ecn_below) == {1, 4, 5}
    assert resynced_classes(ecn_below) == [4, 5]  # class 1's, below, as before
    lossy = QosConfig.model_validate({"profile": "sonic", "pfc_enable": [], "ecn": {3: {}}})
    assert phantom_classes(lossy) == {3} and resynced_classes(lossy) == []
    profiles = queue_profiles(sonic, 10.0)
    assert {tc for tc, p in profiles.items() if p.phantom} == {3, 4, 5}


def test_more_phantoms_above_a_lossless_class_than_the_program_follows_are_refused() -> None:
    """The P4 program brings a queue's three nearest phantoms above up to date: lossless 2, 3
    and 4 with SONiC's class 5 above are four levels and pass; lossless 1 adds a fifth and is
    refused at qos.pfc_enable, with the fix."""
    QosConfig.model_validate({"profile": "sonic", "pfc_enable": [2, 3, 4],
                              "dscp_to_tc_map": {3: 3, 4: 4, 5: 2, 46: 5, 48: 6}})
    with pytest.raises(ConfigError) as info:
        parse_config({"qos": {"profile": "sonic", "pfc_enable": [1, 2, 3, 4],
                              "dscp_to_tc_map": {3: 3, 4: 4, 5: 2, 46: 5, 48: 6, 10: 1}}})
    text = info.value.render()
    assert "qos.pfc_enable" in text and "classes [1, 2, 3, 4, 5]" in text
    assert "more than the 4 the P4 program follows" in text and "make fewer classes" in text


def test_plugs_use_up_a_gates_burst_in_whole_frames() -> None:
    """A closing gate's burst in plugs: one largest frame at a 9000-byte MTU; at 1500 the
    1600-byte burst is a full frame and the rest, never shorter than an Ethernet frame."""
    from testbed.machine.ports import MIN_FRAME_BYTES, gate_burst_bytes, plug_sizes

    assert plug_sizes(gate_burst_bytes(9014), 9014) == [9014]
    assert plug_sizes(gate_burst_bytes(1514), 1514) == [1514, 86]
    assert plug_sizes(1600, 1560) == [1540, MIN_FRAME_BYTES]
    for burst, frame in ((9014, 9014), (1600, 1514), (1600, 1560), (20_000, 4000)):
        sizes = plug_sizes(burst, frame)
        assert sum(sizes) == burst and all(MIN_FRAME_BYTES <= n <= frame for n in sizes)
