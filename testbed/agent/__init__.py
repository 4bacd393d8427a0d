"""The switch agent: what a switch OS does in software, one process per switch, inside the
switch's network namespace, or one process for every switch, which opens each switch's sockets
inside its namespace (:mod:`testbed.machine.netns`; config ``agent.one_process``). Its jobs, one
module each:

* :mod:`~testbed.agent.pause`: PFC frames arriving on a port close and open that port's class
  gates (the MAC's job in a real switch); every pause is an event.
* :mod:`~testbed.agent.telemetry`: ticks into the P4 program (its phantom queues resync to the
  kernel's backlog), and the telemetry samples.
* :mod:`~testbed.agent.watchdog`: the PFC watchdog, as SONiC runs it.
* :mod:`~testbed.agent.frames` (PFC socket, tick frame), :mod:`~testbed.agent.registers` (the
  P4 program's registers over Thrift), :mod:`~testbed.agent.config` (the agent's config file).
* :mod:`~testbed.agent.switch`: the agent itself and its single-threaded loop, whose periodic
  jobs :mod:`~testbed.agent.schedule` lays out; its file writes go to a thread of their own
  (:mod:`traffic.spool`), so that the loop never waits for the file system.

What it writes is :mod:`testbed.results.telemetry`'s: ``<switch>.telemetry.csv``,
``<switch>.events.csv`` and ``<switch>.pfcwd.json``.

Run by the testbed as ``python -m testbed.agent CONFIG.json [CONFIG.json ...]``, one config
per switch; each is written by :func:`agent_config`.

May import: config, machine, topology, budget, results (and traffic's frame formats and its
file spool). It runs in its own process, so it imports nothing that starts or drives a fabric.
"""

from testbed.agent.config import AgentConfig, AgentPort, agent_config
from testbed.agent.frames import pfc_socket, tick_frame
from testbed.agent.pause import PauseState, PortRuntime, WatchdogState
from testbed.agent.switch import SwitchAgent, main

__all__ = ["AgentConfig", "AgentPort", "PauseState", "PortRuntime", "SwitchAgent",
           "WatchdogState", "agent_config", "main", "pfc_socket", "tick_frame"]
