"""The PFC watchdog as a pure state machine: no sockets, files or clocks.

It follows SONiC's pfcwd (sonic-swss ``orchagent/pfcwdorch.cpp`` and its per-ASIC
``pfc_detect_<asic>.lua`` / ``pfc_restore.lua`` scripts; the ``pfcwd`` command of
sonic-utilities): every polling interval, a lossless queue that is paused by PFC, holds packets
and sent none since the last poll loses one polling interval of its remaining detection time;
when that reaches zero it is a storm and the configured action applies. A queue that is not
stuck gets its whole detection time back. A stormed queue is restored once no PFC frame has
arrived for it for the restoration time.

One difference from SONiC, on purpose: pfc_detect also asks that the port's PFC RX counter rose
since the last poll. The testbed's pauses last up to 3.4 s (the quanta scale with the emulated
link), so a storm need not send a frame every poll; "a pause is in force" stands for "PFC
arrived" (:attr:`QueueObservation.paused`).

Like :class:`traffic.dcqcn.ReactionPoint`, time is an argument (``now``, seconds on any one
clock), so tests drive exact sequences. The switch agent (:mod:`testbed.agent`) gathers the
observations from its kernel queue counters and its pause state, calls :meth:`PfcWatchdog.poll`
and carries out the returned actions (gates, the P4 program's ``pfc_ignored`` register, the
events CSV, the state file).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from testbed.config.models import PfcWatchdogConfig

#: A queue: (port number, traffic class).
Queue = tuple[int, int]
#: What a storm does to its queue: SONiC's PFC_WD ``action`` values.
Mitigation = Literal["drop", "forward", "alert"]


@dataclass(frozen=True)
class WatchdogSettings:
    """The settings of :class:`testbed.config.models.PfcWatchdogConfig` the watchdog runs on,
    without pydantic (the switch agent starts without it). No defaults here: they are the
    model's."""

    enabled: bool
    detection_time_ms: int
    restoration_time_ms: int
    polling_interval_ms: int
    action: Mitigation

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> WatchdogSettings:
        """From PfcWatchdogConfig.model_dump() (what the agent's config file holds), or from a
        partial dict or None, whose missing settings the model fills in and checks."""
        d = dict(d or {})
        d.pop("ports", None)
        names = [f.name for f in fields(cls)]
        if any(n not in d for n in names):
            # only then: pydantic is slow to import
            from testbed.config.models import PfcWatchdogConfig

            d = PfcWatchdogConfig.model_validate(d).model_dump()
        return cls(**{n: d[n] for n in names})


@dataclass(frozen=True)
class QueueObservation:
    """What the watchdog needs to know of one queue at a poll.

    The counters are cumulative (SONiC reads SAI_QUEUE_STAT_PACKETS and compares it with the
    value it stored at the previous poll); ``last_pfc_at`` is on the same clock as ``now``.
    """

    paused: bool  # a PFC pause from the peer is in force for the class
    backlog_packets: int  # packets waiting in the queue
    sent_packets: int  # packets the queue has sent so far
    drops: int  # packets the queue has dropped so far
    last_pfc_at: float | None = None  # when the last PFC frame for the class arrived (None: never)


@dataclass
class QueueState:
    """The watchdog's own state of one queue (SONiC keeps the same in COUNTERS_DB:
    PFC_WD_STATUS, PFC_WD_DETECTION_TIME_LEFT and the ``_last`` copies of the counters)."""

    remaining_ms: int  # detection time left; a storm once it reaches zero
    storm: bool = False
    detected_at: float = 0.0
    last_sent: int | None = None  # sent_packets at the previous poll (None: not polled yet)
    storms: int = 0
    dropped: int = 0  # packets discarded by the drop action during the current or last storm
    drops_base: int = 0  # the queue's drop counter when the current storm was detected
    dropped_before: int = 0  # packets the drop action discarded in the storms before that one

    @property
    def detection_left_ms(self) -> int:
        return max(self.remaining_ms, 0)


@dataclass(frozen=True)
class StormDetected:
    """A storm on (port, tc): the agent applies ``action``.

    drop: stop honouring PFC, discard the queue and what arrives; forward: stop honouring PFC,
    transmit; alert: log only, PFC is still honoured (SONiC's PFC_WD ``action`` values).
    """

    port: int
    tc: int
    action: Mitigation
    at: float
    backlog_packets: int

    @property
    def ignores_pfc(self) -> bool:
        """Whether the queue stops honouring PFC for the storm's duration."""
        return self.action in ("drop", "forward")

    @property
    def detail(self) -> str:
        return f"action={self.action} backlog_packets={self.backlog_packets}"


@dataclass(frozen=True)
class StormRestored:
    """(port, tc) is back to normal: the agent undoes what the storm's action did."""

    port: int
    tc: int
    action: Mitigation
    at: float
    storm_s: float  # how long the storm lasted, detection to restoration
    dropped: int  # packets the drop action discarded

    @property
    def detail(self) -> str:
        return f"after {self.storm_s:.3f} s, dropped={self.dropped}"


Action = StormDetected | StormRestored


