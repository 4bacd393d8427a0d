"""The control plane: push the pipeline and every table entry (testbed.control.entries) to each
switch over P4Runtime.

One :class:`SwitchSession` per switch wraps p4runtime-shell's ``P4RuntimeClient`` (the shell's
module-level session serves one switch only) with its own P4Info :class:`Context`, so several
switches are programmed from one process, in parallel threads, without sharing state. Each
switch gets all its entries in one Write batch.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import grpc
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient

# re-exported: testbed.fabric.network's
from testbed.config.constants import AGENT_PORT as AGENT_PORT
from testbed.config.models import FabricConfig
from testbed.control.entries import (
    BMV2_JSON_PATH,
    P4INFO_PATH,
    EntryBuilder,
    SwitchProgram,
    build_switch_program,
    load_p4info,
    routing_entries,
)
from testbed.control.reroute import DRAIN_S, ReroutePlan, other_base, plan_reroute
from testbed.topology.graph import Switch, Topology, compute_routes, link_ends


class ControlPlaneError(Exception):
    """A switch refused or could not be reached; the message names the switch."""


def one_line(exc: BaseException) -> str:
    """An error as one line: a gRPC error's status and details (its str() spans several lines
    of debug text), anything else with its whitespace collapsed."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code") and hasattr(exc, "details"):
        return " ".join(f"{exc.code().name}: {exc.details()}".split())
    return " ".join(str(exc).split())


