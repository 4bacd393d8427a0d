"""The fabric as a lossless RoCEv2 fabric: incast with and without PFC, pause propagation,
class isolation, PFC from a host, against real BMv2, kernel queues and RoCE endpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.analysis.fidelity import verdict_problem
from testbed.config.models import FabricConfig
from testbed.fabric.measure import fabric_counters, hidden_loss, kernel_drops, peer_ports
from testbed.results.telemetry import EventRow, read_events, run_events, run_telemetry
from testbed.topology.graph import build_topology
from traffic.flows import FlowRunner, FlowSpec
from traffic.wire import PFC_QUANTUM_BITS

# Collected without Mininet too, and skipped by name: testbed.run.bringup imports it.
pytest.importorskip("mininet.net", reason="needs Mininet: apt install mininet, venv with "
                                          "--system-site-packages")
from testbed.run.bringup import Fabric  # noqa: E402

pytestmark = pytest.mark.bmv2

INCAST_SENDERS = ["h3", "h4", "h5", "h6"]
MSG, COUNT = 16384, 20  # 320 KB per sender, 1.3 MB into one port
INCAST_RUNS = 10
#: The guard's own tests stop a part of the emulation for this long, this far into an incast
#: (which takes about 1.3 s to cross h1's link): far beyond any budget the guard allows.
FREEZE_AT_S, FREEZE_S = 0.4, 0.4
#: Another process keeping one core busy (a user's browser, a build) for up to a minute.
HOG = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"


def incast_cfg(pfc: bool, name: str, agent: dict | None = None) -> FabricConfig:
    return FabricConfig.model_validate({
        "name": name,
        "fabric": {"spines": 2, "leaves": 3, "hosts_per_leaf": 2},
        # PFC alone must keep the class lossless here: no ECN marks, no DCQCN
        "qos": {"pfc_enable": [3] if pfc else [], "ecn": {}},
        "agent": agent or {},
    })


def run_incast(tmp: Path, pfc: bool, name: str, hogs: int = 0,
               agent: dict | None = None,
               freeze: Callable[[Fabric], list[int]] | None = None) -> dict:
    """A 4:1 incast into h1. ``freeze``: the processes to stop (SIGSTOP) for FREEZE_S, from
    FREEZE_AT_S after the senders start: the emulation made to fall behind on purpose."""
    cfg = incast_cfg(pfc, name, agent)
    topo = build_topology(cfg)
    with Fabric(cfg, topo, tmp) as fabric:
        eps = fabric.start_endpoints(["--no-dcqcn"])
        flows = [FlowSpec(name=f"f{i}", src=s, dst="h1", qps=1, message_bytes=MSG, count=COUNT)
                 for i, s in enumerate(INCAST_SENDERS)]
        runner = FlowRunner(flows, eps, {h.name: h.ip for h in topo.hosts})
        busy = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
        try:
            runner.start()
            if freeze is not None:
                time.sleep(FREEZE_AT_S)
                stopped = freeze(fabric)
                for pid in stopped:
                    os.kill(pid, signal.SIGSTOP)
                time.sleep(FREEZE_S)
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            deadline = time.monotonic() + 120
            while not runner.done() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            for p in busy:
                p.kill()
        time.sleep(1.0)  # let the last PFC/XON settle
        counters = fabric_counters(fabric)
        recv = eps["h1"].call(cmd="stats")
        send = {h: eps[h].call(cmd="stats") for h in INCAST_SENDERS}
        done = runner.done()
    return {"done": done, "counters": counters, "recv": recv, "send": send, "topo": topo,
            "assign": runner.assignments, "drift": drift_samples(tmp),
            "telemetry": json.loads((tmp / "telemetry" / "summary.json").read_text())}


def drift_samples(tmp: Path) -> list[int]:
    """|phantom - kernel backlog| of busy lossless queues, from the agents' telemetry."""
    return [abs(r.phantom_drift_bytes) for r in run_telemetry(tmp)
            if r.tc == 3 and r.phantom_drift_bytes is not None and r.backlog_bytes > 0]


