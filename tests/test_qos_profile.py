"""`qos.profile: sonic`: the queue layout SONiC's test plans assume, as a user picks it for a
scenario; what it sets, what a field written beside it replaces, and a real run in which the
hosts mark, the switches classify and pause, and the tester counts, each by the profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.config.models import ConfigError, QosConfig
from testbed.topology.validate import load_config

REPO = Path(__file__).resolve().parent.parent


def test_the_sonic_profile_is_the_plans_layout() -> None:
    q = QosConfig.model_validate({"profile": "sonic"})
    assert q.pfc_enable == [3, 4] and sorted(q.ecn) == [3, 4]
    assert q.cnp_dscp == 48 and q.cnp_tc == 6
    # the hosts mark each class with a DSCP the switches put in it: 3 and 4 lossless, 0-2 lossy
    assert q.tc_to_dscp() == {0: 8, 1: 0, 2: 5, 3: 3, 4: 4, 5: 46, 6: 48}
    assert 26 not in q.dscp_to_tc_map and q.default_tc == 1  # RoCE's usual 26: class 1 here


def test_a_field_written_beside_the_profile_replaces_the_profiles() -> None:
    q = QosConfig.model_validate({"profile": "sonic", "pfc_enable": [3], "ecn": {}})
    assert q.pfc_enable == [3] and q.ecn == {} and q.dscp_to_tc_map[4] == 4
    # the profile keeps CNPs out of the lossless classes; a user who pauses class 6 is refused
    with pytest.raises(ValueError, match="class 6 carries CNPs"):
        QosConfig.model_validate({"profile": "sonic", "pfc_enable": [3, 6]})


def test_an_unknown_profile_is_one_named_line(tmp_path: Path) -> None:
    f = tmp_path / "f.yaml"
    f.write_text("qos: {profile: azure}\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    text = info.value.render()
    assert "qos.profile" in text and "'sonic'" in text and "Traceback" not in text


SCENARIO = """
name: sonic-profile
fabric: {spines: 0, leaves: 1, hosts_per_leaf: 4}
qos: {profile: sonic}
endpoints: {dcqcn: false}
duration_s: 6
settle_s: 1
flows:
  - {name: c3-h2, src: h2, dst: h1, tc: 3, message_bytes: 65536, duration_s: 2, start_s: 0.5}
  - {name: c3-h3, src: h3, dst: h1, tc: 3, message_bytes: 65536, duration_s: 2, start_s: 0.5}
  - {name: c4-h2, src: h2, dst: h1, tc: 4, message_bytes: 65536, duration_s: 2, start_s: 3.0}
  - {name: c4-h4, src: h4, dst: h1, tc: 4, message_bytes: 65536, duration_s: 2, start_s: 3.0}
"""


@pytest.mark.bmv2
def test_both_lossless_classes_of_the_profile_pause_and_lose_nothing(tmp_path: Path) -> None:
    """A 2:1 incast in class 3, then one in class 4 (one at a time; conformance case pfc.dual
    has them share the port). Each is paused in its own class, nothing is lost, and the switch
    port toward h1 sent it every frame of each class the tester counted."""
    sc = tmp_path / "sc.yaml"
    sc.write_text(SCENARIO)
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(sc), "--results",
                        str(tmp_path / "results")], capture_output=True, text=True,
                       timeout=180, cwd=REPO, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(next((tmp_path / "results").glob("*/summary.json")).read_text())
    assert summary["fidelity"]["ok"] is True, summary["fidelity"]["reasons"]
    assert summary["kernel_drops_lossless"] == 0
    by_class = summary["pfc_frames_by_class"]
    assert by_class.get("3", 0) > 0 and by_class.get("4", 0) > 0, by_class
    assert all(f["bytes_received"] > 0 for f in summary["flows"].values())
    tester = summary["tester"]
    for tc in ("3", "4"):
        port = tester["ports"]["h1"][tc]
        h1 = tester["hosts"]["h1"][tc]
        assert port["frames_sent"] == h1["data_received"] > 0, (tc, port, h1)
