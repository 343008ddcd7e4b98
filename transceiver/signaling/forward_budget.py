"""How many requests may be passed on to fellow transceivers at once, and to which owner.

The bounds of ``transceiver.signaling.forward`` (which is the I/O). Sans-I/O: owners, client keys
and ``now`` in, a ``Slot`` or the refusal of one (``common.verdict.Refuse``) out.

Why more than one counter (issue 21, item 6): with one budget for every owner, 40 DELETEs of an
id whose owner hangs held all 32 slots for --peer-timeout each, and a DELETE to a healthy owner
and a resume offer were refused (~7 requests/s sustained it). Now:
- DELETE/PATCH forwards: at most ``max_forwards`` in all, ``max_per_owner`` to one owner and
  ``max_per_client`` from one client (``transceiver.signaling.clients.client_key``): an owner that
  hangs holds at most its own few slots, a client at most two;
- resume claims: a budget of their own (``max_claims``), untouched by forwards; not per owner,
  since a draining owner's calls all claim from it at once;
- an owner that timed out is failed fast (``owner_failing``) for ``fail_fast_s``: no slot is
  held for it meanwhile, forwards and claims alike.

Tables (each bounded): in-flight counts per owner and per client (entries only while a slot is
held: at most ``max_forwards`` + ``max_claims`` entries), and the failing owners (filled by a
timed-out exchange; at most ``max_failing_owners``, the entry expiring first evicted when full).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.verdict import Refuse

# Why a slot is refused (rtcedge_transceiver_session_requests_refused_total{reason} for a forward;
# migrations_failed_total{reason} for a claim).
BUDGET_REASONS: tuple[str, ...] = ("busy", "owner_busy", "client_busy", "owner_failing")
BUSY, OWNER_BUSY, CLIENT_BUSY, OWNER_FAILING = (Refuse(reason) for reason in BUDGET_REASONS)


@dataclass(frozen=True)
class PeerLimits:
    max_forwards: int = 32  # DELETE/PATCH forwards under way at once, all owners
    max_per_owner: int = 4  # ... to one owner
    max_per_client: int = 2  # ... from one client
    max_claims: int = 16  # resume claims under way at once, a budget of their own
    fail_fast_s: float = 3.0  # after an owner timed out, refuse at once for this long (0: off)
    max_failing_owners: int = 1024


@dataclass(frozen=True)
class Slot:
    """One exchange under way: give it back with ``PeerBudget.release``."""

    owner: int
    client: str | None  # None for a claim
    claim: bool


class PeerBudget:
    """The forwarder's slots (its event loop is the only caller: no lock)."""

    def __init__(self, limits: PeerLimits) -> None:
        self.limits = limits
        self.forwards = 0
        self.claims = 0
        self._per_owner: dict[int, int] = {}  # forwards under way, by owner
        self._per_client: dict[str, int] = {}  # forwards under way, by client key
        self._failing: dict[int, float] = {}  # owner -> refused until (now's clock)

    def take_forward(self, owner: int, client: str, now: float) -> Slot | Refuse:
        """A slot for a DELETE/PATCH to ``owner`` from ``client``, or why not: the owner is
        failing, or one of the three budgets is spent (owner_busy, client_busy, busy)."""
        lim = self.limits
        if self.failing(owner, now):
            return OWNER_FAILING
        if self._per_owner.get(owner, 0) >= lim.max_per_owner:
            return OWNER_BUSY
        if self._per_client.get(client, 0) >= lim.max_per_client:
            return CLIENT_BUSY
        if self.forwards >= lim.max_forwards:
            return BUSY
        self.forwards += 1
        self._per_owner[owner] = self._per_owner.get(owner, 0) + 1
        self._per_client[client] = self._per_client.get(client, 0) + 1
        return Slot(owner, client, claim=False)

    def take_claim(self, owner: int, now: float) -> Slot | Refuse:
        """A slot for a resume claim from ``owner``, or why not (owner_failing, busy)."""
        if self.failing(owner, now):
            return OWNER_FAILING
        if self.claims >= self.limits.max_claims:
            return BUSY
        self.claims += 1
        return Slot(owner, None, claim=True)

    def release(self, slot: Slot, timed_out: bool, now: float) -> None:
        """The exchange is over; ``timed_out``: the owner did not answer in time (or could not
        be connected to in time), so it is failed fast for ``fail_fast_s``."""
        if slot.claim:
            self.claims -= 1
        else:
            self.forwards -= 1
            _decrement(self._per_owner, slot.owner)
            assert slot.client is not None
            _decrement(self._per_client, slot.client)
        if timed_out and self.limits.fail_fast_s > 0:
            self._mark_failing(slot.owner, now + self.limits.fail_fast_s)

    def failing(self, owner: int, now: float) -> bool:
        until = self._failing.get(owner)
        if until is None:
            return False
        if now < until:
            return True
        del self._failing[owner]
        return False

    @property
    def failing_owners(self) -> int:
        """Entries of the failing table (expired ones included until looked at or evicted)."""
        return len(self._failing)

    def in_flight(self, owner: int | None = None, client: str | None = None) -> int:
        """Forwards under way to ``owner`` or from ``client`` (tests, metrics)."""
        if owner is not None:
            return self._per_owner.get(owner, 0)
        if client is not None:
            return self._per_client.get(client, 0)
        return self.forwards

    def _mark_failing(self, owner: int, until: float) -> None:
        table = self._failing
        if owner not in table and len(table) >= self.limits.max_failing_owners:
            now = until - self.limits.fail_fast_s
            for expired in [o for o, t in table.items() if t <= now]:
                del table[expired]
            if len(table) >= self.limits.max_failing_owners:
                del table[min(table, key=table.__getitem__)]
        table[owner] = max(until, table.get(owner, until))


def _decrement(table: dict, key: object) -> None:
    left = table[key] - 1
    if left:
        table[key] = left
    else:
        del table[key]
