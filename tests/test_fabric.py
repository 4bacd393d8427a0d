"""Whole fabrics on real BMv2, Mininet namespaces and veths."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.config.models import FabricConfig
from testbed.control.entries import build_switch_program
from testbed.control.p4runtime import SwitchSession
from testbed.fabric.measure import peer_ports
from testbed.machine.state import RUNTIME_DIR
from testbed.topology.graph import build_topology

# Collected without Mininet too, and skipped by name: testbed.run.bringup imports it.
pytest.importorskip("mininet.net", reason="needs Mininet: apt install mininet, venv with "
                                          "--system-site-packages")
from testbed.run.bringup import Fabric  # noqa: E402

pytestmark = pytest.mark.bmv2
TESTBED = [sys.executable, "-m", "testbed.cli"]


def net_namespaces() -> set[int]:
    """Every network namespace some process is in (Mininet's are anonymous)."""
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                out.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    return out


def leftovers() -> dict[str, list]:
    intfs = [p.name for p in Path("/sys/class/net").iterdir()
             if p.name.startswith(("leaf", "spine", "h"))]
    switches = subprocess.run(["pgrep", "-f", f"simple_switch_grpc.*{RUNTIME_DIR}"],
                              capture_output=True, text=True).stdout.split()
    shells = subprocess.run(["pgrep", "-f", "mininet:(leaf|spine|h)[0-9]"],
                            capture_output=True, text=True).stdout.split()
    states = list(RUNTIME_DIR.glob("*.state.json")) if RUNTIME_DIR.exists() else []
    qdiscs = [ln for ln in subprocess.run(["tc", "qdisc", "show"], capture_output=True,
                                          text=True).stdout.splitlines()
              if " dev leaf" in ln or " dev spine" in ln]
    return {"interfaces": intfs, "switches": switches, "shells": shells, "states": states,
            "qdiscs": qdiscs}


def assert_clean(before_ns: set[int]) -> None:
    left = leftovers()
    assert not any(left.values()), left
    deadline = time.time() + 5
    while net_namespaces() - before_ns and time.time() < deadline:
        time.sleep(0.1)
    assert not (net_namespaces() - before_ns), "network namespaces left behind"


def run_cli(args: list[str], tmp: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(TESTBED + args + ["--results", str(tmp)], capture_output=True,
                          text=True, timeout=timeout, cwd=Path(__file__).parent.parent)


def test_up_pingall_then_nothing_left(tmp_path: Path) -> None:
    before = net_namespaces()
    r = run_cli(["up", "--spines", "2", "--leaves", "4", "--hosts-per-leaf", "2", "--pingall"],
                tmp_path)
    assert r.returncode == 0, r.stderr
    assert "pingall: 56/56 answered" in r.stderr
    run = next(tmp_path.iterdir())
    assert (run / "topology.json").exists() and (run / "config.json").exists()
    assert_clean(before)


def test_other_shape_without_code_changes(tmp_path: Path) -> None:
    before = net_namespaces()
    r = run_cli(["up", "examples/fabric-3x3x1-parallel.yaml", "--pingall"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "pingall: 6/6 answered" in r.stderr
    assert_clean(before)


def test_exec_reports_the_command_status(tmp_path: Path) -> None:
    r = run_cli(["up", "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1",
                 "--exec", "h1 ping -c1 -W2 10.0.2.1", "--exec", "h2 false"], tmp_path)
    assert "h1$ ping -c1 -W2 10.0.2.1 -> exit 0" in r.stderr
    assert r.returncode == 1


def test_the_mininet_cli_prints_each_line_once(tmp_path: Path) -> None:
    """A command typed at `testbed up`'s prompt: its output once, as the command wrote it, not
    a second time behind a logging prefix ("Level 25:mininet:")."""
    r = subprocess.run(TESTBED + ["up", "--spines", "1", "--leaves", "2", "--hosts-per-leaf",
                                  "1", "--results", str(tmp_path)],
                       input="h1 ping -c1 -W2 h2\nexit\n", capture_output=True, text=True,
                       timeout=180, cwd=Path(__file__).parent.parent)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert out.count("1 packets transmitted, 1 received") == 1, out
    assert "Level 25" not in out, out


def _start_background(tmp: Path) -> subprocess.Popen:
    """`testbed up` with a command on h1 that ignores SIGHUP (as anything started under nohup
    does): ending h1's shell does not end it, and teardown must still leave nothing behind."""
    p = subprocess.Popen(TESTBED + ["up", "--spines", "1", "--leaves", "2", "--hosts-per-leaf",
                                    "1", "--exec", "h1 nohup sleep 120 >/dev/null 2>&1",
                                    "--results", str(tmp)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=Path(__file__).parent.parent,
                         # Ctrl-C reaches it as in a terminal, even when this test run was
                         # started in the background (which ignores SIGINT in its children)
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline:
        if len(leftovers()["switches"]) == 3 and any(
                tmp.glob("*/topology.json")):
            return p
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.2)
    p.kill()
    raise AssertionError("fabric did not come up")


def test_down_stops_a_running_fabric(tmp_path: Path) -> None:
    before = net_namespaces()
    p = _start_background(tmp_path)
    r = subprocess.run(TESTBED + ["down"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    p.wait(timeout=30)
    assert_clean(before)


def test_clean_after_a_crash(tmp_path: Path) -> None:
    before = net_namespaces()
    p = _start_background(tmp_path)
    p.send_signal(signal.SIGKILL)  # no teardown at all
    p.wait()
    assert leftovers()["switches"], "the crash should have left switches running"
    r = subprocess.run(TESTBED + ["clean"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert_clean(before)


def test_ctrl_c_tears_down(tmp_path: Path) -> None:
    before = net_namespaces()
    p = _start_background(tmp_path)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    assert_clean(before)



SMALL = ["up", "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1", "--pingall"]


def test_a_second_fabric_is_refused_while_one_is_up(tmp_path: Path) -> None:
    """Mininet's names are machine-wide: a second fabric would tear down the first's."""
    before = net_namespaces()
    p = _start_background(tmp_path / "first")
    try:
        first = leftovers()
        r = run_cli(SMALL, tmp_path / "second")
        assert r.returncode == 1
        assert "a fabric is already up on this machine" in r.stderr, r.stderr
        assert "testbed down" in r.stderr and "Traceback" not in r.stderr
        # the first fabric untouched: its switches, links and record
        after = leftovers()
        assert after["switches"] == first["switches"]
        assert after["interfaces"] == first["interfaces"] and after["states"] == first["states"]
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    assert_clean(before)


def test_a_fabric_first_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    """A run killed with no teardown leaves its switches taking the CPU; the next fabric (of
    the same name) removes them before it starts, and says so."""
    before = net_namespaces()
    p = _start_background(tmp_path / "first")
    killed = set(leftovers()["switches"])
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = run_cli(SMALL, tmp_path / "second")
    assert r.returncode == 0, r.stderr
    assert "removed what the killed run" in r.stderr, r.stderr
    assert "pingall: 2/2 answered" in r.stderr
    assert not killed & set(leftovers()["switches"])
    assert_clean(before)  # and the nohup sleep in the killed run's h1

def _send_flows(fabric: Fabric, src: str, dst_ip: str, n: int) -> None:
    """n UDP flows (distinct source ports), 3 packets each, paced like a host NIC would be:
    back-to-back bursts into BMv2 lose packets before the P4 program sees them."""
    script = (
        "import socket, time\n"
        f"for sport in range(49152, 49152 + {n}):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    s.bind(('0.0.0.0', sport))\n"
        "    for _ in range(3):\n"
        f"        s.sendto(b'x' * 64, ('{dst_ip}', 4791))\n"
        "        time.sleep(0.002)\n"
        "    s.close()\n"
    )
    code = base64.b64encode(script.encode()).decode()  # one line for the node's shell
    fabric.host(src).cmd(f"{sys.executable} -c \"import base64; exec(base64.b64decode('{code}'))\"")


def _uplink_tx(fabric: Fabric, leaf: str, expect_total: int) -> dict[int, int]:
    """Uplink TX counters, once BMv2 (which works asynchronously) has counted expect_total."""
    sw = fabric.topo.switch(leaf)
    deadline = time.monotonic() + 10
    while True:
        counts = fabric.sessions[leaf].read_counter("RoceEgress.tx_port")
        tx = {p: counts.get(p, (0, 0))[0] for p, port in sw.ports.items()
              if port.peer.startswith("spine")}
        if sum(tx.values()) >= expect_total or time.monotonic() > deadline:
            return tx
        time.sleep(0.1)


def _reprogram_hash(fabric: Fabric, fields: list[str]) -> None:
    for sw in fabric.topo.switches:
        sess: SwitchSession = fabric.sessions[sw.name]
        prog = build_switch_program(sess.builder, sw, [], fabric.cfg, hash_fields=fields)
        sess.write(prog.modify, 2)


def test_ecmp_spreads_flows_over_every_uplink_and_polarizes_without_sport(tmp_path: Path) -> None:
    cfg = FabricConfig.model_validate({"fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 2}})
    with Fabric(cfg, build_topology(cfg), tmp_path) as fabric:
        _send_flows(fabric, "h1", "10.0.4.1", 32)
        tx = _uplink_tx(fabric, "leaf1", 96)
        assert all(v > 0 for v in tx.values()), tx
        assert sum(tx.values()) == 96
        _reprogram_hash(fabric, ["src_ip", "dst_ip", "ip_proto", "dst_port"])
        _send_flows(fabric, "h1", "10.0.4.1", 32)
        tx2 = _uplink_tx(fabric, "leaf1", 192)
        grew = [p for p in tx2 if tx2[p] > tx[p]]
        assert len(grew) == 1, (tx, tx2)
        assert tx2[grew[0]] - tx[grew[0]] == 96


def test_link_down_routes_around_it_and_link_up_brings_it_back(tmp_path: Path) -> None:
    cfg = FabricConfig.model_validate({"fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 2}})
    with Fabric(cfg, build_topology(cfg), tmp_path) as fabric:
        to_spine1 = peer_ports(fabric.topo, "leaf1", "spine1")[0]
        changed = fabric.set_link("leaf1", "spine1", up=False)
        assert {"leaf1", "spine1", "leaf2", "leaf3", "leaf4"} <= set(changed), changed
        _send_flows(fabric, "h1", "10.0.4.1", 32)
        tx = _uplink_tx(fabric, "leaf1", 96)
        assert tx[to_spine1] == 0 and sum(tx.values()) == 96, tx
        # the way back: leaf4 no longer hands leaf1's traffic to spine1
        _send_flows(fabric, "h7", "10.0.1.1", 32)
        back = _uplink_tx(fabric, "leaf4", 96)
        assert back[peer_ports(fabric.topo, "leaf4", "spine1")[0]] == 0, back
        answered, sent = fabric.pingall()
        assert answered == sent == 56  # every pair still reaches every other
        fabric.set_link("leaf1", "spine1", up=True)
        _send_flows(fabric, "h1", "10.0.4.1", 32)
        tx2 = _uplink_tx(fabric, "leaf1", 192)
        assert tx2[to_spine1] > 0, tx2  # the link carries flows again


def _tcp_answers(addr: str, port: int, ns_pid: int | None = None) -> bool:
    if ns_pid is None:
        try:
            with socket.create_connection((addr, port), timeout=1):
                return True
        except OSError:
            return False
    r = subprocess.run(["nsenter", "-t", str(ns_pid), "-n", sys.executable, "-c",
                        f"import socket; socket.create_connection(('{addr}', {port}), timeout=1)"],
                       capture_output=True)
    return r.returncode == 0


def test_management_is_unreachable_off_the_switch(tmp_path: Path) -> None:
    cfg = FabricConfig.model_validate({"fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1}})
    with Fabric(cfg, build_topology(cfg), tmp_path) as fabric:
        leaf = fabric.net.get("leaf1")
        thrift = cfg.switch.thrift_port
        # the Thrift server is there, inside the switch's own namespace ...
        assert _tcp_answers("127.0.0.1", thrift, leaf.pid)
        # ... and answers on no other address: not the machine's, not from a host on the fabric
        root_addrs = subprocess.run(["hostname", "-I"], capture_output=True,
                                    text=True).stdout.split()
        for addr in ["127.0.0.1", *root_addrs]:
            for port in (thrift, 9559):
                assert not _tcp_answers(addr, port), f"{addr}:{port} answers"
        h1 = fabric.host("h1")
        for addr in ("10.0.1.254", "10.0.2.254"):
            assert not _tcp_answers(addr, thrift, h1.pid)
        # no TCP listener in the switch namespace but Thrift; gRPC is a unix socket
        listeners = leaf.cmd("ss -Hltn").split("\n")
        ports = {ln.split()[3].rsplit(":", 1)[1] for ln in listeners if ln.strip()}
        assert ports == {str(thrift)}, listeners
        # no IPv6 link-local on switch ports, so nothing is reachable over them either
        assert "inet6" not in leaf.cmd("ip -6 addr show")
        assert Path(str(RUNTIME_DIR / cfg.name / "leaf1.grpc")).is_socket()


def _sched(pid: int) -> tuple[int, int, int]:
    """(policy, real-time priority, nice) of a process and its threads' leader."""
    return (os.sched_getscheduler(pid), os.sched_getparam(pid).sched_priority,
            os.getpriority(os.PRIO_PROCESS, pid))


def test_agents_run_real_time_and_change_their_gates_themselves(tmp_path: Path) -> None:
    """agent.realtime_priority reaches each switch agent and all its threads (SCHED_FIFO: a
    PFC frame preempts the BMv2 and host processes that fill the cores), by default at 10;
    0 leaves them at agent.nice. One agent process serves the three switches
    (agent.one_process), or one process per switch. No `tc` process stands between a PFC
    frame and its gate: the agent changes the gates over its own netlink sockets
    (testbed.machine.qdisc_netlink). The run's summary says what the agents ran at."""
    import json

    import psutil

    for rt, one, expected in ((10, True, (os.SCHED_FIFO, 10)), (0, True, (os.SCHED_OTHER, 0)),
                              (None, False, (os.SCHED_FIFO, 10))):
        written = {} if rt is None else {"realtime_priority": rt}
        label = f"rt{'d' if rt is None else rt}{one:d}"
        cfg = FabricConfig.model_validate({"name": label, "fabric": {
            "spines": 1, "leaves": 2, "hosts_per_leaf": 1},
            "agent": {**written, "nice": -7, "one_process": one}})
        topo = build_topology(cfg)
        with Fabric(cfg, topo, tmp_path / label) as fabric:
            procs = fabric.agent_pool.procs
            assert len(procs) == (1 if one else 3)
            for p in procs:
                agent = psutil.Process(p.pid)
                assert not agent.children(recursive=True), agent.children(recursive=True)
                for pid in (agent.pid, *(t.id for t in agent.threads())):
                    policy, prio, nice = _sched(pid)
                    assert (policy, prio) == expected, (rt, pid, policy, prio)
                    if not rt:
                        assert nice == -7, (pid, nice)
        summary = json.loads((tmp_path / label / "telemetry" / "summary.json").read_text())
        assert summary["agents"] == {"scheduling": "nice -7" if rt == 0 else "SCHED_FIFO 10",
                                     "refused": None}


def test_a_refused_real_time_priority_is_said_or_stops_the_run(tmp_path: Path,
                                                              monkeypatch) -> None:
    """On a machine that refuses SCHED_FIFO (a container without CAP_SYS_NICE), the agents go
    on at agent.nice. Under the default agent.realtime_priority the run says so as it starts
    and in its summary; when the config wrote the priority, the run stops with one line that
    names the field and the fix, and leaves nothing behind. (Root may always take SCHED_FIFO,
    so the agents' scheduling is read as the refusing machine would show it.)"""
    import json

    import testbed.fabric.agents
    from testbed.fabric.network import FabricError
    from testbed.machine.state import running_elsewhere

    monkeypatch.setattr(testbed.fabric.agents.os, "sched_getscheduler", lambda _pid: os.SCHED_OTHER)
    said: list[str] = []
    cfg = FabricConfig.model_validate({"name": "rtrefused", "fabric": {
        "spines": 1, "leaves": 2, "hosts_per_leaf": 1}})
    with Fabric(cfg, build_topology(cfg), tmp_path / "default", progress=said.append):
        pass
    refused = [m for m in said if "agent.realtime_priority 10 was refused" in m]
    assert len(refused) == 1 and "3 of 3 switch agent processes run at nice -10" in refused[0]
    summary = json.loads((tmp_path / "default" / "telemetry" / "summary.json").read_text())
    assert summary["agents"] == {"scheduling": "nice -10", "refused": refused[0]}

    cfg = FabricConfig.model_validate({"name": "rtwritten", "fabric": {
        "spines": 1, "leaves": 2, "hosts_per_leaf": 1}, "agent": {"realtime_priority": 20}})
    with pytest.raises(FabricError) as e:
        Fabric(cfg, build_topology(cfg), tmp_path / "written").start()
    msg = str(e.value)
    assert "\n" not in msg and "agent.realtime_priority 20 was refused" in msg
    assert msg.endswith("or set agent.realtime_priority: 0")
    assert running_elsewhere() is None and not (RUNTIME_DIR / "rtwritten").exists()


def test_switches_run_real_time_below_the_agents(tmp_path: Path, monkeypatch) -> None:
    """switch.realtime_priority reaches every thread of every BMv2 (SCHED_FIFO 5 by default,
    below the agents' 10, so a PFC frame still preempts the switch); 0 leaves them at
    switch.nice. The run says what they ran at (telemetry/summary.json's ``bmv2``). On a
    machine that refuses SCHED_FIFO the switches go on at switch.nice and the run says so,
    unless the config wrote the priority: then the run stops with one line naming the field
    and the fix, and leaves nothing behind."""
    import json

    import psutil

    import testbed.fabric.network
    from testbed.fabric.network import FabricError
    from testbed.machine.state import running_elsewhere

    def threads_sched(fabric: Fabric) -> set[tuple[int, int, int]]:
        out = set()
        for sw in fabric.topo.switches:
            bmv2 = psutil.Process(fabric.net.get(sw.name).bmv2.pid)
            assert bmv2.name() == "simple_switch_grpc"  # chrt and nice exec'd into it
            out |= {_sched(t.id) for t in bmv2.threads()}
        return out

    shape = {"spines": 1, "leaves": 2, "hosts_per_leaf": 1}
    for label, switch, expected, said in (
            ("swrtd", {}, (os.SCHED_FIFO, 5, None), "SCHED_FIFO 5"),
            ("swrt0", {"realtime_priority": 0, "nice": -3}, (os.SCHED_OTHER, 0, -3), "nice -3")):
        cfg = FabricConfig.model_validate({"name": label, "fabric": shape, "switch": switch})
        with Fabric(cfg, build_topology(cfg), tmp_path / label) as fabric:
            scheds = threads_sched(fabric)
            assert {(p, prio) for p, prio, _n in scheds} == {expected[:2]}, scheds
            if expected[2] is not None:
                assert {n for _p, _prio, n in scheds} == {expected[2]}, scheds
        summary = json.loads((tmp_path / label / "telemetry" / "summary.json").read_text())
        assert (summary["bmv2"]["scheduling"], summary["bmv2"]["refused"]) == (said, None)

    monkeypatch.setattr(testbed.fabric.network, "realtime_allowed", lambda _prio: False)
    lines: list[str] = []
    cfg = FabricConfig.model_validate({"name": "swrtno", "fabric": shape})
    with Fabric(cfg, build_topology(cfg), tmp_path / "refused", progress=lines.append) as fab:
        assert {(p, prio) for p, prio, _n in threads_sched(fab)} == {(os.SCHED_OTHER, 0)}
    refused = [m for m in lines if "switch.realtime_priority 5 was refused" in m]
    assert len(refused) == 1 and "run at nice -5" in refused[0], lines
    summary = json.loads((tmp_path / "refused" / "telemetry" / "summary.json").read_text())
    assert summary["bmv2"]["scheduling"] == "nice -5" and summary["bmv2"]["refused"] == refused[0]

    cfg = FabricConfig.model_validate({"name": "swrtwr", "fabric": shape,
                                       "switch": {"realtime_priority": 3}})
    with pytest.raises(FabricError) as e:
        Fabric(cfg, build_topology(cfg), tmp_path / "written").start()
    msg = str(e.value)
    assert "\n" not in msg and "switch.realtime_priority 3 was refused" in msg
    assert msg.endswith("or set switch.realtime_priority: 0")
    assert running_elsewhere() is None and not (RUNTIME_DIR / "swrtwr").exists()


def test_each_switch_runs_on_one_core_dealt_round_robin(tmp_path: Path) -> None:
    """switch.one_core_each (the default) holds every thread of each BMv2 on one core, from
    its start, the switches dealt over the cores this run may use in turn, and the run records
    where each ran (telemetry/summary.json's ``bmv2.cores``); false leaves every thread free to
    run on any of them."""
    import json

    import psutil

    allowed = sorted(os.sched_getaffinity(0))
    shape = {"spines": 1, "leaves": 2, "hosts_per_leaf": 1}
    for label, switch in (("cored", {}), ("corefree", {"one_core_each": False})):
        cfg = FabricConfig.model_validate({"name": label, "fabric": shape, "switch": switch})
        with Fabric(cfg, build_topology(cfg), tmp_path / label) as fabric:
            placed = {}
            dealt = {s.name: allowed[i % len(allowed)]
                     for i, s in enumerate(fabric.topo.switches)}
            for sw in fabric.topo.switches:
                bmv2 = psutil.Process(fabric.net.get(sw.name).bmv2.pid)
                assert bmv2.name() == "simple_switch_grpc"  # taskset exec'd into it
                threads = bmv2.threads()
                assert len(threads) > 4  # BMv2's packet threads, made after its start
                placed[sw.name] = {tuple(sorted(os.sched_getaffinity(t.id))) for t in threads}
        summary = json.loads((tmp_path / label / "telemetry" / "summary.json").read_text())
        if switch.get("one_core_each", True):
            assert placed == {name: {(core,)} for name, core in dealt.items()}, placed
            assert summary["bmv2"]["cores"] == dealt
        else:
            assert all(cores == {tuple(allowed)} for cores in placed.values()), placed
            assert summary["bmv2"]["cores"] == {}


def test_counters_read_from_the_kernel_match_ip_and_tc(tmp_path: Path) -> None:
    """testbed.fabric.measure reads each port's veth and class gates straight from the switch's
    namespace (/proc/PID/net/dev, one netlink dump): the same numbers `ip -s link` and
    `tc -s qdisc` give, after traffic crossed every switch."""
    import json

    from testbed.config.constants import gate_class
    from testbed.fabric.measure import kernel_stats, rx_counters, veth_rx
    from testbed.topology.graph import intf_name

    cfg = FabricConfig.model_validate({"name": "ctr", "fabric": {
        "spines": 1, "leaves": 2, "hosts_per_leaf": 1}})
    topo = build_topology(cfg)
    with Fabric(cfg, topo, tmp_path) as fabric:
        assert fabric.pingall() == (2, 2)
        for sw in topo.switches:
            node = fabric.net.get(sw.name)
            ports = list(sw.ports)
            got_rx, got_kern = veth_rx(node, ports, sw.name), kernel_stats(node, ports, sw.name)
            for p in ports:
                ifname = intf_name(sw.name, p)
                ip = json.loads(node.cmd(f"ip -s -j link show dev {ifname}"))
                assert got_rx[p] == ip[0]["stats64"]["rx"]["packets"] > 0, (sw.name, p)
                tc = {gate_class(int(q["handle"].split(":")[0], 16)): q for q in json.loads(
                    node.cmd(f"tc -s -j qdisc show dev {ifname}")) if q["kind"] == "tbf"}
                assert set(got_kern[p]) == set(tc)
                for c, q in tc.items():
                    assert got_kern[p][c] == {
                        "backlog_bytes": q["backlog"], "backlog_packets": q["qlen"],
                        "drops": q["drops"], "sent_bytes": q["bytes"],
                        "sent_packets": q["packets"]}, (sw.name, p, c)
            assert sum(s["sent_packets"] for per in got_kern.values() for s in per.values())
            arrivals = rx_counters(fabric, sw.name)
            assert all(pc.p4_rx_packets > 0 and pc.hidden_loss >= 0 for pc in arrivals.values())
        assert veth_rx(fabric.net.get("leaf1"), [99], "leaf1") == {99: -1}
