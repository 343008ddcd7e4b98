"""A cluster relay's flows from edge relays (its peer flows, at --peer-listen): which edge relay
a client's datagrams came through, and where they go on.

An edge relay forwards a client's datagrams, encapsulated with the client's address, to this
relay's --peer-listen (relay tiers, docs/relay.md). Per client address this table keeps the
target the datagrams go to (a transceiver of this cluster, or a route to yet another cluster)
and the edge they last came through, so that the target's replies return the same way and
leave from the edge's public port:

- made by a datagram from an edge that passes the same hint check as a client's first packet
  (relay.admission ``hint_target``); *pending* until the target sends for the client, then
  *confirmed*. A pending flow forwards only STUN, as at the edge;
- every datagram from an edge refreshes its flow and names its edge (the latest edge wins:
  edges are trusted peers, and a client that moved to another edge comes back through it);
- *live* while its edge was heard within ``path_ttl_s``: replies go to the edge. After that
  they go to the client directly (a client that moved to the cluster's own address, its backup
  candidate), through the ordinary confirmed flows;
- expired after ``pending_ttl_s`` unconfirmed, or ``idle_ttl_s`` without a datagram from an edge;
- *restored* confirmed, with no known hint, from the worker's journal or from Redis (the client
  flows' mechanisms, relay.housekeeping): a restarted worker or relay forwards the client's media
  from its first datagram instead of waiting for its next consent check.

``slot`` and ``stored_at`` belong to relay.housekeeping (journal slot, last Redis write): a flow
that leaves the table puts its slot in ``released``, which the housekeeping frees in the journal
before it writes another record.

Bounds (against a compromised or misbehaving peer: only sources inside --peer-network reach this
table at all, docs/security.md): per hint ``max_flows_per_hint`` and per worker
``max_confirmed_flows`` (relay.flows.FlowLimits); a full scope evicts its flow idle longest,
never refuses the newcomer.

Sans-I/O: ``now`` is the worker's coarse monotonic second; a target is whatever object the caller
routes by (relay.routing.Target); an edge is its raw sockaddr, as the sending side needs it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from relay.flows import FlowLimits


class EdgeFlow:
    __slots__ = ("confirmed", "created", "edge", "heard", "slot", "stored_at", "target", "ufrag")

    def __init__(self, target: Any, ufrag: str | None, edge: bytes, now: int) -> None:
        self.target = target
        self.ufrag = ufrag  # None: restored, hint unknown (counts only per worker)
        self.edge = edge
        self.heard = now
        self.created = now
        self.confirmed = False
        self.slot = -1
        self.stored_at = now


class EdgeFlowTable:
    """Peer flows keyed by the client's address (relay.addrkey, this relay's public family)."""

    def __init__(self, limits: FlowLimits, path_ttl_s: int) -> None:
        self.limits = limits
        self.path_ttl_s = path_ttl_s
        # Least recently heard first: the per-worker cap evicts the first, expiry stops early.
        self.flows: OrderedDict[Hashable, EdgeFlow] = OrderedDict()
        self._pending: dict[Hashable, None] = {}  # creation order = pending expiry order
        self._of_hint: dict[str, dict[Hashable, None]] = {}
        self.released: list[int] = []  # journal slots of flows that left the table
        self.created = 0
        self.restored = 0
        self.expired = 0
        self.evicted = 0

    def get(self, key: Hashable) -> EdgeFlow | None:
        return self.flows.get(key)

    def admit(self, key: Hashable, ufrag: str, target: Any, edge: bytes, now: int) -> EdgeFlow:
        """A datagram with a valid hint from an edge for a client without a flow: a pending flow
        (evicting the idlest flow of a full scope first)."""
        current = self.flows.get(key)
        if current is not None:
            self._remove(key, current)
        lim = self.limits
        same_hint = self._of_hint.get(ufrag)
        if same_hint is not None and len(same_hint) >= lim.max_flows_per_hint:
            flows = self.flows
            idlest = min(same_hint, key=lambda k: flows[k].heard)
            self._remove(idlest, flows[idlest])
            self.evicted += 1
        self._make_room()
        flow = EdgeFlow(target, ufrag, edge, now)
        self.flows[key] = flow
        self._pending[key] = None
        self._of_hint.setdefault(ufrag, {})[key] = None
        self.created += 1
        return flow

    def restore(self, key: Hashable, target: Any, edge: bytes, now: int) -> EdgeFlow | None:
        """A confirmed flow found in the journal or in Redis (hint unknown); None when the
        client has a flow already."""
        if key in self.flows:
            return None
        self._make_room()
        flow = EdgeFlow(target, None, edge, now)
        flow.confirmed = True
        self.flows[key] = flow
        self.restored += 1
        return flow

    def heard(self, key: Hashable, flow: EdgeFlow, edge: bytes, now: int) -> None:
        """Another datagram for this client from an edge (per datagram: kept short)."""
        flow.edge = edge
        if flow.heard != now:
            flow.heard = now
            self.flows.move_to_end(key)

    def confirm(self, key: Hashable, flow: EdgeFlow, target: Any) -> bool:
        """The target (or another one, which then owns the client) sent for this client; True
        when that made the flow confirmed or re-pointed it (to be journalled and stored)."""
        if flow.confirmed:
            if flow.target is target:
                return False
            flow.target = target
            return True
        flow.target = target
        flow.confirmed = True
        self._pending.pop(key, None)
        return True

    def live(self, flow: EdgeFlow, now: int) -> bool:
        """Do replies still go back through the edge?"""
        return now - flow.heard <= self.path_ttl_s

    def expire(self, now: int) -> int:
        """Drop flows pending too long or idle too long; returns how many."""
        expired = 0
        pending_deadline = now - self.limits.pending_ttl_s
        flows = self.flows
        while self._pending:
            key = next(iter(self._pending))
            flow = flows[key]
            if flow.created > pending_deadline:
                break
            self._remove(key, flow)
            expired += 1
        idle_deadline = now - self.limits.idle_ttl_s
        while flows:
            key, flow = next(iter(flows.items()))
            if flow.heard > idle_deadline:
                break
            self._remove(key, flow)
            expired += 1
        self.expired += expired
        return expired

    def remove_target(self, target_id: int) -> int:
        """Forget the flows of a target that left the configuration."""
        gone = [(k, f) for k, f in self.flows.items() if f.target.tid == target_id]
        for key, flow in gone:
            self._remove(key, flow)
        return len(gone)

    def count_pending(self) -> int:
        return len(self._pending)

    def _make_room(self) -> None:
        if len(self.flows) >= self.limits.max_confirmed_flows:
            oldest = next(iter(self.flows))
            self._remove(oldest, self.flows[oldest])
            self.evicted += 1

    def _remove(self, key: Hashable, flow: EdgeFlow) -> None:
        del self.flows[key]
        if flow.slot >= 0:
            self.released.append(flow.slot)
            flow.slot = -1
        self._pending.pop(key, None)
        if flow.ufrag is None:
            return
        same_hint = self._of_hint[flow.ufrag]
        del same_hint[key]
        if not same_hint:
            del self._of_hint[flow.ufrag]
