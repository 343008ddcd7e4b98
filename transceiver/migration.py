"""Moving calls off a draining transceiver: the owner's side of a resume token, with no I/O.

On SIGTERM the transceiver offers each caller with an open data channel a move
(``session.migrate`` with a token, ``common.resumetoken``); the caller re-offers to the fleet,
and the transceiver that gets that offer claims the token here, over the cluster network
(``transceiver.signaling.forward``). ``Migrations`` is the owner's table of those
offers, one per call:

    (none) --offer--> offered --claim--> claimed --(the caller hangs up the old call,
                                            or end_by passes)--> forgotten with the session

- ``claim`` answers a token once: a second claim of it is ``replayed`` (also once the old
  session has ended: a claimed offer is kept, as used, until its token expires); a token of an
  earlier offer for the same call (another nonce) is ``replayed`` too; a claim after the
  offer's time-to-live is ``expired``; for a call with no offer (never offered, or its session
  ended unclaimed) ``no_session``.
- A claimed call is ended by the server when ``due`` names it (its ``deadline_s`` after the
  claim), if the caller did not hang up its old call first.

Bounds (the attacker: whoever holds a copy of a token, or sends claims with any token): entries
are made only by ``offer``, which the drain calls once per live session, so the table never holds
more than the sessions this process has (``--max-sessions``) plus those that ended claimed less
than a token's lifetime ago (``deadline_s``; ``due`` drops them). A claim never adds an entry.
Time is passed in (``now``: time.monotonic()).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.resumetoken import RESUME_TOKEN_ERROR_REASONS
from common.verdict import Refuse

MIGRATE_EVENT = "session.migrate"  # the data-channel event that asks a caller to move
CLAIM_REFUSALS = ("no_session", "replayed", "expired")
# rtcedge_transceiver_migrations_failed_total{reason}: a fixed set. Counted where the move
# failed: the transceiver that refused a resume offer (the token's reasons; cluster, self,
# no_peer: ``transceiver.ownership.route_resume``; the owner's claim refusals; owner_gone,
# owner_failed, busy, owner_failing: the claim's exchange), or the owner (unclaimed: the drain
# ended with the offer not taken; not_switched: claimed, but the caller never hung up its old
# call, which ended at the deadline).
FAILURE_REASONS: tuple[str, ...] = (
    *RESUME_TOKEN_ERROR_REASONS,
    "cluster",
    "self",
    "no_peer",
    "no_session",
    "replayed",
    "owner_gone",
    "owner_failed",
    "busy",
    "owner_failing",
    "unclaimed",
    "not_switched",
)


# A claim this table does not grant, by reason (common.verdict.Refuse).
NO_SESSION, REPLAYED, EXPIRED = (Refuse(reason) for reason in CLAIM_REFUSALS)


@dataclass
class _Offer:
    nonce: bytes
    expires_at: float  # monotonic: the claim must come before
    claimed_at: float | None = None
    end_by: float | None = None  # monotonic: a claimed call ends then at the latest
    overdue: bool = False  # end_by passed before the caller hung up the old call
    ended: bool = False  # the session is gone; kept (claimed) until expires_at to refuse replays


class Migrations:
    """The owner's offers by call id (see the module)."""

    def __init__(self, deadline_s: float) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        self._offers: dict[str, _Offer] = {}

    def __len__(self) -> int:
        return len(self._offers)

    def offer(self, call_id: str, nonce: bytes, now: float) -> None:
        """A token for ``call_id`` with ``nonce`` was given: it may be claimed within
        ``deadline_s``. An earlier unclaimed offer for the call is replaced (its token then
        no longer claims); a claimed call is not offered again."""
        current = self._offers.get(call_id)
        if current is not None and current.claimed_at is not None:
            raise ValueError(f"call {call_id} was claimed already")
        self._offers[call_id] = _Offer(nonce, now + self.deadline_s)

    def claim(self, call_id: str, nonce: bytes, now: float, live: bool = True) -> float | Refuse:
        """Grant the claim of the token (``call_id``, ``nonce``): when the old call ends at the
        latest (monotonic), or why not (a reason of CLAIM_REFUSALS). ``live``: the session is
        not ending (a token of a call that is ending, unclaimed, is no_session; claimed,
        replayed)."""
        offer = self._offers.get(call_id)
        if offer is None:
            return NO_SESSION
        if offer.claimed_at is not None or offer.nonce != nonce:
            return REPLAYED
        if now > offer.expires_at:
            return EXPIRED
        if not live:
            return NO_SESSION
        offer.claimed_at = now
        offer.end_by = now + self.deadline_s
        return offer.end_by

    def claimed(self, call_id: str) -> bool:
        offer = self._offers.get(call_id)
        return offer is not None and offer.claimed_at is not None and not offer.ended

    def offered(self, call_id: str) -> bool:
        return call_id in self._offers

    def unclaimed(self) -> int:
        """Offers made and not (yet) claimed."""
        return sum(1 for o in self._offers.values() if o.claimed_at is None)

    def due(self, now: float) -> list[str]:
        """Claimed calls whose old session must end now (the caller did not hang it up), each
        named once."""
        due = []
        for call_id, offer in list(self._offers.items()):
            if offer.ended:
                if now > offer.expires_at:  # its token no longer verifies: nothing to refuse
                    del self._offers[call_id]
            elif offer.end_by is not None and now >= offer.end_by and not offer.overdue:
                offer.overdue = True
                due.append(call_id)
        return due

    def forget(self, call_id: str) -> str | None:
        """The session ended: drop its entry. Returns what had become of its offer: "offered"
        (never claimed), "claimed" (the move completed: the caller hung up its old call),
        "overdue" (claimed, ended by ``due``), or None (no offer)."""
        offer = self._offers.get(call_id)
        if offer is None or offer.ended:
            return None
        if offer.claimed_at is None:
            del self._offers[call_id]
            return "offered"
        offer.ended = True
        return "overdue" if offer.overdue else "claimed"