def check_lossless_incast(r: dict, run: int) -> dict:
    """Every check a user makes of a lossless incast; the run's PFC figures. A lossless claim
    rests on a faithful run: the fidelity guard measured every figure and each passed."""
    c, topo = r["counters"], r["topo"]
    assert verdict_problem(r["telemetry"]["fidelity"]) is None, r["telemetry"]["fidelity"]
    assert r["done"], "flows did not complete"
    # nothing lost, so nothing resent: no sender timed out or went back
    for host, s in r["send"].items():
        for q in s["qps"].values():
            if q.get("role") == "requester":
                assert q["retransmitted"] == 0 and q["timeouts"] == 0, (host, q)
    # every byte delivered once, in order, on every QP
    for flow, assigns in r["assign"].items():
        for a in assigns:
            q = r["recv"]["qps"][str(a.responder_qpn)]
            assert q["bytes"] == MSG * COUNT and q["corrupt"] == 0, (flow, q)
            assert q["out_of_order"] == 0 and q["naks_sent"] == 0, (flow, q)
            assert q["duplicates"] == 0, (flow, q)  # nothing resent: no timeout fired
    # zero drops in the lossless class: kernel queues and P4 agree, nothing hidden
    assert kernel_drops(c, 3) == 0
    p4_drops = {(s, k): v for s, sc in c.items() for k, v in sc.drops.items()
                if k[1] != 5}  # reason 5: PFC frames consumed, not a loss
    assert not p4_drops, p4_drops
    hidden = hidden_loss(c)
    assert all(v == 0 for v in hidden.values()), hidden
    # PFC: sent by the receiver's leaf toward the spines, received by the spines,
    # and the pause propagated a second hop: spines paused the senders' leaves
    leaf1 = c["leaf1"]
    up = [p for s in ("spine1", "spine2") for p in peer_ports(topo, "leaf1", s)]
    assert sum(leaf1.pfc_tx.get((p, 3), 0) for p in up) > 0
    spine_rx = sum(c[s].pfc_rx.get((p, 3), 0) for s in ("spine1", "spine2")
                   for p in peer_ports(topo, s, "leaf1"))
    assert spine_rx > 0
    spine_tx = sum(c[s].pfc_tx.get((p, 3), 0) for s in ("spine1", "spine2")
                   for lf in ("leaf2", "leaf3") for p in peer_ports(topo, s, lf))
    leaf_rx = sum(c[lf].pfc_rx.get((p, 3), 0) for lf in ("leaf2", "leaf3")
                  for s in ("spine1", "spine2") for p in peer_ports(topo, lf, s))
    figures = {"run": run, "leaf1_pfc_tx": sum(v for v in leaf1.pfc_tx.values()),
               "spine_pfc_rx": spine_rx, "spine_pfc_tx": spine_tx,
               "leaf_pfc_rx": leaf_rx, "hidden_loss": sum(hidden.values())}
    assert spine_tx > 0 and leaf_rx > 0, figures
    # the JSON summary of the telemetry, written when the fabric stopped, says the same
    tel = {(q["switch"], q["port"], q["tc"]): q for q in r["telemetry"]["queues"]}
    to_h1 = tel[("leaf1", peer_ports(topo, "leaf1", "h1")[0], 3)]
    assert to_h1["sent_bytes"] >= len(INCAST_SENDERS) * MSG * COUNT and to_h1["drops"] == 0
    assert sum(q["pfc_rx"] for (sw, _p, _t), q in tel.items() if sw.startswith("spine")) \
        == spine_rx
    assert r["telemetry"]["drift_bytes"]["samples"] > 0
    return figures


