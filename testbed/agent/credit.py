"""Mode ib-credit on a switch: the credit limits its ports advertise, and the grants of the
credit its neighbours advertised (InfiniBand's link-level flow control, IBA vol. 1, 7.9, whose
arithmetic is :mod:`traffic.credits`).

* **Receiving.** Every credit period, each port whose books moved sends its neighbour one
  flow control packet a credited class: the limit (FCCL) up to which the neighbour may send,
  which is what the frames that came in on the port have let go of in this switch (the sum of
  its input FIFOs' sent bytes over every port, :mod:`testbed.machine.inputs`) plus the input's
  buffer; and the port's own FCTBS, what its gate has sent of the class. Both count bytes in
  64-byte blocks of running totals, so that sender and receiver round alike. A port says
  nothing new at rest (an IB port refreshes its flow control packets periodically too; here
  a frame a period on every idle port would cross the reading of the counters at the run's
  end, which compares what each veth received with what BMv2 saw), and says it all again
  when it first hears its neighbour, whose agent may have started after its first frame.
* **Sending.** On a port whose neighbour is a switch, a credited class's gate starts closed,
  and a neighbour's limit is granted by changing the gate to a burst of the credit left
  (limit - sent): tbf refills its bucket to the burst on a change and counts it down as
  frames leave, so the gate lets through exactly what the credit covers and holds the frame
  it does not. Credit under one frame is not granted (tbf drops at enqueue a frame over its
  burst): the gate keeps what is left of its last grant. A port toward a host is not gated: a
  host's endpoint takes every frame as it comes.
* **XmitWait.** While a gated class holds frames and its credit is under a frame, it is
  waiting (IB's PortXmitWait): the agent's telemetry writes it as the class being paused.

What this leaves out of IB, and says where it shows: frames that leave between the agent's
reading of a gate and its grant are granted twice (the link's rate over a netlink request);
the frame tbf takes to look at counts as gone from its input early (one a gate,
testbed.machine.inputs).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from testbed.agent.config import AgentConfig
from testbed.agent.pause import PortRuntime
from testbed.config.constants import OTHER_INPUT, gate_major
from testbed.machine.inputs import input_majors, input_sent
from testbed.machine.ports import CONTROL_CLASSID
from testbed.machine.tcstats import QdiscReader, by_ifindex
from traffic.credits import (
    BLOCK_BYTES,
    CREDIT_MODULUS,
    FlowControlPacket,
    XmitWait,
    advertised,
    credit_frame,
    credit_left,
)


@dataclass
class CreditLane:
    """The sending end of one gated (port, class): the limit last heard, the limit last
    granted, and the time spent waiting for credit."""

    fccl: int | None = None
    granted: int | None = None
    wait: XmitWait = field(default_factory=XmitWait)


class CreditMixin:
    """The switch agent's credit flow control (a part of :class:`testbed.agent.SwitchAgent`)."""

    cfg: AgentConfig
    clock: Callable[[], float]
    ports: dict[int, PortRuntime]
    reader: QdiscReader
    stats: dict[str, int]

    def credit_setup(self) -> None:
        cfg = self.cfg
        self.lanes: dict[tuple[int, int], CreditLane] = {}
        self.credit_socks: dict[int, tuple[socket.socket, str]] = {}
        #: per port: the flow control packets it last sent (sent again only when they
        #: change), and the ports whose neighbour has been heard from
        self.credit_said: dict[int, list[FlowControlPacket]] = {}
        self.credit_heard: set[int] = set()
        #: per (input port, class): the most the input held in the kernel since the last
        #: telemetry sample (the fidelity guard's credit_overrun)
        self.input_max: dict[tuple[int, int], int] = {}
        if not cfg.credited:
            return
        for n, pr in self.ports.items():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((pr.cfg.ifname, 0))
            # the control class: never held behind data (testbed.machine.ports)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, (1 << 16) | CONTROL_CLASSID)
            mac = ":".join(f"{b:02x}" for b in s.getsockname()[4][:6])
            self.credit_socks[n] = (s, mac)
            if pr.cfg.gated:
                for tc in cfg.credited:
                    self.lanes[n, tc] = CreditLane()
                    pr.gates.close(tc)  # no credit until the neighbour's first limit
                    pr.gates.plug(tc)
        self._credit_majors = input_majors(cfg.credited, [*self.ports, OTHER_INPUT]) | \
            frozenset(gate_major(tc) for tc in cfg.credited)
        for key in ("credit_tx", "credit_rx", "credit_grants"):
            self.stats[key] = 0

    def credit_tick(self) -> None:
        """Advertise every port's limits, and grant what the neighbours advertised."""
        dump = self.reader.dump(self._credit_majors)
        drained = input_sent(dump)
        peak = self.input_max
        for key, (_sent, held) in drained.items():
            if held > peak.get(key, -1) and key[0] in self.ports:
                peak[key] = held
        per_port = by_ifindex(dump)
        now = self.clock()
        for n, pr in self.ports.items():
            gates = pr.gates.stats(per_port.get(pr.gates.ifindex, []))
            packets = []
            for tc in self.cfg.credited:
                st = gates.get(tc)
                sent = st.sent_bytes if st else 0
                packets.append(FlowControlPacket(
                    vl=tc, fctbs=(sent // BLOCK_BYTES) % CREDIT_MODULUS,
                    fccl=advertised(drained.get((n, tc), (0, 0))[0], pr.cfg.credit_buffer)))
                lane = self.lanes.get((n, tc))
                if lane is not None:
                    self._grant(pr, tc, lane, sent, st.backlog_bytes if st else 0, now)
            if packets == self.credit_said.get(n):
                continue  # nothing new to say: at rest a port sends nothing
            sock, mac = self.credit_socks[n]
            try:
                sock.send(credit_frame(mac, packets))
            except OSError:  # the port is down or its control queue full: the next period
                continue
            self.credit_said[n] = packets
            self.stats["credit_tx"] += 1

    def on_credit(self, pr: PortRuntime, packets: list[FlowControlPacket]) -> None:
        """A neighbour's flow control packets: the limits it grants this port. Granted at
        the next credit tick, which reads every gate in one dump."""
        self.stats["credit_rx"] += 1
        if pr.cfg.number not in self.credit_heard:
            # the neighbour's agent is up: it may have missed what we said before it was
            self.credit_heard.add(pr.cfg.number)
            self.credit_said.pop(pr.cfg.number, None)
        for p in packets:
            lane = self.lanes.get((pr.cfg.number, p.vl))
            if lane is not None:
                lane.fccl = p.fccl

    def _grant(self, pr: PortRuntime, tc: int, lane: CreditLane, sent: int, backlog: int,
               now: float) -> None:
        left = credit_left(sent, lane.fccl)
        frame = self.cfg.credit_frame
        lane.wait.note(now, backlog > 0 and left < frame)
        if left >= frame and lane.fccl != lane.granted:
            pr.gates.grant(tc, left)
            lane.granted = lane.fccl
            self.stats["credit_grants"] += 1

    def credit_waiting(self, port: int, tc: int, now: float) -> tuple[bool, float] | None:
        """(waiting for credit now, seconds waited so far) of a gated class, None if it is
        not one."""
        lane = self.lanes.get((port, tc))
        if lane is None:
            return None
        return lane.wait.waiting, lane.wait.total(now)

    def credit_input_max(self, port: int, tc: int) -> int | None:
        """The most the input on ``port`` held of credited class ``tc`` in the kernel since
        the last call (None: not a credited class, or no credit period read it since)."""
        return self.input_max.pop((port, tc), None)

    def credit_close(self) -> None:
        for s, _mac in self.credit_socks.values():
            s.close()

