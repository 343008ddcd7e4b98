"""A worker's bookkeeping off the hot path: configuration, persistence and the coarse tick.

The hot path (relay.worker) reads the confirmed flow table and the routing tables and adds the
clients a transceiver sent to into ``refreshed``; everything that changes those tables, or must
follow a change, happens here:

- on the tick (once a second): apply a new routing configuration (relay.routing), move the
  refreshed flows to the recent end (and write them behind to Redis), expire idle flows, forget
  full first-packet budgets, export the flow counters;
- at start: restore the flows a crashed predecessor journalled; later, those Redis knew;
- per new or re-pointed flow a transceiver names (``confirm``): the table, its journal slot, its
  send descriptor (relay.headers) and its Redis record, in step;
- a cluster relay's confirmed peer flows (relay.edgeflows) the same way: journalled with their
  edge in a journal of their own (``peer_journal``), written behind to Redis under the client's
  key (a client is the same client whichever way it came), looked up when an edge sends media
  for a client without one (``look_up_peer``) and restored with the edge that sent it.

Written for reading; ``now`` is the worker's coarse monotonic second, passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from relay import counters as C
from relay.addrkey import AddressKeys
from relay.config import RelayConfig
from relay.control import ControlBlock, RoutingConfig
from relay.edgeflows import EdgeFlow, EdgeFlowTable
from relay.flowcache import RedisFlowCache
from relay.flows import EVICTIONS, ConfirmedFlow, FlowTable
from relay.headers import FlowHeaders
from relay.journal import FlowJournal
from relay.ratelimit import KeyedBuckets
from relay.routing import Routing, Target

CONFIRMED_SWEEPS_PER_TTL = 4
_DENIED = C.DROPS + C.DROP_INDEX["denied_address"]


class Housekeeping:
    def __init__(
        self,
        config: RelayConfig,
        keys: AddressKeys,
        flows: FlowTable,
        routing: Routing,
        headers: FlowHeaders,
        journal: FlowJournal,
        control: ControlBlock,
        counters: memoryview,
        denies: Callable[[Hashable], bool],
        first_packets: KeyedBuckets,
    ) -> None:
        self.config = config
        self.keys = keys
        self.flows = flows
        self.routing = routing
        self.denies = denies  # relay.admission's address policy: no flow, in either direction
        self.first_packets = first_packets  # relay.admission's budgets, pruned on the tick
        self.headers = headers
        self.journal = journal
        self.control = control
        self.ctr = counters
        self.refreshed: set[Hashable] = set()  # clients a transceiver sent to since the last tick
        self.cache: RedisFlowCache | None = None  # started in start(), after the fork
        self.peer_flows: EdgeFlowTable | None = None  # a cluster relay's (relay.edgeflows)
        self.peer_journal: FlowJournal | None = None
        self._peer_lookups: dict[Hashable, bytes] = {}  # in-flight Redis lookups: client -> edge
        self._last_tick = 0
        self.generation = -1
        self.serving = False
        self._next_confirmed_sweep = 0

    def start(self, now: int) -> None:
        """Before serving: the Redis cache (if configured), the routing configuration, then the
        journalled flows (their transceivers must be known first)."""
        cfg = self.config
        if cfg.redis_url:
            self.cache = RedisFlowCache(
                cfg.redis_url,
                cfg.cluster,
                ttl_s=2 * cfg.limits.idle_ttl_s,
                timeout_s=cfg.redis_timeout_ms / 1000,
                lookups_per_s=cfg.redis_lookups_per_s,
                auth=cfg.redis_auth,
            ).start()
        self.tick(now)
        self.restore_journal(now)

    def serve(self) -> None:
        """The worker forwards from now on: /readyz may count its configuration as applied."""
        self.serving = True
        self.ctr[C.CONFIG_GENERATION] = self.generation

    # -- configuration ---------------------------------------------------------------------------
    def poll_control(self) -> None:
        if self.control.generation() == self.generation:
            return
        self.generation, raw = self.control.read()
        self.apply_routing(RoutingConfig.from_json(raw))
        if self.serving:  # /readyz: this worker forwards with the current configuration
            self.ctr[C.CONFIG_GENERATION] = self.generation

    def apply_routing(self, config: RoutingConfig) -> None:
        for tid in self.routing.apply(config):
            self._free(self.flows.remove_target(tid))
            if self.peer_flows is not None:
                self.peer_flows.remove_target(tid)

    # -- the coarse tick -------------------------------------------------------------------------
    def tick(self, now: int) -> None:
        self.poll_control()
        flows = self.flows
        confirmed = flows.confirmed
        cache = self.cache
        flows.refresh(self.refreshed, now)
        if cache is not None:
            rewrite_after = self.config.limits.idle_ttl_s // 2
            for key in self.refreshed:
                flow = confirmed.get(key)
                if flow is not None and now - flow.stored_at >= rewrite_after:
                    flow.stored_at = now
                    cache.store(key, self.keys.host_port(key), flow.target_id)
        self.refreshed.clear()
        if cache is not None:
            stats = cache.stats
            for i, value in enumerate(
                (stats.writes, stats.hits, stats.misses, stats.errors, stats.dropped)
            ):
                self.ctr[C.REDIS_OPS + i] = value
        flows.expire_pending(now)
        self.first_packets.prune(now)
        if now >= self._next_confirmed_sweep:
            self._free(flows.expire_confirmed(now))
            self._next_confirmed_sweep = now + max(
                1, self.config.limits.idle_ttl_s // CONFIRMED_SWEEPS_PER_TTL
            )
        ctr = self.ctr
        ctr[C.FLOWS_CREATED_PENDING] = flows.created_pending
        ctr[C.FLOWS_CREATED_CONFIRMED] = flows.created_confirmed
        ctr[C.FLOWS_EXPIRED_PENDING] = flows.expired_pending
        ctr[C.FLOWS_EXPIRED_CONFIRMED] = flows.expired_confirmed
        ctr[C.FLOWS_ACTIVE_PENDING] = len(flows.pending)
        ctr[C.FLOWS_ACTIVE_CONFIRMED] = len(flows.confirmed)
        for i, scope in enumerate(EVICTIONS):
            ctr[C.FLOWS_EVICTED + i] = flows.evicted[scope]
        peer = self.peer_flows
        if peer is not None:
            if cache is not None and peer.flows:
                self._store_heard_peer_flows(now)
            peer.expire(now)
            self._release_peer_slots()
            pending = peer.count_pending()
            for i, value in enumerate(
                (peer.created, peer.expired, peer.evicted, pending, len(peer.flows) - pending)
            ):
                ctr[C.PEER_FLOWS + i] = value
        self._last_tick = now

    # -- confirmed flows and what follows them ---------------------------------------------------
    def confirm(self, key: Hashable, target: Target, now: int) -> bool:
        """A transceiver sent to ``key``: create or re-point its confirmed flow and journal it.

        False means refused: the caller must drop the packet, not send it.
        """
        if key not in self.flows.confirmed and self.denies(key):
            self.ctr[_DENIED] += 1
            return False
        flow, changed, evicted = self.flows.confirm(key, target.tid, now)
        self._free(evicted)  # first: the newcomer may take an evicted flow's journal slot
        if changed:
            self._journal_and_wire(key, flow, target)
            if self.cache is not None:
                flow.stored_at = now
                self.cache.store(key, self.keys.host_port(key), target.tid)
        return True

    def restore_journal(self, now: int) -> int:
        """Flows a crashed predecessor journalled: recreate them, in the slots they had."""
        self._restore_peer_journal(now)
        restored = 0
        targets = self.routing.targets
        for slot, raw, tid in self.journal.attach():
            key = self.keys.from_bytes(raw)
            target = targets.get(tid)
            flow = None
            if target is not None and not self.denies(key):
                flow, evicted = self.flows.restore(key, tid, now)
                self._free(evicted)
            if flow is None:
                self.journal.clear(slot)
                continue
            flow.slot = slot
            flow.wire = self.headers.flow_wire(key, target, slot)
            restored += 1
        self.ctr[C.FLOWS_RESTORED] += restored
        return restored

    def look_up(self, key: Hashable) -> None:
        """A client without a flow sent media: after a relay restart, Redis may know its flow."""
        if self.cache is not None:
            self.cache.lookup(key, self.keys.host_port(key), time.monotonic())

    def restore_from_cache(self, now: int) -> None:
        """Flows Redis knew: recreate them (a relay replaced while its calls went on)."""
        assert self.cache is not None
        targets = self.routing.targets
        peer_lookups = self._peer_lookups
        for key, tid in self.cache.take_results(time.monotonic()):
            if peer_lookups:
                edge = peer_lookups.pop(key, None)
                if edge is not None:
                    self._restore_peer_flow(key, tid, edge, now)
                    continue
            target = targets.get(tid)
            if target is None or key in self.flows.confirmed or self.denies(key):
                continue
            flow, evicted = self.flows.restore(key, tid, now)
            self._free(evicted)
            if flow is None:
                continue
            self._journal_and_wire(key, flow, target)
            self.ctr[C.FLOWS_RESTORED_REDIS] += 1
        if peer_lookups:  # the misses: no longer in flight
            in_flight = self.cache.in_flight
            for key in [k for k in peer_lookups if k not in in_flight]:
                del peer_lookups[key]

    def _free(self, flows: list[ConfirmedFlow]) -> None:
        """Release the journal slots (and so the header slots) of flows that left the table."""
        for flow in flows:
            self.journal.clear(flow.slot)

    def _journal_and_wire(self, key: Hashable, flow: ConfirmedFlow, target: Target) -> None:
        flow.slot = self.journal.write(self.keys.to_bytes(key), target.tid, flow.slot)
        if flow.slot < 0:
            # The table never holds more flows than the journal has slots, and every flow that
            # leaves frees its slot. A restarted worker rebuilds both from the journal.
            raise RuntimeError("flow journal full: out of step with the flow table")
        flow.wire = self.headers.flow_wire(key, target, flow.slot)

    # -- a cluster relay's peer flows (relay.edgeflows) ------------------------------------------
    def peer_confirmed(self, key: Hashable, flow: EdgeFlow, now: int) -> None:
        """A peer flow's target answered for the first time, or another target did: journal it
        and write it behind, as ``confirm`` does for a client flow."""
        self.journal_peer(key, flow)
        if self.cache is not None:
            flow.stored_at = now
            self.cache.store(key, self.keys.host_port(key), flow.target.tid)

    def journal_peer(self, key: Hashable, flow: EdgeFlow) -> None:
        """(Re)write a confirmed peer flow's record: new, re-pointed, or heard through another
        edge. A journal out of slots (it cannot be: it has one per flow the table may hold, and
        every flow that leaves releases its slot) leaves the flow unjournalled, not the worker
        dead."""
        journal = self.peer_journal
        if journal is None:
            return
        self._release_peer_slots()
        flow.slot = journal.write(self.keys.to_bytes(key), flow.target.tid, flow.slot, flow.edge)

    def look_up_peer(self, key: Hashable, edge: bytes) -> None:
        """An edge sent media for a client without a peer flow: after a restart, or from an edge
        that now hashes to this worker, Redis may know the client's target."""
        cache = self.cache
        if cache is not None and cache.lookup(key, self.keys.host_port(key), time.monotonic()):
            self._peer_lookups[key] = edge

    def _restore_peer_flow(self, key: Hashable, tid: int, edge: bytes, now: int) -> None:
        peer = self.peer_flows
        target = self.routing.targets.get(tid)
        if peer is None or target is None:
            return
        flow = peer.restore(key, target, edge, now)
        if flow is None:  # the client came through an edge meanwhile, with a STUN check
            return
        self.journal_peer(key, flow)
        self.ctr[C.PEER_FLOWS_RESTORED_REDIS] += 1

    def _restore_peer_journal(self, now: int) -> None:
        """Peer flows a crashed predecessor journalled, with the edge each came through last."""
        journal, peer = self.peer_journal, self.peer_flows
        if journal is None or peer is None:
            return
        targets = self.routing.targets
        restored = 0
        for slot, raw, tid in journal.attach():
            target = targets.get(tid)
            edge = journal.extra(slot)
            flow = None
            if target is not None and edge:
                flow = peer.restore(self.keys.from_bytes(raw), target, edge, now)
            if flow is None:
                journal.clear(slot)
                continue
            flow.slot = slot
            restored += 1
        self._release_peer_slots()
        self.ctr[C.PEER_FLOWS_RESTORED] += restored

    def _release_peer_slots(self) -> None:
        peer, journal = self.peer_flows, self.peer_journal
        if peer is None or not peer.released:
            return
        if journal is not None:
            for slot in peer.released:
                journal.clear(slot)
        peer.released.clear()

    def _store_heard_peer_flows(self, now: int) -> None:
        """Write behind, every half idle TTL, the confirmed peer flows an edge sent for since
        the last tick (the table is in heard order: the newest are at its end)."""
        assert self.cache is not None and self.peer_flows is not None
        rewrite_after = self.config.limits.idle_ttl_s // 2
        since = self._last_tick
        for key, flow in reversed(self.peer_flows.flows.items()):
            if flow.heard < since:
                break
            if flow.confirmed and now - flow.stored_at >= rewrite_after:
                flow.stored_at = now
                self.cache.store(key, self.keys.host_port(key), flow.target.tid)
