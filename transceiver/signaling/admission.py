"""Where a WHIP offer is admitted: the rule for a ``POST /whip``, as the relay's is for a packet.

The handler (``transceiver.signaling.http.WhipHandlers``) is the loop: it reads the request, asks
here, does the I/O an answer calls for, and answers. Each step passes, or refuses with a
``Refuse`` (``common.verdict``: the status, the text answered, Retry-After, the reason counted
and its kind), in this order, cheapest and least trusting first; no body is read before step 7:

``decide``, on the request's head and who sent it, at a ``Door`` (WHIP's, or the Realtime
API's ``/v1/realtime/calls``: its own gate and body types, the same capacity and quotas):
1. gate: the bearer (``transceiver.signaling.gate``)            -> 401 ``missing``, ``wrong_token``
                                                                   or the signed token's reason
2. the content type is one the door takes (application/sdp)     -> 415 ``content_type``
3. the declared length is within --max-sdp-bytes                -> 413 ``too_large``
4. capacity (``TransceiverServer.capacity_refusal``): draining,  -> 503 + Retry-After ``draining``,
   the session limit, headroom by load; the offers admitted        ``max_sessions``, ``cpu``,
   here that are not sessions yet count as sessions                ``loop_lag``, ``headroom``
5. client: its address (behind trusted proxies only), its quota key and region
   (``transceiver.signaling.clients``)                           (never refuses)
6. rate: the client's token bucket (--client-rate)              -> 429 + Retry-After ``client_rate``
7. per-client limit: its live sessions and offers in flight     -> 429 + Retry-After
   (--client-max-sessions)                                          ``client_sessions``

An ``Admit`` holds its offer's place in steps 4 and 7 until ``settle``: capacity is decided once,
here, and offers admitted together cannot overshoot it (``create_session`` does not ask again).
The handler then reads the body (413 ``too_large``, 408 ``body_timeout``), and:

8. offer checks (``offer``: UTF-8, then ``transceiver.signaling.offer``) -> 400 ``not_utf8``, the
   label of the limit it is over, or ``invalid``
9. resume, with ``X-Rtcedge-Resume`` only (``resume``): the token     -> 400, 409, 410 or 503 +
   routes to the call's owner (``transceiver.ownership.route_resume``)  Retry-After, by reason
   (``RESUME_REFUSALS``); the handler claims it from the owner (I/O), and a refused claim is
   answered the same way (``resume_refused``).

A call that is moving has seconds to do it: refused at step 4 it is told to try another pod at
once (0 s) by a draining one, which the Service is dropping, or in 1 s by a full one.

Sans-I/O: the request's facts and the time passed in; the state is the objects it is given (the
client buckets and slots, the offers in flight change as it decides). The handler counts every
refusal by its kind and reason.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

from common.verdict import Refuse
from transceiver.ownership import Claim, SessionRouter
from transceiver.signaling.clients import (
    Network,
    client_address,
    client_key,
    from_trusted_proxy,
)
from transceiver.signaling.gate import Caller, Gate
from transceiver.signaling.offer import read_offer, too_large
from transceiver.signaling.quota import RateLimiter, SessionsPerClient, retry_after_s

SDP = "application/sdp"
RETRY_AFTER_S = 5  # told to a client over its own session limit
PEER_RETRY_AFTER_S = 1  # told to a call moving here when its owner is busy or failed
MAX_USER_AGENT = 200  # characters of User-Agent the backend is told

# The kinds of refusals this rule makes besides the gate's (``gate.TOKEN``), the offer's
# (``offer.OFFER``) and capacity's (``headroom.CAPACITY``): what counts them apart.
REQUEST = "request"  # not an offer the endpoint takes (its content type)
CLIENT = "client"  # the client's own quotas
RESUME = "resume"  # a call that cannot move here (rtcedge_transceiver_migrations_failed_total)

# A resume offer refused, by why (transceiver.migration.FAILURE_REASONS): status and text;
# any other reason is the token's own (it does not verify): 400.
INVALID_TOKEN = (400, "invalid resume token")
RESUME_REFUSALS = {
    "replayed": (409, "resume token already used"),
    "expired": (410, "resume token expired"),
    "no_session": (410, "the call to resume is gone"),
    "owner_gone": (410, "the call to resume is gone"),
    "no_peer": (410, "the call to resume is gone"),
    "busy": (503, "the call's transceiver is busy or failed, try again"),
    "owner_failed": (503, "the call's transceiver is busy or failed, try again"),
    "owner_failing": (503, "the call's transceiver is busy or failed, try again"),
}


def resume_refused(reason: str) -> Refuse:
    """A resume offer refused for ``reason`` (step 9: the token's route, or its claim)."""
    status, text = RESUME_REFUSALS.get(reason, INVALID_TOKEN)
    retry_s = PEER_RETRY_AFTER_S if status == 503 else None
    return Refuse(reason, text, status, retry_s, RESUME)


@dataclass(frozen=True)
class Door:
    """Where offers come in: who may call it, and which bodies it takes."""

    gate: Gate
    content_types: frozenset[str] = frozenset({SDP})
    max_body_bytes: int | None = None  # None: --max-sdp-bytes (a form holds more than its offer)

    def content_type_refusal(self, content_type: str) -> Refuse | None:
        if content_type in self.content_types:
            return None
        takes = " or ".join(sorted(self.content_types))
        text = f"Content-Type must be {takes}, not {content_type}"
        return Refuse("content_type", text, 415, kind=REQUEST)


class BodyLimit(NamedTuple):
    limit: int  # bytes
    refusal: Refuse  # its 413


class Capacity(Protocol):
    """What the admission asks of the server (``TransceiverServer`` is one)."""

    def capacity_refusal(self, now: float | None = None, pending: int = 0) -> Refuse | None: ...

    @property
    def sessions(self) -> Container[str]:
        """The call ids of the live sessions."""
        ...


@dataclass(frozen=True, slots=True)
class OfferRequest:
    """What ``decide`` reads of a POST /whip: its head, and who sent it."""

    authorization: str = ""  # the Authorization header
    content_type: str = SDP
    content_length: int | None = None  # as declared
    peer: str | None = None  # the TCP peer's address
    forwarded_for: str | None = None  # the --client-address-header, believed from trusted proxies
    region: str | None = None  # the --region-header, likewise
    user_agent: str = ""
    resume: str | None = None  # X-Rtcedge-Resume: the token of a call that moves here


@dataclass(frozen=True, slots=True)
class Admit:
    """An offer admitted on its head: who sent it, holding its place until ``settle``."""

    address: str | None  # the client's (``transceiver.signaling.clients.client_address``)
    key: str  # what its quotas count by
    region: str | None  # its region header, if a trusted proxy set it
    metadata: dict[str, str] = field(compare=False)  # what the backend is told of the caller
    received_at: float = 0.0  # when the POST arrived (monotonic)
    resume: str | None = None  # the resume token of a call that moves here
    caller: Caller = field(default=Caller(), compare=False)  # who the gate found the bearer to be


class OfferAdmission:
    """The rule for a WHIP offer, over the state it needs (see the module docstring)."""

    def __init__(
        self,
        gate: Gate,
        capacity: Capacity,
        router: SessionRouter,
        *,
        max_sdp_bytes: int,
        migrate_deadline_s: float,
        trusted: Sequence[Network] = (),
        rate: RateLimiter | None = None,
        per_client: SessionsPerClient | None = None,
    ) -> None:
        self.gate = gate
        self.door = Door(gate)  # WHIP's; another door shares the capacity and the quotas
        self.capacity = capacity
        self.router = router
        self.too_large = too_large(max_sdp_bytes)  # steps 3 and the body's read
        self.max_sdp_bytes = max_sdp_bytes
        self.migrate_deadline_s = migrate_deadline_s
        self.trusted = trusted
        self.rate = rate  # step 6; None: no rate per client
        self.per_client = per_client  # step 7; None: no limit per client
        self.pending = 0  # offers admitted, not settled yet

    def decide(
        self, request: OfferRequest, now: float, unix_now: float, door: Door | None = None
    ) -> Admit | Refuse:
        """Steps 1-7 at ``door`` (WHIP's by default): the offer's ``Admit``, or why it is
        refused before its body is read. ``now``: time.monotonic() (buckets, load);
        ``unix_now``: the clock tokens are checked against."""
        door = door or self.door
        caller = door.gate.caller(request.authorization, unix_now)
        if isinstance(caller, Refuse):
            return caller
        refused = door.content_type_refusal(request.content_type)
        if refused is not None:
            return refused
        too_large = self.body_too_large(door)
        if request.content_length is not None and request.content_length > too_large.limit:
            return too_large.refusal
        refused = self.capacity.capacity_refusal(now, self.pending)
        if refused is not None:
            return refused if request.resume is None else _moving(refused)
        address = client_address(request.peer, request.forwarded_for, self.trusted)
        subject = caller.subject
        key = client_key(address, subject)
        refused = self._quotas(key, now)
        if refused is not None:
            return refused
        self.pending += 1
        region = request.region if from_trusted_proxy(request.peer, self.trusted) else None
        metadata = {"user_agent": request.user_agent[:MAX_USER_AGENT]}
        if subject is not None:
            metadata["subject"] = subject
        return Admit(address, key, region, metadata, now, request.resume, caller)

    def body_too_large(self, door: Door) -> BodyLimit:
        """The largest body ``door`` takes, and its 413."""
        if door.max_body_bytes is None or door.max_body_bytes == self.max_sdp_bytes:
            return BodyLimit(self.max_sdp_bytes, self.too_large)
        return BodyLimit(door.max_body_bytes, too_large(door.max_body_bytes))

    def _quotas(self, key: str, now: float) -> Refuse | None:
        """Steps 6 and 7: the client's rate, then its sessions (a slot reserved if it passes)."""
        if self.rate is not None:
            wait_s = self.rate.take(key, now)
            if wait_s:
                text = "too many new sessions from this client"
                return Refuse("client_rate", text, 429, retry_after_s(wait_s), CLIENT)
        per_client = self.per_client
        if per_client is not None and not per_client.reserve(key, self.capacity.sessions):
            text = f"this client already has {per_client.cap} sessions"
            return Refuse("client_sessions", text, 429, RETRY_AFTER_S, CLIENT)
        return None

    def offer(self, body: bytes) -> str | Refuse:
        """Step 8: the offer to answer (its candidates removed), or why it is refused."""
        return read_offer(body)

    def resume(self, admit: Admit, unix_now: float) -> Claim | Refuse | None:
        """Step 9: where to claim the call that moves here (None: it is a new call)."""
        if admit.resume is None:
            return None
        route = self.router.route_resume(admit.resume, unix_now, self.migrate_deadline_s)
        return resume_refused(route.reason) if isinstance(route, Refuse) else route

    def registered(self) -> None:
        """An admitted offer's session entered the server's table: it counts there from now on,
        so its pending place is given back at once (counted in both, a concurrent offer would
        be refused for a place nobody holds)."""
        self.pending -= 1

    def settle(self, admit: Admit, session_id: str | None, *, registered: bool = False) -> None:
        """The admitted offer became session ``session_id``, or (None) gave its place back;
        ``registered``: its place was already given back by ``registered``."""
        if not registered:
            self.pending -= 1
        if self.per_client is not None:
            self.per_client.settle(admit.key, session_id)


def _moving(refused: Refuse) -> Refuse:
    """A capacity refusal of a call that is moving: try another pod now (see the module)."""
    return replace(refused, retry_after_s=0 if refused.reason == "draining" else 1)
