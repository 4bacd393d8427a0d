"""The switch agent's settings and the PFC watchdog's (config ``agent``), apart from
:mod:`testbed.config.models` to keep each module small; testbed.config.models re-exports both."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from testbed.config.base import _Strict
from traffic.names import PORT_PATTERN

_SWITCH_PORT = re.compile(PORT_PATTERN)


class PfcWatchdogConfig(_Strict):
    """PFC_WD, with SONiC's names and allowed ranges.

    Not scaled like the link: a storm is a queue held paused with packets waiting and none
    leaving, which takes the same wall-clock time to judge at any link rate. SONiC's defaults
    are 200 ms for detection, restoration and polling; these are a little longer so that two
    cores running a whole fabric do not make a slow poll look like a storm.
    """

    enabled: bool = Field(False, description="Run the watchdog on every lossless queue.")
    detection_time_ms: int = Field(
        400, ge=100, le=5000, description="detection_time: storm after this long (SONiC: "
        "200 ms default, 100-5000 allowed).")
    restoration_time_ms: int = Field(
        800, ge=100, le=60000, description="restoration_time: restore after this long without "
        "PFC (SONiC: 200 ms default, 100-60000 allowed).")
    polling_interval_ms: int = Field(
        100, ge=10, le=1000, description="polling_interval (SONiC: 200 ms default).")
    action: Literal["drop", "forward", "alert"] = Field(
        "drop", description="drop: stop honouring PFC and discard the queue's packets; "
        "forward: stop honouring PFC; alert: log only.")
    ports: list[str] | Literal["all"] = Field(
        "all", description="'all', or 'switch:port' names such as 'leaf1:3'.")

    @field_validator("ports", mode="before")
    @classmethod
    def _port_names(cls, v: object) -> object:
        """The form only; whether the switch and port exist is checked against the topology."""
        if v == "all":
            return v
        if not isinstance(v, list):
            raise ValueError("write 'all' or a list of switch:port names, e.g. [leaf1:3, spine1:1]")
        bad = [x for x in v if not (isinstance(x, str) and _SWITCH_PORT.fullmatch(x))]
        if bad:
            raise ValueError(f"{', '.join(repr(x) for x in bad)}: not a switch:port name; write "
                             "e.g. leaf1:3 or spine1:1 (or ports: all)")
        return v

    @model_validator(mode="after")
    def _poll_below_detection(self) -> PfcWatchdogConfig:
        if self.polling_interval_ms > self.detection_time_ms:
            raise ValueError("polling_interval_ms must not exceed detection_time_ms")
        return self


class SwitchAgentConfig(_Strict):
    """The switch agent: the switch's OS in software. A fabric's ``agent`` section, the same for
    every switch; :class:`testbed.agent.config.AgentConfig` is the file one agent reads, made
    from it for one switch."""

    tick_period_ms: float = Field(10.0, gt=0, le=1000, description="How often the agent "
        "ticks a busy lossless queue for the data plane to judge its phantom: XON once it "
        "drained, XOFF refreshed while full (real: the switch ASIC's own PFC timers).")
    resync_period_ms: float = Field(50.0, gt=0, le=10_000, description="How often a tick "
        "also resyncs a busy queue's phantom from the kernel (a netlink dump each; 10 ms cost "
        "the agents 40% more CPU). Emulation only: a real switch counts its own buffer.")
    sample_period_ms: float = Field(
        100.0, ge=10, le=10_000, description="Telemetry sampling period.")
    nice: int = Field(
        -10, ge=-20, le=19, description="Scheduling priority of each switch agent (nice). The "
        "agent is the switch's MAC for PFC (it closes the gates): first to run, so that its "
        "reaction stays within qos.pfc.reaction_ms when the cores are saturated.")
    realtime_priority: int = Field(10, ge=0, le=99, description="SCHED_FIFO priority of each "
        "switch agent, 0 for none (nice alone). Real-time, a PFC frame preempts BMv2 and the "
        "hosts, as a MAC answers it in hardware: on a 6:1 incast at 40 Mbit/s the pause "
        "reaction's p99 was 0.21-0.34 ms against 4.5-18.1 ms at nice, for the same CPU, and "
        "every run passed the capacity checks against half (docs/PERFORMANCE.md). "
        "Where the machine refuses it, the agents run at agent.nice and the run says so; "
        "written in the config, a refusal stops the run.")
    one_process: bool = Field(False, description="One agent process for every switch, "
        "opening each switch's sockets inside its namespace: the switches' ticks share its "
        "wake-ups, so it takes less CPU under incast, but its pause reaction's tail is "
        "longer (docs/PERFORMANCE.md). False: a process per switch, inside its namespace.")
    pfc_watchdog: PfcWatchdogConfig = Field(default_factory=PfcWatchdogConfig)
