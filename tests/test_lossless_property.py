"""Losslessness as a property: seeded random shapes and incasts, each must lose nothing in the
lossless class with PFC on (see tests/lossless_cases.py for how a seed becomes a case).

The default set runs a few cases and a fixed sample of 8 of the seeded set (CI runs both); the
slow set (``pytest -m slow tests/test_lossless_property.py``) runs the other 16. ``--seed N``
(several allowed) replays given cases, e.g. the one a failure printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lossless_cases import lossless_failures, make_case, run_case

#: The slow set (``pytest -m slow``): all 24. CI runs a fixed sample of 8 of them (every third,
#: shapes from 2 to 6 leaves), beside the three default seeds.
SLOW_SEEDS = list(range(1001, 1025))
CI_SEEDS = SLOW_SEEDS[::3]
DEFAULT_SEEDS = [11, 23, 37]


def _check(seed: int, tmp_path: Path) -> None:
    case = make_case(seed)
    print(f"\n{case.describe()}  (replay: pytest tests/test_lossless_property.py --seed {seed})")
    r = run_case(case, tmp_path)
    print(json.dumps({k: r[k] for k in ("kernel_drops_lossless", "hidden_loss", "pfc_frames",
                                        "drift_bytes", "held_bytes")}))
    problems = lossless_failures(r)
    assert not problems, f"{case.describe()}: " + "; ".join(problems)
    assert r["pfc_frames"] > 0 or len(case.senders) * case.qps == 1, \
        "no PFC frame: the case never congested a queue"


def test_case_is_a_pure_function_of_its_seed() -> None:
    assert make_case(1234) == make_case(1234)
    cases = [make_case(s) for s in range(200)]
    assert {c.spines for c in cases} == {2, 3, 4}
    assert {c.leaves for c in cases} == {2, 3, 4, 5, 6}
    assert {c.parallel_links for c in cases} == {1, 2}
    for c in cases:
        hosts = c.leaves * c.hosts_per_leaf
        assert 2 <= len(c.senders) <= hosts - 1 and c.receiver not in c.senders
        assert len(set(c.senders)) == len(c.senders)
    assert max(len(c.senders) for c in cases) >= 10  # incasts up to "every other host"



@pytest.mark.bmv2
def test_incast_is_lossless(lossless_seed: int, tmp_path: Path) -> None:
    """Default set: DEFAULT_SEEDS, or the seeds given with --seed."""
    _check(lossless_seed, tmp_path)


@pytest.mark.bmv2
@pytest.mark.parametrize("seed", [pytest.param(s, marks=[] if s in CI_SEEDS else
                                               [pytest.mark.slow]) for s in SLOW_SEEDS])
def test_seeded_incast_is_lossless(seed: int, tmp_path: Path) -> None:
    _check(seed, tmp_path)
