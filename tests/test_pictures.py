"""docs/pictures.py draws README's pictures only from runs the fidelity guard called faithful,
and records each run's verdict beside the figures. Pure: it draws from a synthetic results
folder (tests/synthetic_run.py) left where ``--keep`` would leave a run, with ``--runs``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.synthetic_run import write_run

REPO = Path(__file__).resolve().parent.parent


def _kept_run(root: Path, fidelity: dict | None) -> Path:
    """A kept run of slow-receiver: ``root/slow-receiver/<run>/``, whose summary.json carries
    ``fidelity`` (none when None)."""
    d = write_run(root / "slow-receiver" / "slow-receiver-20261203-120000")
    summary = json.loads((d / "summary.json").read_text())
    summary["pfc_frames_sent"] = {"leaf1": 40, "leaf2": 9}  # as a run's summary counts them
    if fidelity is not None:
        summary["fidelity"] = fidelity
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def _draw(root: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "docs" / "pictures.py"), "slow-receiver",
                           "--runs", str(root), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_a_faithful_run_is_drawn_with_its_verdict(tmp_path):
    pytest.importorskip("matplotlib")
    _kept_run(tmp_path / "runs", {"ok": True, "reasons": [], "checks": []})
    res = _draw(tmp_path / "runs", tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "slow-receiver.png").stat().st_size > 0
    figures = json.loads((tmp_path / "out" / "slow-receiver.json").read_text())
    assert figures["fidelity"] == {"slow-receiver": {"ok": True, "reasons": []}}
    assert (figures["pfc_frames"], figures["lossless_drops"]) == (49, 2)  # the run's own


@pytest.mark.parametrize("fidelity, why", [
    ({"ok": False, "reasons": ["BMv2 held a lossless packet 80000 us"], "checks": []},
     "BMv2 held a lossless packet 80000 us"),
    (None, "no fidelity verdict"),
])
def test_a_run_not_called_faithful_is_refused(tmp_path, fidelity, why):
    _kept_run(tmp_path / "runs", fidelity)
    res = _draw(tmp_path / "runs", tmp_path / "out")
    assert res.returncode == 1
    assert "not drawing slow-receiver" in res.stderr and why in res.stderr
    assert not (tmp_path / "out" / "slow-receiver.png").exists()
    assert not (tmp_path / "out" / "slow-receiver.json").exists()
