"""The one quantile every figure of a run uses."""

from __future__ import annotations

import math


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank q-quantile (0 < q <= 1): a value that was measured, never one
    interpolated between two; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