def test_incast_4_to_1_lossless_with_pfc_ten_times(tmp_path: Path) -> None:
    summary = []
    drift: list[int] = []
    for run in range(INCAST_RUNS):
        r = run_incast(tmp_path / f"run{run}", pfc=True, name=f"incast{run}")
        drift += r["drift"]
        summary.append(check_lossless_incast(r, run))
    # occupancy fidelity: the telemetry reports the phantom's drift from the kernel backlog
    assert len(drift) >= 20, "no drift samples for the busy lossless queues"
    drift.sort()
    fidelity = {"samples": len(drift), "median_bytes": drift[len(drift) // 2],
                "p99_bytes": drift[int(0.99 * (len(drift) - 1))]}
    print(json.dumps({"runs": summary, "phantom_drift": fidelity}))


def test_incast_with_one_agent_process_is_lossless(tmp_path: Path) -> None:
    """agent.one_process: one process serves all five switches from outside their namespaces,
    and the incast is as lossless, with every switch's pauses applied and logged, as with a
    process per switch."""
    for run in range(2):
        r = run_incast(tmp_path / f"run{run}", pfc=True, name=f"one{run}",
                       agent={"one_process": True})
        figures = check_lossless_incast(r, run)
        pauses = [e for e in run_events(tmp_path / f"run{run}") if e.event == "pause"]
        # the spines obeyed leaf1's PFC and the senders' leaves the spines', each pause a
        # reaction to a frame the agent read off the switch's port
        paused = {e.switch for e in pauses}
        assert {"spine1", "spine2"} <= paused and paused & {"leaf2", "leaf3"}, paused
        assert all(e.reaction_us is not None for e in pauses)
        print(json.dumps(figures))


def test_incast_with_a_busy_core_is_lossless_and_faithful(tmp_path: Path) -> None:
    """With one core kept busy by another process (a user's browser, a build), each 4:1
    incast still loses nothing and the fidelity guard calls the run faithful."""
    for run in range(3):
        r = run_incast(tmp_path / f"run{run}", pfc=True, name=f"busy{run}", hogs=1)
        print(json.dumps(check_lossless_incast(r, run)))


def _agents_of(fabric: Fabric, *switches: str) -> list[int]:
    import psutil

    paths = [str(fabric.agent_pool.config_path(s)) for s in switches]
    return [p.pid for p in fabric.agent_pool.procs
            if any(x in " ".join(psutil.Process(p.pid).cmdline()) for x in paths)]


#: What a frozen part of the emulation can do, by the checks that see it. Which one trips
#: depends on the phase the freeze hits: spine agents stopped while their gates are open let
#: leaf1's queue overfill (phantom_below, buffer_exceeded) and apply the waiting frames late
#: (agent_reaction); a leaf BMv2 stopped holds its resync ticks (phantom_below) and whatever
#: was inside it (bmv2_lag), and its veths fill (hidden_loss). A stopped BMv2 answers its
#: agent's register reads late (bmv2_stall), which sees a switch stopped with nothing inside
#: it; a stopped agent wakes past the timers it had set (agent_stall), which sees it stopped
#: with no PFC frame waiting.
FROZEN_AGENTS = {"agent_reaction", "phantom_below", "buffer_exceeded", "agent_stall"}
FROZEN_BMV2 = {"bmv2_lag", "phantom_below", "buffer_exceeded", "hidden_loss", "bmv2_stall"}


@pytest.mark.parametrize(("freeze", "seen_by", "always"), [
    (lambda f: _agents_of(f, "spine1", "spine2"), FROZEN_AGENTS, "agent_stall"),
    (lambda f: [f.net.get("leaf1").bmv2.pid], FROZEN_BMV2, "bmv2_stall"),
], ids=["spine-agents-stopped", "leaf-bmv2-stopped"])
def test_the_guard_flags_an_emulation_made_to_fall_behind(
        tmp_path: Path, freeze: Callable[[Fabric], list[int]], seen_by: set[str],
        always: str) -> None:
    """The guard's own test: a part of the emulation is stopped (SIGSTOP) for 0.4 s in the
    middle of an incast, far past any budget (reaction 20 ms, BMv2 lag 50 ms); the verdict is
    not ok, a check that sees such a freeze failed, and each failure is said in a reason. The
    stall checks see their part stopped whatever phase the stop hits: a stopped agent has
    timers due every sample at least, and a stopped BMv2 is asked every sample."""
    r = run_incast(tmp_path, pfc=True, name="frozen", freeze=freeze)
    fid = r["telemetry"]["fidelity"]
    assert fid["ok"] is False and not fid["unknown"], fid
    failed = {c["name"] for c in fid["checks"] if c["status"] == "failed"}
    assert failed & seen_by and always in failed, fid
    assert len(fid["reasons"]) == len(failed), fid["reasons"]
    print(json.dumps({"failed": sorted(failed), "reasons": fid["reasons"]}))


def test_incast_without_pfc_drops_are_counted(tmp_path: Path) -> None:
    r = run_incast(tmp_path, pfc=False, name="incast-lossy")
    c = r["counters"]
    drops = kernel_drops(c, 3)
    assert drops > 0
    # the loss was recovered by Go-Back-N: NAKs or timeouts on the senders
    retx = sum(q["retransmitted"] for s in r["send"].values() for q in s["qps"].values())
    assert retx > 0
    assert sum(sum(sc.pfc_tx.values()) for sc in c.values()) == 0
    print(json.dumps({"kernel_drops_class3": drops, "retransmitted": retx}))


def _read_events(tmp: Path, switch: str) -> list[EventRow]:
    return read_events(next(tmp.glob(f"**/telemetry/{switch}.events.csv")))


def test_host_pfc_pauses_its_leaf_port_for_the_quanta_and_xon_resumes(tmp_path: Path) -> None:
    cfg = FabricConfig.model_validate({"name": "hostpfc",
                                       "fabric": {"spines": 1, "leaves": 2,
                                                  "hosts_per_leaf": 1}})
    with Fabric(cfg, build_topology(cfg), tmp_path) as fabric:
        h1 = fabric.host("h1")
        quanta = 10_000  # 0.512 s at 10 Mbit/s, the default
        send = ("import socket,sys; s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW); "
                "s.bind(('h1-eth0',0)); s.send(bytes.fromhex(sys.argv[1]))")
        from traffic.packets import pfc_frame

        frame = pfc_frame(fabric.topo.host("h1").mac, {3: quanta}).hex()
        h1.cmd(f"python3 -c \"{send}\" {frame}")
        time.sleep(1.0)
        xoff = pfc_frame(fabric.topo.host("h1").mac, {3: 0xFFFF}).hex()
        xon = pfc_frame(fabric.topo.host("h1").mac, {3: 0}).hex()
        h1.cmd(f"python3 -c \"{send}\" {xoff}")
        time.sleep(0.3)
        h1.cmd(f"python3 -c \"{send}\" {xon}")
        time.sleep(0.3)
        ev = _read_events(tmp_path, "leaf1")
    kinds = [(e.port, e.tc, e.event) for e in ev]
    assert kinds[:4] == [(1, 3, "pause"), (1, 3, "expire"), (1, 3, "pause"),
                         (1, 3, "resume")], kinds
    held = ev[1].t_s - ev[0].t_s
    line_bps = cfg.fabric.host_link_mbps * 1e6
    assert held == pytest.approx(quanta * PFC_QUANTUM_BITS / line_bps, abs=0.03)
    early = ev[3].t_s - ev[2].t_s
    # XON (sent about 0.3 s plus a python start after the XOFF) ended a 65535-quanta pause
    # (3.36 s at 10 Mbit/s) early
    assert early < 1.5, early


def test_class_isolation_while_class3_is_paused(tmp_path: Path) -> None:
    """h1's NIC pauses class 3 toward its leaf: class 3 stops on that port while class 0 and
    class 6 flows to h1, through the same port, keep their rate."""
    cfg = FabricConfig.model_validate({"name": "isolation",
                                       "fabric": {"spines": 1, "leaves": 2,
                                                  "hosts_per_leaf": 1},
                                       "qos": {"ecn": {}}})
    topo = build_topology(cfg)
    caps = {3: 3.0, 0: 3.0, 6: 2.0}
    with Fabric(cfg, topo, tmp_path) as fabric:
        eps = fabric.start_endpoints(["--no-dcqcn"])
        flows = [FlowSpec(name=f"tc{tc}", src="h2", dst="h1", tc=tc, rate_cap_mbps=cap,
                          message_bytes=65536, duration_s=8) for tc, cap in caps.items()]
        runner = FlowRunner(flows, eps, {h.name: h.ip for h in topo.hosts})
        runner.start()
        time.sleep(2.0)
        eps["h1"].call(cmd="fault", mode="storm", tc=3)
        time.sleep(1.0)  # the pause takes hold

        def received() -> dict[int, int]:
            st = eps["h1"].call(cmd="stats")["qps"]
            return {tc: st[str(runner.assignments[f"tc{tc}"][0].responder_qpn)]["bytes"]
                    for tc in caps}

        b0, t0 = received(), time.monotonic()
        time.sleep(3.0)
        b1, t1 = received(), time.monotonic()
        eps["h1"].call(cmd="fault", mode="none")
        leaf_events = _read_events(tmp_path, "leaf1")
    rate = {tc: (b1[tc] - b0[tc]) * 8 / (t1 - t0) / 1e6 for tc in caps}
    print(json.dumps({"goodput_mbps_while_class3_paused": rate}))
    assert any(e.tc == 3 and e.event == "pause" for e in leaf_events)
    assert rate[3] < 0.1, rate  # class 3 held at the leaf
    # class 0 and class 6 keep their rate (payload goodput: headers cost about 2%)
    assert rate[0] == pytest.approx(caps[0], rel=0.1), rate
    assert rate[6] == pytest.approx(caps[6], rel=0.1), rate


@pytest.mark.parametrize(("kill", "check", "words"), [
    ("endpoint", "host_loss", "the endpoint of h2 did not answer"),
    ("switch", "hidden_loss", "could not be read"),
], ids=["endpoint-killed", "switch-killed"])
def test_a_figure_that_cannot_be_read_leaves_the_run_unknown(
        tmp_path: Path, kill: str, check: str, words: str) -> None:
    """Unknown is not ok: an endpoint killed before the fabric stops (its socket losses
    unreadable), or a switch killed (its counters unreadable), makes that check unknown and
    the run not faithful, with why."""
    cfg = FabricConfig.model_validate({"name": f"gap-{kill}",
                                       "fabric": {"spines": 1, "leaves": 2,
                                                  "hosts_per_leaf": 1}})
    topo = build_topology(cfg)
    with Fabric(cfg, topo, tmp_path) as fabric:
        fabric.start_endpoints(["--no-dcqcn"])
        if kill == "endpoint":
            victim = fabric.endpoint_pool.procs[[h.name for h in topo.hosts].index("h2")]
            victim.kill()
            victim.wait(5)
        else:
            os.kill(fabric.net.get("leaf2").bmv2.pid, signal.SIGKILL)
    fid = json.loads((tmp_path / "telemetry" / "summary.json").read_text())["fidelity"]
    assert fid["ok"] is False and check in fid["unknown"], fid
    assert any(words in reason for reason in fid["reasons"]), fid["reasons"]
