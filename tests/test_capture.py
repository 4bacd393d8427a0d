"""Packet captures: targets checked before a run; on real BMv2, pcaps that tshark decodes into
RoCEv2 data, ACKs, CNPs, NAKs and PFC frames; a Ctrl-C leaves no capture process behind.

tshark decodes UDP port 4791 as InfiniBand (RoCEv2) by default (Wireshark's ``decode as``
table: ``tshark -G decodes`` lists ``udp.port 4791 infiniband``), and PFC frames as MAC
control (``macc``), with the class-based pause (CBFC) opcode 0x0101.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testbed.config.models import ConfigError
from testbed.fabric.measure import peer_ports
from testbed.run.capture import parse_target, target_problem
from testbed.run.scenario import parse_scenario
from testbed.run.scenario_run import run_scenario
from traffic.packets import ACK, CNP, DATA_OPCODES

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "testbed.cli"]
#: MAC control opcode of a PFC (class-based flow control) frame: IEEE 802.1Qbb, Annex 31D.
PFC_OPCODE = 0x0101
#: AETH syndrome bits 6-5 (InfiniBand Architecture Specification, 9.7.5.1): 0 ACK, 3 NAK.
AETH_NAK = 3

#: Two senders on leaf1 into one host on leaf2, over a single spine: leaf1's uplink is the
#: bottleneck, so its queue fills, ECN marks it and PFC pauses the senders' ports.
INCAST = {
    "name": "cap", "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
    "duration_s": 3, "settle_s": 0.5,
    "flows": [{"name": "a", "src": "h1", "dst": "h3", "qps": 2, "message_bytes": 16384,
               "duration_s": 2.5, "kind": "write"},
              {"name": "b", "src": "h2", "dst": "h3", "qps": 2, "message_bytes": 16384,
               "duration_s": 2.5, "kind": "send"}],
}


# -- targets, without root ----------------------------------------------------------------------

def test_targets_parse_and_are_named_in_errors() -> None:
    sc = parse_scenario(INCAST)
    assert parse_target("h1").file_name == "h1.pcap"
    assert parse_target("leaf1:2").file_name == "leaf1-p2.pcap"
    assert parse_target("leaf1:2").interface() == "leaf1-eth2"
    assert target_problem("h1", sc.topo) is None
    assert target_problem("leaf1:3", sc.topo) is None
    assert "unknown host 'h9'" in target_problem("h9", sc.topo)
    assert "unknown switch 'leaf7'" in target_problem("leaf7:1", sc.topo)
    assert "leaf1 has no port 9; its ports are 1..3" in target_problem("leaf1:9", sc.topo)
    assert "leaf1 is a switch: name one of its ports" in target_problem("leaf1", sc.topo)
    assert "neither a host" in target_problem("leaf1:x", sc.topo)


def test_scenario_refuses_an_unknown_capture_naming_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario({**INCAST, "capture": ["h1", "spine1:5"]})
    msg = info.value.render()
    assert "capture.1: spine1 has no port 5" in msg
    with pytest.raises(ConfigError) as info:
        parse_scenario({**INCAST, "capture_max_mb": 0})
    assert "capture_max_mb" in info.value.render()


def test_cli_refuses_an_unknown_capture_before_the_run(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(INCAST))
    r = subprocess.run([*CLI, "run", str(path), "--capture", "h1", "--capture", "h12"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2
    assert "--capture h12: unknown host 'h12'" in r.stderr
    assert "Traceback" not in r.stderr


# -- on a real fabric ---------------------------------------------------------------------------

def tshark(pcap: Path, fields: list[str], display_filter: str) -> list[list[str]]:
    """Each matching frame's fields, as tshark decodes them."""
    cmd = ["tshark", "-r", str(pcap), "-Y", display_filter, "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def opcodes(pcap: Path) -> dict[int, int]:
    """How many frames of each BTH opcode the capture holds."""
    counts: dict[int, int] = {}
    for (op,) in tshark(pcap, ["infiniband.bth.opcode"], "infiniband.bth"):
        counts[int(op, 0)] = counts.get(int(op, 0), 0) + 1
    return counts


def need_tshark() -> None:
    for tool in ("tshark", "dumpcap"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (apt install tshark)")


@pytest.mark.bmv2
def test_captures_hold_roce_data_acks_cnps_and_pfc(tmp_path: Path) -> None:
    need_tshark()
    sc = parse_scenario({**INCAST, "endpoints": {"dcqcn": True},
                         "capture": ["h1", "h3", "leaf1:1"]})
    assert peer_ports(sc.topo, "leaf1", "h1") == [1]
    res = run_scenario(sc, tmp_path, progress=lambda _m: None)
    caps = res.results_dir / "captures"
    assert sorted(res.summary["captures"]) == ["captures/h1.pcap", "captures/h3.pcap",
                                               "captures/leaf1-p1.pcap"]
    sender, receiver = opcodes(caps / "h1.pcap"), opcodes(caps / "h3.pcap")
    # h1 sends RDMA WRITEs and gets ACKs (and CNPs: leaf1's uplink queue was ECN-marked)
    assert sum(n for op, n in sender.items() if op in DATA_OPCODES) > 50, sender
    assert sender.get(ACK, 0) > 5 and sender.get(CNP, 0) > 0, sender
    # h3 receives SENDs too (flow b), and ECN-marked packets: CE on the wire
    assert {0x00, 0x01, 0x02, 0x04} & set(receiver), receiver
    ce = tshark(caps / "h3.pcap", ["ip.dsfield.ecn"], "infiniband.bth && ip.dsfield.ecn == 3")
    assert ce, "no CE-marked RoCE frame reached h3"
    # leaf1's port to h1 carries PFC frames for class 3 toward h1
    pfc = tshark(caps / "leaf1-p1.pcap", ["macc.opcode", "macc.cbfc.enbv.c3",
                                          "macc.cbfc.pause_time.c3"], "macc")
    assert pfc, "no MAC control frame on leaf1's port to h1"
    assert all(int(op, 0) == PFC_OPCODE for op, *_ in pfc), pfc[:3]
    assert any(c3 in ("1", "True") and int(t) > 0 for _op, c3, t in pfc), pfc[:5]
    assert not _dumpcaps(caps), "a capture outlived the run"


@pytest.mark.bmv2
def test_lossy_run_capture_shows_naks(tmp_path: Path) -> None:
    """PFC off, no ECN: leaf1's uplink queue overflows, the receiver sees a gap in the PSNs
    and answers with a NAK (Go-Back-N), which the sender's capture holds. A sender whose
    whole window is dropped hears nothing back and waits out its retransmission timer: at the
    default (4.2 s at 10 Mbit/s) that is past this 3 s run, so these senders use a Local ACK
    Timeout of n = 5 (0.52 s here), as the watchdog scenarios do. The overflow alone drops a
    window's tail, and the packets behind it find the queue as full: one run here had 10
    timeouts and 1 NAK over 4 QPs, none of them h1's. So h3's NIC also loses 2% of arrivals
    (rx_loss, seeded): a lost packet with more of its window behind it is a gap, NAKed. Which
    sender's packets it hits varies: one run gave h2's QPs 16 NAKs and h1's none (the queue
    kept dropping h1's whole windows: 5 timeouts a QP, 40 packets a QP got through), so both
    senders' captures are read, and the NAKs are looked for in either."""
    need_tshark()
    lossy = {**INCAST, "qos": {"pfc_enable": [], "ecn": {}, "buffer_bytes": 20000},
             "endpoints": {"dcqcn": False, "local_ack_timeout": 5}, "capture": ["h1", "h2"],
             "faults": [{"at_s": 0, "host": "h3", "mode": "rx_loss", "rate": 0.02,
                         "seed": 1}]}
    res = run_scenario(parse_scenario(lossy), tmp_path, progress=lambda _m: None)
    caps = [res.results_dir / "captures" / f"{h}.pcap" for h in ("h1", "h2")]
    syndromes = [s for pcap in caps
                 for s in tshark(pcap, ["infiniband.aeth.syndrome.opcode"], "infiniband.aeth")]
    naks = [s for (s,) in syndromes if int(s, 0) == AETH_NAK]
    assert naks, f"{len(syndromes)} ACK/NAKs, none a NAK"
    for pcap in caps:
        assert not tshark(pcap, ["macc.opcode"], "macc"), "PFC frames in a lossy run"


def _dumpcaps(caps: Path) -> list[int]:
    """PIDs of processes still writing into ``caps``."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "dumpcap" in cmd and str(caps) in cmd:
                found.append(int(p.name))
    return found


@pytest.mark.bmv2
def test_ctrl_c_leaves_no_capture_behind(tmp_path: Path) -> None:
    need_tshark()
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**INCAST, "name": "capint", "duration_s": 30,
                                    "capture": ["h1", "leaf1:3"]}))
    out = tmp_path / "results"
    # Ctrl-C at a terminal: SIGINT as its default (a shell's background job inherits it
    # ignored, and Python then never raises KeyboardInterrupt)
    proc = subprocess.Popen([*CLI, "run", str(path), "--results", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 90
    caps: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        caps = list(out.glob("*/captures"))
        if caps and any(p.stat().st_size > 10_000 for p in caps[0].glob("*.pcap")):
            break  # capturing, and traffic flows
        time.sleep(0.2)
    assert caps, "the run never started its captures"
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, text
    assert not _dumpcaps(caps[0]), "a capture outlived the run"
    # both files were written out whole: tshark reads them to the end without complaint
    for pcap in caps[0].glob("*.pcap"):
        r = subprocess.run(["tshark", "-r", str(pcap), "-q"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "cut short" not in r.stderr, (pcap, r.stderr)
