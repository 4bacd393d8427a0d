"""Best-effort background (traffic.background): the pacer, the scenario's checks of a
background flow, its load in the budget, the conformance checks of the RoCEv2 plan's case 9,
and a sender and a receiver on this machine's loopback, as the runner starts them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.budget.load_model import peak_load
from testbed.budget.scenario import shared_lossless_ports
from testbed.config.models import ConfigError
from testbed.conformance import checks as c
from testbed.run.scenario import parse_scenario
from traffic.background import BackgroundSpec, frame_size, next_send, offered_mbps

FABRIC = {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}


def scenario(**bg) -> dict:
    return {"name": "bg", "fabric": dict(FABRIC), "qos": {"profile": "sonic", "pfc_enable": [3]},
            "duration_s": 4,
            "flows": [{"name": "a", "src": "h3", "dst": "h1", "duration_s": 3}],
            "background": [{"name": "be", "src": "h2", "dst": "h1", **bg}]}


def problems(**bg) -> str:
    with pytest.raises(ConfigError) as info:
        parse_scenario(scenario(**bg))
    return info.value.render()


def test_the_pacer_keeps_the_rate_and_never_bursts() -> None:
    """On time: one interval on. Late: the next frame is due one interval after now at the
    latest, so a late sender sends two frames back to back, never a burst of the debt."""
    assert next_send(10.0, 10.0, 0.5) == 10.5
    assert next_send(10.0, 10.2, 0.5) == 10.5  # a little late: the schedule holds
    assert next_send(10.0, 13.0, 0.5) == 12.5  # 3 s late: one frame at once, then paced


def test_defaults_are_the_line_rate_and_the_largest_frame() -> None:
    spec = BackgroundSpec(name="be", src="h2", dst="h1")
    assert (spec.tc, frame_size(spec, 9000), offered_mbps(spec, 10.0)) == (0, 9014, 10.0)
    spec = BackgroundSpec(name="be", src="h2", dst="h1", rate_mbps=4, frame_bytes=1514)
    assert (frame_size(spec, 9000), offered_mbps(spec, 10.0)) == (1514, 4)


def test_a_scenario_refuses_what_background_cannot_do() -> None:
    """In a lossless class it would break the class's promise (it obeys no pause); a frame over
    the MTU would be fragmented; a host must exist; each says its field and the fix."""
    assert ("background.0.tc: class 3 is lossless (qos.pfc_enable) and background traffic "
            "obeys no pause; use a lossy class, e.g. 0") in problems(tc=3)
    assert "background.0.frame_bytes: 9015 is over the largest frame fabric.mtu 9000 carries " \
        "(9014)" in problems(frame_bytes=9015)
    assert "background.0.dst: unknown host 'h9'" in problems(dst="h9")
    assert "background.0.start_s: 4.0 is past the end" in problems(start_s=4)
    assert "background.0.tc: no DSCP reaches class 7" in problems(tc=7)
    sc = parse_scenario(scenario())
    assert sc.extras.background[0].tc == 0


def test_a_host_sends_background_or_roce_within_its_line_rate() -> None:
    """Nothing shares a host's line rate between its RoCE endpoint and its kernel's UDP, so a
    host that sends both, or more background than its link carries, is refused."""
    data = scenario()
    data["flows"].append({"name": "b", "src": "h2", "dst": "h4", "duration_s": 3})
    with pytest.raises(ConfigError) as info:
        parse_scenario(data)
    assert "background.0.src: h2 also sends flow 'b'" in info.value.render()
    data = scenario(rate_mbps=6)
    data["background"].append({"name": "be2", "src": "h2", "dst": "h4", "rate_mbps": 5})
    with pytest.raises(ConfigError) as info:
        parse_scenario(data)
    assert ("background.1.rate_mbps: h2's background comes to 11 Mbit/s, over its 10 Mbit/s "
            "line rate") in info.value.render()
    assert "background.0.rate_mbps: h2's background comes to 11" not in info.value.render()


def test_the_budget_counts_background_frames_on_their_path() -> None:
    """10 Mbit/s of 9014-byte frames is 138.7 frames a second: h2 -> h1 passes leaf1 only, and
    both hosts handle each (the sender's process, the receiver's endpoint socket)."""
    sc = parse_scenario({**scenario(start_s=1), "flows": []})
    fps = 10e6 / 8 / 9014
    load = peak_load(sc.topo, [], 4.0, set(), background=sc.extras.background)
    assert load.at_s == 1 and load.flows == ["be"]
    assert load.switch_pps == pytest.approx({"leaf1": fps, "leaf2": 0, "spine1": 0,
                                             "spine2": 0})
    assert load.host_fps == pytest.approx({"h1": fps, "h2": fps, "h3": 0, "h4": 0})


def test_background_above_a_lossless_class_without_a_phantom_is_told_before_the_run() -> None:
    """Class 5 ranks above lossless class 3 in the ports' strict priority: it keeps a phantom
    (phantom_classes), and class 3's drains with what it leaves, so nothing is said. Class 6,
    which only CNPs reach, keeps none: the class-3 phantom would drain at the full port rate
    under it (measured, before classes above kept phantoms, with rocev2.9's background in
    class 5: 63,636 bytes below, the headroom 42,354), and the user is told. Class 0, below,
    is no trouble."""
    assert shared_lossless_ports(*_parts(parse_scenario(scenario(tc=5)))) is None
    sc = parse_scenario(scenario(tc=6))
    w = shared_lossless_ports(sc.cfg, sc.topo, sc.extras)
    assert w is not None and w.startswith("flow and background a (class 3) and be (class 6) "
                                          "cross leaf1 port ")
    assert "strict priority" in w and "phantom_below" in w
    assert shared_lossless_ports(*_parts(parse_scenario(scenario()))) is None


def _parts(sc):
    return sc.cfg, sc.topo, sc.extras


def _summary(good: float | None, lost: int | None, rates: tuple[float, float]) -> dict:
    return {"background": {"be": {"goodput_mbps": good, "lost_packets": lost,
                                  "sent_packets": 800}},
            "headline": {"flows": {"a": {"goodput_mbps": rates[0]},
                                   "b": {"goodput_mbps": rates[1]}}}}


def test_case_9_checks() -> None:
    """The lossless flows keep their rate; the background gets at least the bound and lost
    what did not fit; an unknown figure or a missing background fails, never passes."""
    rest = c.background_took_the_rest(2.0)
    kept = c.rates_at_least(2.7)
    assert rest(_summary(4.2, 470, (2.9, 2.9))).ok and kept(_summary(4.2, 470, (2.9, 2.9))).ok
    assert not kept(_summary(4.2, 470, (2.9, 0.3))).ok  # one flow starved
    assert not rest(_summary(1.5, 470, (2.9, 2.9))).ok  # the background starved
    assert not rest(_summary(10.0, 0, (0.3, 0.3))).ok  # nothing lost: it was not held back
    assert not rest(_summary(None, 470, (2.9, 2.9))).ok
    assert not rest({"headline": {}}).ok
    out = rest(_summary(4.2, 470, (2.9, 2.9)))
    assert out.measured == "be: 4.2 Mbit/s delivered, 470 of 800 frames lost"


def test_the_report_and_the_cli_say_what_the_background_did() -> None:
    from testbed.report.png import background_lines

    row = {"src": "h2", "dst": "h1", "tc": 0, "offered_mbps": 10.0, "goodput_mbps": 4.267,
           "lost_packets": 478, "sent_packets": 833}
    assert background_lines({"be": row}) == [
        "background be: h2 -> h1 in class 0, 10 Mbit/s offered, 4.267 Mbit/s delivered, 478 "
        "of 833 frames lost"]
    row.update(goodput_mbps=None, lost_packets=None)  # the receiver wrote nothing
    assert "unknown Mbit/s delivered, unknown of 833" in background_lines({"be": row})[0]


def test_a_sender_and_a_receiver_on_loopback(tmp_path: Path) -> None:
    """The processes the runner starts: the sender waits for the clock on its stdin, sends for
    its duration, and never faster than its rate (the count it sent is at
    most the duration's worth, plus the first frame); the receiver counts every frame that
    arrived, with its Ethernet, IPv4 and UDP headers, until told to stop."""
    me = [sys.executable, "-m", "traffic.background"]
    recv = subprocess.Popen([*me, "recv", "--dst-ip", "127.0.0.1", "--port", "47001",
                             "--out", str(tmp_path / "r.json")])
    send = subprocess.Popen([*me, "send", "--src-ip", "127.0.0.1", "--dst-ip", "127.0.0.1",
                             "--port", "47001", "--dscp", "8", "--frame-bytes", "1042",
                             "--rate-bps", "833600", "--start-s", "0.2", "--duration-s", "0.5",
                             "--out", str(tmp_path / "s.json")], stdin=subprocess.PIPE,
                            text=True)
    time.sleep(0.5)  # the receiver is bound before the first frame
    assert send.stdin is not None
    send.stdin.write(f"{time.monotonic()!r}\n")
    send.stdin.close()
    assert send.wait(30) == 0
    recv.terminate()
    assert recv.wait(30) == 0
    sent = json.loads((tmp_path / "s.json").read_text())
    got = json.loads((tmp_path / "r.json").read_text())
    assert 1 <= sent["sent_packets"] <= 0.5 * 833600 / 8 / 1042 + 1  # 50 frames at most
    assert sent["sent_bytes"] == 1042 * sent["sent_packets"] and sent["send_errors"] == 0
    assert got["received_packets"] == sent["sent_packets"]
    assert got["received_bytes"] == sent["sent_bytes"]
    assert got["highest_seq"] == sent["sent_packets"] - 1 and got["reordered"] == 0
    assert sent["first_s"] >= 0.2
    marks = got["series"]  # what had arrived, noted as it went: never less, the last all of it
    assert len(marks) >= 2 and marks[-1][1] == got["received_bytes"]
    assert all(b[0] >= a[0] and b[1] >= a[1] for a, b in zip(marks, marks[1:], strict=False))


def test_the_receivers_marks_become_goodput_over_time_on_the_runs_clock() -> None:
    """[monotonic s, bytes so far] -> [t_s, Mbit/s] over each interval, at its end, counted
    from the run's origin; the report draws them as the flow's line, marked background."""
    from testbed.fabric.background import rates
    from testbed.report.data import background

    marks = [[100.0, 0], [100.25, 125_000], [100.5, 125_000], [100.75, 312_500]]
    assert rates(marks, 99.0) == [[1.25, 4.0], [1.5, 0.0], [1.75, 6.0]]
    assert rates([], 99.0) == [] and rates([[100.0, 5]], 99.0) == []
    line = background({"background": {"be": {"tc": 0, "series": rates(marks, 99.0)}}})[0]
    assert (line.label, line.t, line.y) == ("be (background, class 0)", [1.25, 1.5, 1.75],
                                            [4.0, 0.0, 6.0])
