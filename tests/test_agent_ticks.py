"""The switch agent's timer ticks, without a switch: which queues get one, and when."""

from __future__ import annotations

from types import SimpleNamespace

from testbed.agent.frames import TICK_BODY
from testbed.agent.telemetry import TelemetryMixin
from testbed.config.constants import TICK_TIMER_ONLY
from traffic.wire import PFC_QUANTUM_BITS

RATE = 10.0
QUANTUM_S = PFC_QUANTUM_BITS / (RATE * 1e6)


class _Sock:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> int:
        self.sent.append(frame)
        return len(frame)


class _Agent(TelemetryMixin):
    """The telemetry part of a switch agent with two ports, class 3 lossless, on a hand clock."""

    def __init__(self) -> None:
        self.t = 100.0
        self.clock = lambda: self.t
        self.cfg = SimpleNamespace(lossless=[3], tick_src_mac="02:00:00:00:00:fe")
        self.ports = {n: SimpleNamespace(cfg=SimpleNamespace(number=n, rate_mbps=RATE))
                      for n in (1, 2)}
        self.tick_sock = _Sock()
        self.stats = {"ticks": 0}
        self.hot = set()
        self.busy_until = 0.0
        self.xoff_until = {}

    def timer_ticks(self) -> list[tuple[int, int]]:
        """The (port, class) of each timer tick sent by one timer_tick()."""
        self.tick_sock.sent.clear()
        self.timer_tick()
        out = []
        for f in self.tick_sock.sent:
            port, tc, backlog, _sent = TICK_BODY.unpack_from(f, 14)
            assert backlog == TICK_TIMER_ONLY
            out.append((port, tc))
        return sorted(out)


def test_timer_ticks_only_while_a_pause_of_ours_stands() -> None:
    """A timer tick asks the P4 program for XON or a refreshed XOFF toward the ports the queue
    paused; with no pause of ours standing it would be dropped there, so none is sent: not
    before our switch pauses a neighbour, and not after its XON or once its quanta ran out."""
    a = _Agent()
    a.hot = {(1, 3), (2, 3)}  # queues with backlog, resynced every resync period regardless
    assert a.timer_ticks() == []
    # our switch sends XOFF for class 3 out of port 2 (seen leaving by the agent)
    a.on_own_pfc(a.ports[2], {3: 100})
    assert a.timer_ticks() == [(1, 3), (2, 3)]
    a.t += 99 * QUANTUM_S
    assert a.timer_ticks() == [(1, 3), (2, 3)]
    # a refresh extends it; its XON ends it
    a.on_own_pfc(a.ports[2], {3: 100})
    a.t += 50 * QUANTUM_S
    assert a.timer_ticks() == [(1, 3), (2, 3)]
    a.on_own_pfc(a.ports[2], {3: 0})
    assert a.timer_ticks() == []
    # an XOFF that is neither refreshed nor ended stops the ticks when the neighbour resumes
    a.on_own_pfc(a.ports[1], {3: 10})
    assert a.timer_ticks() == [(1, 3), (2, 3)]
    a.t += 10 * QUANTUM_S
    assert a.timer_ticks() == []
    assert a.stats["ticks"] == 8


def test_ticks_last_while_any_port_holds_a_pause_of_the_class_and_never_for_lossy() -> None:
    a = _Agent()
    a.hot = {(1, 3)}
    a.on_own_pfc(a.ports[1], {0: 100})  # not a lossless class here: no ticks for it
    assert a.timer_ticks() == []
    a.on_own_pfc(a.ports[1], {3: 100})
    a.on_own_pfc(a.ports[2], {3: 100})
    # an XOFF makes every port's queue of its class hot: which queue paused is the program's
    assert a.hot == {(1, 3), (2, 3)}
    a.on_own_pfc(a.ports[1], {3: 0})  # XON on one port; the other's pause still stands
    assert a.timer_ticks() == [(1, 3), (2, 3)]
    a.on_own_pfc(a.ports[2], {3: 0})
    assert a.timer_ticks() == []


def test_an_xoff_that_names_its_queue_makes_that_queue_alone_hot() -> None:
    """The program writes in each PFC frame it makes the queue on whose account (its pad
    bytes, p4/headers.p4's pfc_cause_h): the agent ticks that queue, not every port's queue of
    the class; a frame that names no queue of ours falls back to every port."""
    from testbed.agent.frames import pfc_cause
    from traffic.packets import pfc_frame
    from traffic.wire import NUM_TCS

    frame = pfc_frame("02:00:00:00:00:01", {3: 100})
    named = frame[:34] + (2 * NUM_TCS + 3).to_bytes(2, "big") + frame[36:]
    assert pfc_cause(named) == (2, 3) and pfc_cause(frame[:35]) is None
    a = _Agent()
    a.on_own_pfc(a.ports[1], {3: 100}, pfc_cause(named))
    assert a.hot == {(2, 3)}
    assert a.timer_ticks() == [(2, 3)]
    for cause in (None, (7, 3), (1, 0)):  # none, a port we lack, another class
        b = _Agent()
        b.on_own_pfc(b.ports[1], {3: 100}, cause)
        assert b.hot == {(1, 3), (2, 3)}, cause


def test_a_resync_ticks_the_phantoms_above_a_lossless_class_too() -> None:
    """With SONiC's layout the agent resyncs classes 3 and 4 (lossless) and 5 (a phantom above
    them, which theirs drain under): a backlog in class 5 gets a resync tick with it, a lossy
    class below (0) none; the config the testbed writes names them."""
    from testbed.agent.config import agent_config
    from testbed.config.models import QosConfig
    from testbed.machine.ports import ClassStats

    sonic = QosConfig.model_validate({"profile": "sonic"})
    written = agent_config("leaf1", [], sonic, "agt", 0.01, 0.1, "/tmp", 9014)
    assert written["resynced"] == [3, 4, 5] and written["lossless"] == [3, 4]
    agent = _Agent()
    agent.cfg = SimpleNamespace(lossless=[3, 4], resync_classes=[3, 4, 5],
                                tick_src_mac="02:00:00:00:00:fe")
    held = {tc: ClassStats(backlog_bytes=9000, backlog_packets=1, sent_packets=0,
                           sent_bytes=0, drops=0) for tc in (0, 5)}
    agent.tick({1: held, 2: {}})
    ticked = [TICK_BODY.unpack_from(f, 14)[:3] for f in agent.tick_sock.sent]
    assert ticked == [(1, 5, 9000)]