class PfcWatchdog:
    """The watchdog of one switch: one :class:`QueueState` per watched (port, lossless class).

    ``ports`` are the port numbers it watches (the agent resolves the config's "all" or
    "switch:port" names); ``classes`` are the lossless classes (SONiC watches the queues of
    PORT_QOS_MAP's pfc_enable). A disabled config watches nothing.
    """

    def __init__(self, config: PfcWatchdogConfig | WatchdogSettings, ports: Iterable[int] = (),
                 classes: Iterable[int] = ()) -> None:
        self.config = config
        self.ports: list[int] = list(ports) if config.enabled else []
        classes = list(classes)
        self.queues: dict[Queue, QueueState] = {
            (p, tc): QueueState(config.detection_time_ms) for p in self.ports for tc in classes}

    @classmethod
    def from_agent(cls, d: Mapping[str, Any] | None, ports: Iterable[int],
                   classes: Iterable[int]) -> PfcWatchdog:
        """The watchdog an agent config asks for. ``d`` is the PfcWatchdogConfig as a dict
        whose "ports" are "all" or this switch's port numbers (testbed.agent.agent_config), or
        None: no watchdog, and the model's defaults for everything else (one definition of
        them). ``ports`` are the switch's ports."""
        wanted = (d or {}).get("ports", "all")
        ports = list(ports)
        if wanted != "all":
            ports = [p for p in wanted if p in ports]
        return cls(WatchdogSettings.from_dict(d), ports, classes)

    @property
    def action(self) -> Mitigation:
        return self.config.action

    def storm(self, port: int, tc: int) -> bool:
        """Whether (port, tc) is in a storm (False for a queue not watched)."""
        q = self.queues.get((port, tc))
        return q is not None and q.storm

    def dropped_total(self, port: int, tc: int, drops_now: int) -> int:
        """Every packet the drop action discarded on (port, tc) so far, given the queue's
        cumulative drop counter now: in a storm, all the queue dropped since its detection (the
        purged backlog is in that counter too); else what the storms before dropped. The rest
        of a lossless queue's drops are not the watchdog's: the fidelity guard counts them as
        losses (testbed.analysis.fidelity, ``lossless_drops``)."""
        q = self.queues.get((port, tc))
        if q is None:
            return 0
        if q.storm and self.action == "drop":
            return q.dropped_before + max(q.dropped, drops_now - q.drops_base)
        return q.dropped_before + q.dropped

    def settle_dropped(self, port: int, tc: int, drops_now: int) -> int:
        """The queue's drop counter read as the drop action ends (its gate restored): what
        the action discarded between the last poll and its end was dropped by it too, and is
        counted so (without it, those last packets read as losses of a lossless class).
        Returns the storm's count of dropped packets."""
        q = self.queues.get((port, tc))
        if q is None:
            return 0
        if self.action == "drop":
            q.dropped = max(q.dropped, drops_now - q.drops_base)
        return q.dropped

    def poll(self, now: float, queues: Mapping[Queue, QueueObservation]) -> list[Action]:
        """One polling interval: judge every watched queue that has an observation.

        A watched queue missing from ``queues`` keeps its state (no counters this time); an
        observed queue that is not watched is ignored. Actions come in the watched order.
        """
        actions: list[Action] = []
        for key, q in self.queues.items():
            obs = queues.get(key)
            if obs is None:
                continue
            act = self._in_storm(key, q, obs, now) if q.storm else self._judge(key, q, obs, now)
            if act is not None:
                actions.append(act)
        return actions

    def _judge(self, key: Queue, q: QueueState, obs: QueueObservation,
               now: float) -> StormDetected | None:
        """pfc_detect: a stuck queue loses a polling interval; any other gets its time back."""
        cfg = self.config
        stuck = obs.paused and obs.backlog_packets > 0 and obs.sent_packets == q.last_sent
        q.last_sent = obs.sent_packets
        if not stuck:
            q.remaining_ms = cfg.detection_time_ms
            return None
        q.remaining_ms -= cfg.polling_interval_ms
        if q.remaining_ms > 0:
            return None
        q.storm, q.detected_at = True, now
        q.storms += 1
        if cfg.action == "drop":
            # the purged backlog counts as dropped, and so does whatever the queue drops from
            # now on (its counters are cumulative across the purge)
            q.dropped_before += q.dropped
            q.dropped = obs.backlog_packets
            q.drops_base = obs.drops
        return StormDetected(key[0], key[1], cfg.action, now, obs.backlog_packets)

    def _in_storm(self, key: Queue, q: QueueState, obs: QueueObservation,
                  now: float) -> StormRestored | None:
        """pfc_restore: restored once no PFC has arrived for the restoration time."""
        cfg = self.config
        if cfg.action == "drop":
            q.dropped = obs.drops - q.drops_base
        quiet = obs.last_pfc_at is None or now - obs.last_pfc_at >= cfg.restoration_time_ms / 1000
        if not quiet:
            return None
        q.storm = False
        q.remaining_ms = cfg.detection_time_ms
        return StormRestored(key[0], key[1], cfg.action, now, now - q.detected_at, q.dropped)
