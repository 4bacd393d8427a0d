"""The hosts' receive waits (traffic.rx_wait): read from the kernel's own stamp of a frame's
arrival, and said beside the fidelity verdict, never as a check, once they reach a switch's
allowed hold."""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from types import SimpleNamespace

from testbed.analysis.fidelity import Budgets, Figures, assess, lines
from traffic.rx_wait import RxWaitMeter, arrival_time

BUDGET = Budgets(headroom_bytes=40_000, reaction_us=20_000, bmv2_lag_us=50_000,
                 cpu_saturated_s=1.0, steal_note_pct=5.0)
GOOD = Figures(pfc_enabled=True, lossless_drops=0, pipeline_drops=0, hidden_loss=0,
               host_loss=0, phantom_below_bytes=3000, buffer_exceeded_bytes=0,
               bmv2_lag_us=5000, bmv2_stall_us=2000, agent_reaction_us=900,
               host_lag_pct=0.3, cpu_saturated_s=0.2)


def test_a_frame_that_waited_in_the_socket_is_measured_by_the_kernels_stamp() -> None:
    """A datagram left 0.1 s in its socket before it is read waited at least that long; the
    first one after the meter is made (stamping on) is measured too."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    stats = SimpleNamespace()
    meter = RxWaitMeter(stats, rx)
    assert stats.rx_wait_max_s == 0.0
    # The kernel turns its stamping on a moment after it is asked (net_enable_timestamp
    # defers it): until then a frame's stamp reads as the time it was asked for. Wait for a
    # probe to come back stamped before it was read, as the endpoint's first frames do.
    for _ in range(200):
        tx.sendto(b"p", rx.getsockname())
        time.sleep(0.01)
        rx.recv(16)
        at = arrival_time(rx)
        if at is not None and at < time.time() - 0.005:
            break
    stats.rx_wait_max_s = 0.0  # the probes' waits are not this test's
    tx.sendto(b"x", rx.getsockname())
    time.sleep(0.1)
    rx.recv(16)
    meter.first(rx)
    assert 0.1 <= stats.rx_wait_max_s < 60
    tx.sendto(b"y", rx.getsockname())
    rx.recv(16)
    before = stats.rx_wait_max_s
    meter.first(rx)  # read at once: the longest stays
    assert stats.rx_wait_max_s == before
    at = arrival_time(rx)
    assert at is not None and abs(at - time.time()) < 60
    rx.close()
    tx.close()
    assert arrival_time(rx) is None  # a closed socket cannot say


def test_a_long_receive_wait_is_a_note_not_a_check() -> None:
    """At fidelity.bmv2_lag_ms (50 ms here) the wait is said beside the verdict, with the
    host; below it, or unmeasured, nothing; either way the run stays faithful."""
    v = assess(replace(GOOD, rx_wait_ms=62.0, rx_wait_host="h3"), BUDGET)
    assert v["ok"] and v["rx_wait"]["max_ms"] == 62.0 and v["rx_wait"]["host"] == "h3"
    assert "rx_wait" not in {c["name"] for c in v["checks"]}
    said = "\n".join(lines(v))
    assert "note: a frame waited 62 ms in h3's endpoint socket" in said
    assert "fidelity.bmv2_lag_ms" in said
    for quiet in (replace(GOOD, rx_wait_ms=49.9, rx_wait_host="h3"), GOOD):
        v = assess(quiet, BUDGET)
        assert v["rx_wait"]["note"] is None and "socket" not in "\n".join(lines(v))