class _QuietP4RuntimeShell(logging.Filter):
    """p4runtime-shell logs a CRITICAL line to the root logger when a switch's stream breaks;
    the testbed reports that failure itself, in one line that names the switch."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "p4runtime_sh" not in record.pathname


logging.getLogger().addFilter(_QuietP4RuntimeShell())

class SwitchSession:
    """A P4Runtime session with one switch, as its primary controller."""

    def __init__(self, name: str, device_id: int, grpc_addr: str, builder: EntryBuilder) -> None:
        self.name = name
        self.device_id = device_id
        self.grpc_addr = grpc_addr
        self.builder = builder
        self.client: P4RuntimeClient | None = None
        self.routing: list[p4runtime_pb2.Entity] = []  # as programmed now
        self.routing_base = 0  # the ID range of its members and groups (testbed.control.reroute)
        self._staged: tuple[ReroutePlan, list[p4runtime_pb2.Entity]] | None = None

    def connect(self) -> None:
        try:
            self.client = P4RuntimeClient(self.device_id, self.grpc_addr, (0, 1))
        except SystemExit:  # p4runtime-shell exits when the arbitration gets no answer
            raise ControlPlaneError(
                f"{self.name}: no P4Runtime session at {self.grpc_addr} "
                f"(device id {self.device_id})"
            ) from None

    def push_pipeline(self, p4info: Path = P4INFO_PATH, bmv2_json: Path = BMV2_JSON_PATH) -> None:
        assert self.client is not None
        try:
            self.client.set_fwd_pipe_config(str(p4info), str(bmv2_json))
        except Exception as exc:
            raise ControlPlaneError(f"{self.name}: pipeline push failed: {one_line(exc)}") from None

    def write(self, entities: Sequence[p4runtime_pb2.Entity], kind: int) -> None:
        assert self.client is not None
        if not entities:
            return
        req = p4runtime_pb2.WriteRequest()
        for ent in entities:
            req.updates.add(type=kind, entity=ent)
        try:
            self.client.write(req)
        except Exception as exc:
            raise ControlPlaneError(f"{self.name}: write of {len(entities)} entities "
                                    f"failed: {one_line(exc)}") from None

    def apply(self, program: SwitchProgram) -> None:
        self.write(program.routing + program.insert, p4runtime_pb2.Update.INSERT)
        self.write(program.modify, p4runtime_pb2.Update.MODIFY)
        self.routing = program.routing

    def stage(self, routing_at: Callable[[int], list[p4runtime_pb2.Entity]]) -> bool:
        """Prepare the move to a new routing (``routing_at(base)``: its entities with member
        and group IDs from ``base``), to be written by :meth:`grow`, :meth:`switch_over` and
        :meth:`prune` (testbed.control.reroute). False, and nothing staged, when the switch
        already routes so."""
        same = routing_at(self.routing_base)
        if [e.SerializeToString() for e in same] == \
                [e.SerializeToString() for e in self.routing]:
            self._staged = None
            return False
        new = routing_at(other_base(self.routing_base))
        self._staged = (plan_reroute(self.routing, new), new)
        return True

    def grow(self) -> None:
        """Step 1: the new members and groups beside the old, and routes to new prefixes."""
        assert self._staged is not None
        self.write(self._staged[0].grow, p4runtime_pb2.Update.INSERT)

    def switch_over(self) -> None:
        """Step 2: each route moved to its new members or group, one write a route."""
        assert self._staged is not None
        self.write(self._staged[0].switch, p4runtime_pb2.Update.MODIFY)

    def prune(self) -> None:
        """Step 4: the routes to prefixes no longer reached, then the old groups and members."""
        assert self._staged is not None
        plan, new = self._staged
        self.write(plan.prune_routes, p4runtime_pb2.Update.DELETE)
        self.write(plan.prune_profiles, p4runtime_pb2.Update.DELETE)
        self.routing, self.routing_base = new, other_base(self.routing_base)
        self._staged = None

    def read_counter(self, name: str,
                     indices: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
        """The non-zero cells of a counter array: index -> (packets, bytes).

        With ``indices``, only those cells, in one request: the arrays have a cell for every
        possible (port, class), and decoding all 4096 of them costs BMv2's neighbours on a
        2-core machine about 100 times what the few cells of the real ports do.
        """
        assert self.client is not None
        counter_id = self.builder.counter_id(name)
        req = p4runtime_pb2.ReadRequest(device_id=self.client.device_id)
        for i in ([None] if indices is None else sorted(set(indices))):
            ent = req.entities.add()
            ent.counter_entry.counter_id = counter_id
            if i is not None:
                ent.counter_entry.index.index = i
        out: dict[int, tuple[int, int]] = {}
        for resp in self.client.stub.Read(req):
            for e in resp.entities:
                c = e.counter_entry
                if c.data.packet_count or c.data.byte_count:
                    out[c.index.index] = (c.data.packet_count, c.data.byte_count)
        return out

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.tear_down()
            self.client = None


def program_fabric(
    topo: Topology,
    cfg: FabricConfig,
    grpc_addrs: dict[str, str],
    *,
    p4info: Path = P4INFO_PATH,
    bmv2_json: Path = BMV2_JSON_PATH,
    workers: int = 8,
) -> dict[str, SwitchSession]:
    """Connect to every switch, push the pipeline and entries in parallel, return the sessions.

    The sessions stay open (the testbed is their primary controller for the run) and must be
    closed by the caller.
    """
    builder = EntryBuilder(load_p4info(p4info))

    def one(sw: Switch) -> SwitchSession:
        sess = SwitchSession(sw.name, sw.device_id, grpc_addrs[sw.name], builder)
        sess.connect()
        sess.push_pipeline(p4info, bmv2_json)
        sess.apply(build_switch_program(builder, sw, compute_routes(topo, sw), cfg))
        return sess

    sessions: dict[str, SwitchSession] = {}
    errors: list[str] = []
    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        futs = {pool.submit(one, sw): sw.name for sw in topo.switches}
        for fut in cf.as_completed(futs):
            try:
                sessions[futs[fut]] = fut.result()
            except ControlPlaneError as exc:
                errors.append(str(exc))
    if errors:
        for s in sessions.values():
            s.close()
        raise ControlPlaneError("; ".join(sorted(errors)))
    return sessions


class Rerouter:
    """The control plane's answer to links between switches that fail or come back.

    It keeps the set of failed link ends and, on each change, gives every switch the routes
    the fabric converges to without them (see compute_routes), through the switches' sessions.
    Its entries come from a builder of its own, made from the P4Info.
    """

    def __init__(self, topo: Topology, p4info: Path = P4INFO_PATH,
                 builder: EntryBuilder | None = None) -> None:
        self.topo = topo
        self.builder = builder if builder is not None else EntryBuilder(load_p4info(p4info))
        self.down_links: set[tuple[str, int]] = set()  # (switch, port) ends of failed links
        self.drain_s = DRAIN_S  # between switching the routes over and pruning the old

    def set_link(self, sessions: dict[str, SwitchSession], a: str, b: str, up: bool,
                 index: int | None = None) -> list[str]:
        """Links between switches ``a`` and ``b`` fail or come back (all parallel links of the
        pair, or the ``index``-th, 1-based): every switch's routing converges to the fabric
        without the failed links, made before broken across the whole fabric, each step on
        every switch before the next (testbed.control.reroute), so that no packet finds no
        route. Returns the switches whose routes changed."""
        ends = link_ends(self.topo, a, b, index)
        self.down_links = (self.down_links - ends) if up else (self.down_links | ends)
        down = frozenset(self.down_links)
        staged = []
        for sw in self.topo.switches:
            routes = compute_routes(self.topo, sw, down)
            if sessions[sw.name].stage(
                    lambda base, routes=routes: routing_entries(self.builder, routes, base)):
                staged.append(sw.name)
        for name in staged:
            sessions[name].grow()
        for name in staged:
            sessions[name].switch_over()
        if staged:
            time.sleep(self.drain_s)  # what the old paths hold goes on through them meanwhile
        for name in staged:
            sessions[name].prune()
        return staged
