"""The relay's flow tables: which transceiver owns which client address.

Sans-I/O: no sockets, no clocks; ``now`` is a coarse monotonic second passed in by the worker.

Two tables (docs/design.md):
- *pending*: made by a Binding request carrying a valid hint (forged hints never get here). Only
  STUN is forwarded for a pending flow. Short fixed TTL, never extended by the client, and
  bounds against holders of valid hints (issue 8 #5: hints harvested from WHIP stay valid as long
  as a call may last, and sources can be spoofed):
  - per hint over time: a token bucket (``max_pending_per_ufrag`` at once, then one every
    ``pending_ufrag_refill_s``): a live call that rebinds its NAT needs one new pending flow now
    and then, 8 harvested-hint sources every 10 s need many hints. Refusals count as
    ``pending_ufrag_limit``. The buckets' table is bounded (``max_hint_budgets``, forgetting the
    least recently used hint beyond: more hints than that must not lock anyone out);
  - per source /24 or /64 (``max_pending_per_prefix``): the prefix's oldest pending flow is
    evicted for its newest;
  - per worker (``max_pending_flows``): the oldest pending flow of the hint holding the most is
    evicted, so an attacker's hints (each holding many spoofed sources) lose theirs before a
    caller's hint (holding one or two) does. Never "refuse everyone".
  Hint validity is left as it is: a call that rebinds mid-call opens a new flow with the same
  hint, so validity bounds the longest call that survives rebinding (docs/security.md).
- *confirmed*: made or refreshed only by packets a transceiver sends back to the client, so a client
  (or an attacker spoofing one) can never extend a flow by itself. Idle TTL and three caps, each
  against its own attacker (issue 8 #3):
  - per hint (the session's ufrag, carried over from the pending flow): a session owner whose
    transceiver answers checks from ever new addresses; a session has ~4 addresses at most (NAT
    rebinding, a network change), so the default 8 leaves room;
  - per transceiver: every session of one transceiver together (or a transceiver gone wrong);
    ~20-30 sessions of up to ~4 addresses each, default 1024 per worker. Not for a route (an
    edge's flows to another cluster's relays, ``ROUTE_ID_BASE`` and up): that cluster's
    transceivers together have no such bound here, only the per-hint and per-worker caps;
  - per worker: everything, the table's memory (65536).
  A full scope never refuses the newcomer, which would lock every new call out: it evicts the
  flow of that scope idle longest. A flow confirmed without a pending one (restored from the
  journal or from Redis, or first named by a transceiver) has no known hint and counts only per
  transceiver and per worker.

Eviction is O(1): ``confirmed`` (and each transceiver's table) is kept in least-recently-refreshed
order, refreshed once per coarse tick for the flows that carried traffic; the hot path does not
change. A hint's flows are few (its cap), so its idlest one is found by looking at all of them.

The worker's hot loop reads ``confirmed`` directly; everything else goes through methods.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from common.verdict import Drop, drop
from relay.ratelimit import KeyedBuckets

# Target ids of routes (relay.routing: another cluster's relays) are ROUTE_ID_BASE + cluster,
# apart from transceiver ids (0..0xFFFF), so the journal, Redis and the caps tell them apart.
ROUTE_ID_BASE = 0x10000


def route_id(cluster: int) -> int:
    return ROUTE_ID_BASE + cluster


# (table, scope) of every eviction counter: bounded label values for the metric.
EVICTIONS = (
    ("pending", "worker"),
    ("pending", "prefix"),
    ("confirmed", "worker"),
    ("confirmed", "transceiver"),
    ("confirmed", "hint"),
)


# A new pending flow refused: the hint's budget of new flows is spent (a drop counter's label).
PENDING_UFRAG_LIMIT = drop("pending_ufrag_limit")


@dataclass(frozen=True, slots=True)
class FlowLimits:
    max_pending_flows: int = 4096
    max_pending_per_ufrag: int = 8  # a hint's burst of new pending flows...
    pending_ufrag_refill_s: int = 10  # ...then one more every this many seconds
    max_hint_budgets: int = 16384  # hints whose bucket is not full, per worker
    max_pending_per_prefix: int = 64
    pending_ttl_s: int = 10
    max_confirmed_flows: int = 65536
    max_flows_per_transceiver: int = 1024
    max_flows_per_hint: int = 8
    idle_ttl_s: int = 45


class PendingFlow:
    __slots__ = ("expires_at", "prefix", "target_id", "ufrag")

    def __init__(self, target_id: int, ufrag: str, prefix: bytes, expires_at: int) -> None:
        self.target_id = target_id
        self.ufrag = ufrag
        self.prefix = prefix
        self.expires_at = expires_at


class ConfirmedFlow:
    """A confirmed flow; ``wire`` and ``slot`` belong to the worker (send descriptors, journal).

    ``ufrag`` is the hint the client's pending flow carried, or None when unknown.
    """

    __slots__ = ("last_seen", "slot", "stored_at", "target_id", "ufrag", "wire")

    def __init__(self, target_id: int, now: int, ufrag: str | None = None) -> None:
        self.target_id = target_id
        self.ufrag = ufrag
        self.last_seen = now
        self.stored_at = now  # when the flow cache (if any) was last written
        self.wire: Any = None
        self.slot = -1


class FlowTable:
    """Pending and confirmed flows keyed by the client's address (see relay.addrkey)."""

    def __init__(self, limits: FlowLimits) -> None:
        self.limits = limits
        self.pending: dict[Hashable, PendingFlow] = {}
        # Least recently refreshed first; OrderedDict.get is dict.get, so the hot path's
        # lookups cost the same as with a plain dict.
        self.confirmed: OrderedDict[Hashable, ConfirmedFlow] = OrderedDict()
        self._confirmed_of_target: dict[int, OrderedDict[Hashable, ConfirmedFlow]] = {}
        self._confirmed_of_hint: dict[str, dict[Hashable, ConfirmedFlow]] = {}
        # Oldest first, like ``pending`` itself (insertion order is age order).
        self._pending_of_ufrag: dict[str, dict[Hashable, None]] = {}
        self._pending_of_prefix: dict[bytes, dict[Hashable, None]] = {}
        # [n]: the hints holding n pending flows, in the order they got there ([0] stays empty).
        # Empty levels above the busiest are dropped, so the busiest hint is found in O(1).
        self._ufrags_holding: list[dict[str, None]] = [{}]
        self.hint_budgets = KeyedBuckets(
            1 / limits.pending_ufrag_refill_s,
            limits.max_pending_per_ufrag,
            limits.max_hint_budgets,
        )
        self.created_pending = 0
        self.created_confirmed = 0
        self.expired_pending = 0
        self.expired_confirmed = 0
        self.evicted = dict.fromkeys(EVICTIONS, 0)

    # -- pending ---------------------------------------------------------------------------
    def admit(
        self, key: Hashable, prefix: bytes, ufrag: str, target_id: int, now: int
    ) -> Drop | None:
        """Record a pending flow for a verified first packet (None), or refuse it
        (``PENDING_UFRAG_LIMIT``).

        A client that is already pending for the same ufrag (ICE retransmissions) is accepted
        without counting again; the TTL is not extended, so retransmits cannot keep it alive.
        A full scope evicts (see the module docstring); only a hint's spent budget refuses.
        """
        current = self.pending.get(key)
        if current is not None:
            if current.ufrag == ufrag:
                return None
            self._drop_pending(key, current)
        if not self.hint_budgets.allow(ufrag, now):
            return PENDING_UFRAG_LIMIT
        lim = self.limits
        same_prefix = self._pending_of_prefix.get(prefix)
        if same_prefix is not None and len(same_prefix) >= lim.max_pending_per_prefix:
            self._evict_pending(next(iter(same_prefix)), "prefix")
        if len(self.pending) >= lim.max_pending_flows:
            busiest = self._ufrags_holding[-1]
            oldest_of_busiest = next(iter(self._pending_of_ufrag[next(iter(busiest))]))
            self._evict_pending(oldest_of_busiest, "worker")
        flow = PendingFlow(target_id, ufrag, prefix, now + lim.pending_ttl_s)
        self.pending[key] = flow
        self._link_pending(key, flow)
        self.created_pending += 1
        return None

    def forget_pending(self, key: Hashable) -> None:
        """Drop a client's pending flow, if any (a TCP connection that became the flow itself:
        relay.tcpconns); the hint's spent budget stays spent."""
        flow = self.pending.get(key)
        if flow is not None:
            self._drop_pending(key, flow)

    def count_pending_of_hint(self, ufrag: str) -> int:
        return len(self._pending_of_ufrag.get(ufrag, ()))

    def expire_pending(self, now: int) -> int:
        """Drop pending flows past their TTL (insertion order is expiry order, so stop early),
        and forget the hints whose budget is full again."""
        pending = self.pending
        expired = 0
        while pending:
            key = next(iter(pending))
            flow = pending[key]
            if flow.expires_at > now:
                break
            self._drop_pending(key, flow)
            expired += 1
        self.expired_pending += expired
        self.hint_budgets.prune(now)
        return expired

    def _evict_pending(self, key: Hashable, scope: str) -> None:
        self._drop_pending(key, self.pending[key])
        self.evicted["pending", scope] += 1

    def _link_pending(self, key: Hashable, flow: PendingFlow) -> None:
        same_hint = self._pending_of_ufrag.setdefault(flow.ufrag, {})
        held = len(same_hint)
        same_hint[key] = None
        levels = self._ufrags_holding
        if held:
            del levels[held][flow.ufrag]
        if len(levels) == held + 1:
            levels.append({})
        levels[held + 1][flow.ufrag] = None
        self._pending_of_prefix.setdefault(flow.prefix, {})[key] = None

    def _drop_pending(self, key: Hashable, flow: PendingFlow) -> None:
        del self.pending[key]
        same_hint = self._pending_of_ufrag[flow.ufrag]
        held = len(same_hint)
        del same_hint[key]
        levels = self._ufrags_holding
        del levels[held][flow.ufrag]
        if held > 1:
            levels[held - 1][flow.ufrag] = None
        else:
            del self._pending_of_ufrag[flow.ufrag]
        while len(levels) > 1 and not levels[-1]:
            levels.pop()
        same_prefix = self._pending_of_prefix[flow.prefix]
        del same_prefix[key]
        if not same_prefix:
            del self._pending_of_prefix[flow.prefix]

    # -- confirmed -------------------------------------------------------------------------
    def confirm(
        self, key: Hashable, target_id: int, now: int
    ) -> tuple[ConfirmedFlow, bool, list[ConfirmedFlow]]:
        """A transceiver sent to this client: create, refresh or re-point its flow.

        Returns the flow, whether it is new or re-pointed (the caller then sets ``wire``), and
        the flows evicted to make room (the caller frees their journal slots first).
        """
        flow = self.confirmed.get(key)
        if flow is not None:
            if flow.target_id == target_id:
                self._touch(key, flow, now)
                return flow, False, []
            return flow, True, self._repoint(key, flow, target_id, now)
        pending = self.pending.get(key)
        ufrag = None
        if pending is not None:
            if pending.target_id == target_id:
                ufrag = pending.ufrag
            self._drop_pending(key, pending)
        evicted = self._make_room(target_id, ufrag)
        flow = ConfirmedFlow(target_id, now, ufrag)
        self._add_confirmed(key, flow)
        self.created_confirmed += 1
        return flow, True, evicted

    def restore(
        self, key: Hashable, target_id: int, now: int
    ) -> tuple[ConfirmedFlow | None, list[ConfirmedFlow]]:
        """Re-create a confirmed flow found in the journal or Redis (its hint is not known).

        Returns None for a client that has a flow already, and the flows evicted for room.
        """
        if key in self.confirmed:
            return None, []
        evicted = self._make_room(target_id, None)
        flow = ConfirmedFlow(target_id, now)
        self._add_confirmed(key, flow)
        return flow, evicted

    def refresh(self, keys: Iterable[Hashable], now: int) -> None:
        """The coarse tick: these clients got packets from their transceivers since the last one.

        Moves each to the most recent end of its orders (~60 ns a flow, once a second, for the
        flows that carried traffic: nothing per packet).
        """
        confirmed = self.confirmed
        to_end = confirmed.move_to_end
        of_target = self._confirmed_of_target
        for key in keys:
            flow = confirmed.get(key)
            if flow is not None:
                flow.last_seen = now
                to_end(key)
                of_target[flow.target_id].move_to_end(key)

    def expire_confirmed(self, now: int) -> list[ConfirmedFlow]:
        """Remove flows idle for longer than the idle TTL; return them for the caller to free.

        ``confirmed`` is in last-seen order, so this stops at the first live flow.
        """
        deadline = now - self.limits.idle_ttl_s
        confirmed = self.confirmed
        removed = []
        while confirmed:
            key, flow = next(iter(confirmed.items()))
            if flow.last_seen >= deadline:
                break
            self._remove_confirmed(key, flow)
            removed.append(flow)
        self.expired_confirmed += len(removed)
        return removed

    def remove_target(self, target_id: int) -> list[ConfirmedFlow]:
        """Forget every flow of a transceiver that left the allowlist."""
        for key, flow in list(self.pending.items()):
            if flow.target_id == target_id:
                self._drop_pending(key, flow)
        gone = list(self._confirmed_of_target.get(target_id, {}).items())
        for key, flow in gone:
            self._remove_confirmed(key, flow)
        return [flow for _, flow in gone]

    def count_of_target(self, target_id: int) -> int:
        return len(self._confirmed_of_target.get(target_id, ()))

    def count_of_hint(self, ufrag: str) -> int:
        return len(self._confirmed_of_hint.get(ufrag, ()))

    def _touch(self, key: Hashable, flow: ConfirmedFlow, now: int) -> None:
        flow.last_seen = now
        self.confirmed.move_to_end(key)
        self._confirmed_of_target[flow.target_id].move_to_end(key)

    def _repoint(
        self, key: Hashable, flow: ConfirmedFlow, target_id: int, now: int
    ) -> list[ConfirmedFlow]:
        """Move a flow to another transceiver. Its hint named the old one, so it is dropped."""
        self._unlink(key, flow)
        evicted = []
        same = self._confirmed_of_target.get(target_id)
        if (
            same is not None
            and target_id < ROUTE_ID_BASE
            and len(same) >= self.limits.max_flows_per_transceiver
        ):
            evicted.append(self._evict(next(iter(same)), "transceiver"))
        flow.target_id = target_id
        flow.ufrag = None
        flow.last_seen = now
        self.confirmed.move_to_end(key)
        self._link(key, flow)
        return evicted

    def _make_room(self, target_id: int, ufrag: str | None) -> list[ConfirmedFlow]:
        """Evict, scope by scope, the idlest flow of each scope the newcomer would overfill."""
        lim = self.limits
        evicted = []
        if ufrag is not None:
            same_hint = self._confirmed_of_hint.get(ufrag)
            if same_hint is not None and len(same_hint) >= lim.max_flows_per_hint:
                idlest = min(same_hint, key=lambda k: same_hint[k].last_seen)
                evicted.append(self._evict(idlest, "hint"))
        same_target = self._confirmed_of_target.get(target_id)
        if (
            same_target is not None
            and target_id < ROUTE_ID_BASE
            and len(same_target) >= lim.max_flows_per_transceiver
        ):
            evicted.append(self._evict(next(iter(same_target)), "transceiver"))
        if len(self.confirmed) >= lim.max_confirmed_flows:
            evicted.append(self._evict(next(iter(self.confirmed)), "worker"))
        return evicted

    def _evict(self, key: Hashable, scope: str) -> ConfirmedFlow:
        flow = self.confirmed[key]
        self._remove_confirmed(key, flow)
        self.evicted["confirmed", scope] += 1
        return flow

    def _add_confirmed(self, key: Hashable, flow: ConfirmedFlow) -> None:
        self.confirmed[key] = flow
        self._link(key, flow)

    def _remove_confirmed(self, key: Hashable, flow: ConfirmedFlow) -> None:
        del self.confirmed[key]
        self._unlink(key, flow)

    def _link(self, key: Hashable, flow: ConfirmedFlow) -> None:
        """Enter a flow into its transceiver's and its hint's tables."""
        same = self._confirmed_of_target.get(flow.target_id)
        if same is None:
            same = self._confirmed_of_target[flow.target_id] = OrderedDict()
        same[key] = flow
        if flow.ufrag is not None:
            self._confirmed_of_hint.setdefault(flow.ufrag, {})[key] = flow

    def _unlink(self, key: Hashable, flow: ConfirmedFlow) -> None:
        of_target = self._confirmed_of_target
        same_target = of_target[flow.target_id]
        del same_target[key]
        if not same_target:
            del of_target[flow.target_id]
        if flow.ufrag is not None:
            of_hint = self._confirmed_of_hint
            same_hint = of_hint[flow.ufrag]
            del same_hint[key]
            if not same_hint:
                del of_hint[flow.ufrag]
