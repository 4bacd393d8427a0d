"""How a switch moves from one routing to another without a moment with no route (pure: entity
lists in, the writes in their order out).

A route change written as "delete the old, insert the new" leaves every packet that arrives
between the two writes with no route, which the P4 program discards (a loss in a lossless
class, and on a RoCE QP a NAK and a Go-Back-N resend). Routers avoid it by making before
breaking: the new next hops are installed beside the old, each route is switched over in one
write, and only then does the old state go (RFC 5714, IP fast reroute framework, sec. 6: a
transition free of micro-loops needs the new forwarding state in place before the old is
removed). Here that is four steps, taken on every switch of the fabric before the next begins
(:meth:`testbed.control.p4runtime.Rerouter.set_link`):

1. ``grow``: the new ECMP members and groups, under the other of two ID ranges so that they
   sit beside the old ones, and the routes to prefixes the switch could not reach before;
2. ``switch``: each route that changed, modified in place to its new members or group (one
   table write per route: a packet sees the old action or the new one);
3. a pause while what the old paths hold drains (:data:`DRAIN_S`);
4. ``prune``: the routes to prefixes the switch can no longer reach, then the old groups and
   members.

Step 1 before step 2 on every switch: a link that comes back is first given its routes at the
far end (the spine learns the way to the leaf again) before the leaves start to use it. Step
4 last: a link that goes down keeps its far end's route until no leaf sends to it any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from p4.v1 import p4runtime_pb2

#: The second range of ECMP member and group IDs: a reroute's new ones go in beside the old.
#: The P4 program's selector holds 1024 members, twice what any fabric here uses at once.
ROUTING_ID_SPAN = 1 << 16
#: How long what the old paths hold may take to drain before their routes go: a lossless
#: queue at its XOFF threshold plus headroom (tens of KB) drains at 10 Mbit/s in well under
#: this. A packet held longer (a queue paused throughout) finds no route and is counted.
DRAIN_S = 0.2


def other_base(base: int) -> int:
    """The ID range a reroute writes in, given the one in use (0 <-> ROUTING_ID_SPAN)."""
    return ROUTING_ID_SPAN - base


def _route_key(ent: p4runtime_pb2.Entity) -> bytes:
    te = ent.table_entry
    return te.table_id.to_bytes(4, "big") + b"".join(m.SerializeToString() for m in te.match)


@dataclass
class ReroutePlan:
    """The writes that take a switch from ``old`` to ``new`` (entity lists as
    :func:`testbed.control.entries.routing_entries` builds them: profile members and groups,
    then routes), in the order of the module's steps."""

    grow: list[p4runtime_pb2.Entity] = field(default_factory=list)  # INSERT
    switch: list[p4runtime_pb2.Entity] = field(default_factory=list)  # MODIFY
    prune_routes: list[p4runtime_pb2.Entity] = field(default_factory=list)  # DELETE
    prune_profiles: list[p4runtime_pb2.Entity] = field(default_factory=list)  # DELETE


def plan_reroute(old: list[p4runtime_pb2.Entity],
                 new: list[p4runtime_pb2.Entity]) -> ReroutePlan:
    """The make-before-break writes from ``old`` to ``new``, whose members and groups must use
    IDs apart from ``old``'s (the other range): all of ``new``'s go in, all of ``old``'s go."""
    old_routes = {_route_key(e): e for e in old if e.HasField("table_entry")}
    new_routes = {_route_key(e): e for e in new if e.HasField("table_entry")}
    return ReroutePlan(
        grow=[e for e in new if not e.HasField("table_entry")]
        + [e for k, e in new_routes.items() if k not in old_routes],
        switch=[e for k, e in new_routes.items() if k in old_routes],
        prune_routes=[e for k, e in old_routes.items() if k not in new_routes],
        # groups before the members they hold: the reverse of the order they went in
        prune_profiles=[e for e in old if not e.HasField("table_entry")][::-1])
