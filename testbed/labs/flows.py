"""Per-flow figures over a window of a run, from the endpoints' QP time series: what a flow
delivered, its rate, the DCQCN state of its QPs. Times are seconds after the run's start (the
timeline's ``start``), as the scenario's ``start_s`` counts them."""

from __future__ import annotations

from testbed.analysis.headline_series import run_start as run_start_of
from testbed.labs.evidence import RunData


def run_start(run: RunData) -> float:
    """The run's clock at the scenario's t=0."""
    return run_start_of(run.summary)


def _requester_rows(run: RunData, flow: str) -> list[dict]:
    f = run.summary.get("flows", {}).get(flow)
    if f is None:
        raise KeyError(flow)
    qpns = {str(q["qpn"]) for q in f.get("qps", [])}
    return [r for r in run.qp_series(f["src"]) if r["role"] == "requester" and r["qpn"] in qpns]


def _bytes_at(rows: list[dict], t: float) -> int:
    """Bytes acknowledged by time t, summed over the QPs (each QP's last sample at or before t)."""
    last: dict[str, int] = {}
    for r in rows:
        if float(r["t_s"]) <= t:
            last[r["qpn"]] = int(r["bytes"])
    return sum(last.values())


def goodput_bps(run: RunData, flow: str, from_s: float, to_s: float) -> float:
    """The flow's acknowledged payload over [from_s, to_s] after the run's start, in bit/s."""
    t0 = run_start(run)
    rows = _requester_rows(run, flow)
    delivered = _bytes_at(rows, t0 + to_s) - _bytes_at(rows, t0 + from_s)
    return 8 * delivered / max(to_s - from_s, 1e-9)


def dcqcn_state(run: RunData, flow: str) -> dict:
    """The flow's QPs over the run: the highest alpha, the lowest current rate (bit/s) and the
    CNPs they received."""
    rows = _requester_rows(run, flow)
    alphas = [float(r["alpha"]) for r in rows if r.get("alpha")]
    rates = [float(r["rate_bps"]) for r in rows if r.get("rate_bps")]
    cnps: dict[str, int] = {}
    for r in rows:
        cnps[r["qpn"]] = int(r["cnps_received"])
    return {"alpha_max": max(alphas, default=0.0), "rate_min_bps": min(rates, default=None),
            "cnps": sum(cnps.values()), "samples": len(rows)}
