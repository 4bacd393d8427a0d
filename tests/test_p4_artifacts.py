"""The compiled P4 program committed in p4/compiled must match the P4 source."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.control.entries import BMV2_JSON_PATH, P4_DIR, P4INFO_PATH, load_p4info

SOURCES = ["roce_switch.p4", "headers.p4", "parser.p4", "ingress.p4", "egress.p4"]


def test_artifacts_are_committed_and_name_what_the_control_plane_uses() -> None:
    assert BMV2_JSON_PATH.exists() and P4INFO_PATH.exists()
    info = load_p4info()
    tables = {t.preamble.name for t in info.tables}
    assert {"RoceIngress.ipv4_route", "RoceIngress.dscp_to_tc",
            "RoceIngress.hash_config"} <= tables
    assert {p.preamble.name for p in info.action_profiles} == {"RoceIngress.ecmp_selector"}
    counters = {c.preamble.name for c in info.counters}
    assert {"RoceIngress.rx_port", "RoceIngress.rx_port_tc", "RoceIngress.drops",
            "RoceIngress.pfc_rx", "RoceEgress.tx_port", "RoceEgress.tx_port_tc"} <= counters
    json.loads(BMV2_JSON_PATH.read_text())


def test_artifacts_are_not_stale(tmp_path: Path) -> None:
    p4c = shutil.which("p4c-bm2-ss")
    if p4c is None:
        pytest.skip("needs p4c: p4c-bm2-ss is not installed, so staleness cannot be checked")
    out_json = tmp_path / "roce_switch.json"
    out_info = tmp_path / "roce_switch.p4info.txtpb"
    r = subprocess.run([p4c, "--arch", "v1model", "--std", "p4-16", "--p4runtime-files",
                        str(out_info), "-o", str(out_json), "roce_switch.p4"],
                       cwd=P4_DIR, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out_info.read_text() == P4INFO_PATH.read_text(), (
        "p4/compiled/roce_switch.p4info.txtpb is stale: run `make -C p4`")
    assert json.loads(out_json.read_text()) == json.loads(BMV2_JSON_PATH.read_text()), (
        "p4/compiled/roce_switch.json is stale: run `make -C p4`")
