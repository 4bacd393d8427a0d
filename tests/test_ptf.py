"""Runs the PTF data-plane suite (tests/ptf) against a real BMv2 with our program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.constants import AGENT_PORT
from tests.dataplane import bmv2_harness

PTF_DIR = Path(__file__).parent / "ptf"


@pytest.mark.bmv2
def test_ptf_suite(tmp_path: Path) -> None:
    ptf = shutil.which("ptf") or str(Path(sys.executable).parent / "ptf")
    if not Path(ptf).exists():
        pytest.skip("needs PTF: pip install ptf")
    with bmv2_harness(5, extra_ports=(AGENT_PORT,)) as h:
        h.session.close()  # the PTF tests become the primary controller
        cmd = ["ip", "netns", "exec", h.ns, sys.executable, ptf, "--test-dir", str(PTF_DIR),
               "--log-file", str(tmp_path / "ptf.log"),
               "--test-params", f"grpc_addr='{h.grpc_addr}';device_id={h.device_id}"]
        for p in h.ports:
            cmd += ["-i", f"{p}@{h.ptf_intf(p)}"]
        # the ptf script's own folder heads sys.path, not the cwd: name this checkout, or the
        # tests import whatever testbed the venv has installed (another checkout's)
        repo = str(Path(__file__).parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [repo, *filter(None, [os.environ.get("PYTHONPATH")])])}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=repo, env=env)
        alive = h.switch.alive()
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0, f"PTF failed:\n{r.stderr[-6000:]}"
    assert "OK" in r.stderr
    assert alive, "BMv2 died during the data-plane tests"
