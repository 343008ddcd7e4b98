"""The relay's flow tables: which transceiver owns which client address.

Sans-I/O: no sockets, no clocks; ``now`` is a coarse monotonic second passed in by the worker.

Two tables (DESIGN.md):
- *pending*: made by a Binding request carrying a valid hint. Short fixed TTL, a global cap and caps
  per ufrag and per source prefix, so a forged or replayed hint cannot fill memory. Only STUN is
  forwarded for a pending flow.
- *confirmed*: made or refreshed only by packets a transceiver sends back to the client, so a client
  (or an attacker spoofing one) can never extend a flow by itself. Idle TTL, a cap, and no eviction
  of a live flow to make room for a new one.

The worker's hot loop reads ``confirmed`` directly; everything else goes through methods.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


class FlowLimitError(Exception):
    """A new flow was refused by a limit; ``reason`` is the drop counter's label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FlowLimits:
    max_pending_flows: int = 4096
    max_pending_per_ufrag: int = 8
    max_pending_per_prefix: int = 64
    pending_ttl_s: int = 10
    max_confirmed_flows: int = 65536
    idle_ttl_s: int = 45


class PendingFlow:
    __slots__ = ("expires_at", "prefix", "target_id", "ufrag")

    def __init__(self, target_id: int, ufrag: str, prefix: bytes, expires_at: int) -> None:
        self.target_id = target_id
        self.ufrag = ufrag
        self.prefix = prefix
        self.expires_at = expires_at


class ConfirmedFlow:
    """A confirmed flow; ``wire`` and ``slot`` belong to the worker (send descriptors, journal)."""

    __slots__ = ("last_seen", "slot", "stored_at", "target_id", "wire")

    def __init__(self, target_id: int, now: int) -> None:
        self.target_id = target_id
        self.last_seen = now
        self.stored_at = now  # when the flow cache (if any) was last written
        self.wire: Any = None
        self.slot = -1


class FlowTable:
    """Pending and confirmed flows keyed by the client's address (see relay.peerkey)."""

    def __init__(self, limits: FlowLimits) -> None:
        self.limits = limits
        self.pending: dict[Hashable, PendingFlow] = {}
        self.confirmed: dict[Hashable, ConfirmedFlow] = {}
        self._pending_by_ufrag: dict[str, int] = {}
        self._pending_by_prefix: dict[bytes, int] = {}
        self.created_pending = 0
        self.created_confirmed = 0
        self.expired_pending = 0
        self.expired_confirmed = 0

    # -- pending ---------------------------------------------------------------------------
    @property
    def pending_full(self) -> bool:
        """At the cap (expired entries are only removed on the coarse tick)."""
        return len(self.pending) >= self.limits.max_pending_flows

    def admit(self, key: Hashable, prefix: bytes, ufrag: str, target_id: int, now: int) -> None:
        """Record a pending flow for a verified first packet, or raise FlowLimitError.

        A client that is already pending for the same ufrag (ICE retransmissions) is accepted
        without counting again; the TTL is not extended, so retransmits cannot keep it alive.
        """
        current = self.pending.get(key)
        if current is not None:
            if current.ufrag == ufrag:
                return
            self._drop_pending(key, current)
        lim = self.limits
        if len(self.pending) >= lim.max_pending_flows:
            raise FlowLimitError("pending_full")
        if self._pending_by_ufrag.get(ufrag, 0) >= lim.max_pending_per_ufrag:
            raise FlowLimitError("pending_ufrag_limit")
        if self._pending_by_prefix.get(prefix, 0) >= lim.max_pending_per_prefix:
            raise FlowLimitError("pending_prefix_limit")
        self.pending[key] = PendingFlow(target_id, ufrag, prefix, now + lim.pending_ttl_s)
        self._pending_by_ufrag[ufrag] = self._pending_by_ufrag.get(ufrag, 0) + 1
        self._pending_by_prefix[prefix] = self._pending_by_prefix.get(prefix, 0) + 1
        self.created_pending += 1

    def _drop_pending(self, key: Hashable, flow: PendingFlow) -> None:
        del self.pending[key]
        for counts, k in (
            (self._pending_by_ufrag, flow.ufrag),
            (self._pending_by_prefix, flow.prefix),
        ):
            left = counts[k] - 1
            if left:
                counts[k] = left
            else:
                del counts[k]

    def expire_pending(self, now: int) -> int:
        """Drop pending flows past their TTL. Insertion order is expiry order, so stop early."""
        expired = 0
        for key, flow in list(self.pending.items()):
            if flow.expires_at > now:
                break
            self._drop_pending(key, flow)
            expired += 1
        self.expired_pending += expired
        return expired

    # -- confirmed -------------------------------------------------------------------------
    def confirm(self, key: Hashable, target_id: int, now: int) -> tuple[ConfirmedFlow, bool]:
        """A transceiver sent to this client: create, refresh or re-point its flow.

        Returns the flow and whether it is new or re-pointed (the caller then sets ``wire``).
        Raises FlowLimitError("flows_full") rather than evicting a live flow.
        """
        flow = self.confirmed.get(key)
        if flow is not None:
            flow.last_seen = now
            if flow.target_id == target_id:
                return flow, False
            flow.target_id = target_id
            return flow, True
        if len(self.confirmed) >= self.limits.max_confirmed_flows:
            raise FlowLimitError("flows_full")
        pending = self.pending.get(key)
        if pending is not None:
            self._drop_pending(key, pending)
        flow = ConfirmedFlow(target_id, now)
        self.confirmed[key] = flow
        self.created_confirmed += 1
        return flow, True

    def restore(self, key: Hashable, target_id: int, now: int) -> ConfirmedFlow | None:
        """Re-create a confirmed flow found in the worker's journal after a restart."""
        if key in self.confirmed or len(self.confirmed) >= self.limits.max_confirmed_flows:
            return None
        flow = ConfirmedFlow(target_id, now)
        self.confirmed[key] = flow
        return flow

    def expire_confirmed(self, now: int) -> list[ConfirmedFlow]:
        """Remove flows idle for longer than the idle TTL; return them for the caller to free."""
        deadline = now - self.limits.idle_ttl_s
        gone = [k for k, f in self.confirmed.items() if f.last_seen < deadline]
        removed = [self.confirmed.pop(k) for k in gone]
        self.expired_confirmed += len(removed)
        return removed

    def remove_target(self, target_id: int) -> list[ConfirmedFlow]:
        """Forget every flow of a transceiver that left the allowlist."""
        for key, flow in list(self.pending.items()):
            if flow.target_id == target_id:
                self._drop_pending(key, flow)
        gone = [k for k, f in self.confirmed.items() if f.target_id == target_id]
        return [self.confirmed.pop(k) for k in gone]
