"""WHIP signaling (RFC 9725), health, readiness and the demo page, over aiohttp; metrics apart.

- ``POST /whip`` (application/sdp) -> 201 Created, the SDP answer, ``Location`` and ``ETag``.
- ``DELETE /whip/{id}`` ends the session; ``PATCH`` is answered 405 with the reason (no trickle,
  no ICE restart: clients are reached through the relay and a restart means a new session).
  The id is signed and names the owning transceiver (``common.sessionid``): any transceiver
  takes these requests and passes them on to the owner (``transceiver.ownership``, ``.forward``).
- ``POST /whip`` with ``X-Rtcedge-Resume: <token>`` moves a call here from a draining
  transceiver: the token is claimed from its owner (``transceiver.ownership.route_resume``,
  ``.forward``), the session takes the call's id and the backend resumes it. The owner answers
  claims at ``CLAIM_PATH``, for peers only (docs/transceiver.md, "Moving calls on scale-down").
- ``OPTIONS`` and CORS headers, so a page from another origin can call it; optional bearer token
  (a static one, or short-lived signed ones: ``transceiver.signaling.tokens``).
- Errors are plain-text reasons with a precise status: 400 bad offer, 401 token, 404 session,
  413 too large, 415 content type, 429 + Retry-After over a client's quota
  (``transceiver.signaling.quota``), 503 + Retry-After at capacity, while draining or without a
  backend. A reason never carries configuration (the backend's URL may hold a secret): details are
  logged.

The handlers (``WhipHandlers``) are a class over the offer's admission, a numbered decision
(``transceiver.signaling.admission``), and the session router (``transceiver.ownership``); they
use the server only through ``WhipServer``, the few things they need of it.
``transceiver.signaling.app`` composes them from the server's configuration, and serves
``/metrics`` on a listener of its own. The Realtime API's door (``realtime_http``) answers its
offers through ``WhipHandlers.answer_offer``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aiohttp import web

from common.verdict import Refuse
from transceiver.backend import BackendError
from transceiver.call.session import Session
from transceiver.config import TransceiverConfig
from transceiver.headroom import CAPACITY
from transceiver.metrics import SignalingMetrics
from transceiver.ownership import (
    CLAIM_PATH,
    FORWARDED_HEADER,
    RESUME_HEADER,
    Claim,
    Local,
    SessionRouter,
)
from transceiver.signaling.admission import (
    PEER_RETRY_AFTER_S,
    RESUME,
    RETRY_AFTER_S,
    Admit,
    Capacity,
    Door,
    OfferAdmission,
    OfferRequest,
    resume_refused,
)
from transceiver.signaling.clients import client_address, client_key
from transceiver.signaling.forward import PeerForwarder
from transceiver.signaling.gate import TOKEN, Gate
from transceiver.signaling.offer import OFFER

log = logging.getLogger("rtcedge.transceiver")

STATIC_DIR = Path(__file__).parents[1] / "static"  # transceiver/static: the demo page
PATCH_REASON = (
    "PATCH is not supported: trickled candidates are not used (clients are reached through "
    "the relay) and an ICE restart needs a new session (POST a new offer)"
)
SESSION = "session"  # the kind of a refused DELETE/PATCH (common.verdict.Refuse)
# A session request refused with 503 + Retry-After (trying again may work), by reason; any
# other refusal is 404.
RETRY_REFUSALS = ("busy", "owner_busy", "client_busy", "owner_failing", "owner_failed")
# What the owner's claim endpoint answers, by the claim's refusal (anything else: 400).
CLAIM_ANSWERS = {"no_session": 404, "replayed": 409, "expired": 410}
# What a POST is refused for once its offer is read, besides the admission's refusals.
OFFER_TIMEOUT = Refuse("body_timeout", "offer not received in time", 408)
BACKEND_UNAVAILABLE = Refuse("backend", "backend unavailable", 503, RETRY_AFTER_S)
BODY_TIMEOUT = Refuse("body_timeout", "body not received in time", 408)  # a PATCH's body


# A door's body to the offer and what the backend is told besides (or why it is refused), from
# the admitted offer, the whole Content-Type header and the body.
ReadBody = Callable[[Admit, str, bytes], "tuple[bytes, dict[str, str]] | Refuse"]


def session_refused(reason: str) -> Refuse:
    """A DELETE/PATCH nobody here answers (``transceiver.ownership``, ``.forward``): 404, or 503
    + Retry-After when trying again may work (busy, owner_failed)."""
    if reason in RETRY_REFUSALS:
        text = "the session's transceiver is busy or failed, try again"
        return Refuse(reason, text, 503, PEER_RETRY_AFTER_S, SESSION)
    return Refuse(reason, "no such session", 404, kind=SESSION)


class WhipServer(Capacity, Protocol):
    """What the WHIP handlers use of the transceiver, and no more (``TransceiverServer`` is one)."""

    @property
    def sessions(self) -> Mapping[str, Session]:
        """The live sessions, by call id."""
        ...

    async def create_session(
        self,
        offer_sdp: str,
        remote: str,
        metadata: dict[str, str],
        region_header: str | None = None,
        offer_at: float | None = None,
        resume_of: str | None = None,
        on_registered: Callable[[], None] | None = None,
    ) -> Session | Refuse: ...

    def claim_migration(self, token: str) -> tuple[str, dict[str, str]] | Refuse: ...


@dataclass(frozen=True)
class Created:
    """What a 201 needs of a new session."""

    id: str  # the call id (Session.id)
    resource: str  # the signed id of its WHIP URL (Session.resource_id)
    ufrag: str
    answer_sdp: str


class WhipHandlers:
    """The WHIP endpoint: each handler reads its request, asks the decision it needs (the
    offer's admission, the session router), does the I/O the answer calls for, and answers;
    every answer of its own is counted by method and status, every refusal by kind and reason."""

    def __init__(
        self,
        config: TransceiverConfig,
        server: WhipServer,
        gate: Gate,
        admission: OfferAdmission,
        router: SessionRouter,
        forwarder: PeerForwarder,
        metrics: SignalingMetrics,
    ) -> None:
        self.config = config
        self.server = server
        self.gate = gate
        self.admission = admission
        self.router = router
        self.forwarder = forwarder
        self.metrics = metrics
        self.trusted = config.trusted_proxy_networks()
        # A PATCH's body passed on to its owner: bounded as an offer is, not counted as one.
        self.body_too_large = Refuse(
            "too_large", f"body larger than {config.max_sdp_bytes} bytes", 413
        )
        # The counters of the refusals counted by reason, by their kind.
        self._counted = {
            CAPACITY: metrics.refusals,
            OFFER: metrics.offers_refused,
            RESUME: metrics.migrations_failed,
            SESSION: metrics.session_requests_refused,
        }

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/whip", self.post)
        app.router.add_route("OPTIONS", "/whip", options)
        app.router.add_delete("/whip/{session_id}", self.delete)
        app.router.add_patch("/whip/{session_id}", self.patch)
        app.router.add_route("OPTIONS", "/whip/{session_id}", options)
        app.router.add_post(CLAIM_PATH, self.claim)

    # -- answers ---------------------------------------------------------------------------------
    def _answer(self, method: str, status: int, text: str, **headers: str) -> web.Response:
        self.metrics.whip_requests.labels(method, str(status)).inc()
        return web.Response(status=status, text=text + "\n", headers=headers)

    def _refused(self, method: str, refused: Refuse) -> web.Response:
        """A refusal's answer: its status, text and Retry-After; counted by reason if its kind
        is, and logged as its kind is (a resume token itself never)."""
        counter = self._counted.get(refused.kind)
        if counter is not None:
            counter.labels(refused.reason).inc()
        headers = {}
        if refused.retry_after_s is not None:
            headers["Retry-After"] = str(refused.retry_after_s)
        if refused.kind == TOKEN:
            log.debug("%s refused (401): %s", method, refused.reason)
            headers["WWW-Authenticate"] = "Bearer"
        elif refused.kind == RESUME:
            log.info("resume offer refused: %s", refused.reason)
        elif refused.kind == SESSION:
            log.debug("%s of a session refused: %s", method, refused.reason)
        return self._answer(method, refused.status, refused.text, **headers)

    # -- POST /whip: a new session -----------------------------------------------------------------
    async def post(self, request: web.Request) -> web.Response:
        return await self.answer_offer(request, self.admission.door, "/whip")

    async def answer_offer(
        self,
        request: web.Request,
        door: Door,
        location: str,
        read_body: ReadBody | None = None,
    ) -> web.Response:
        """An offer POSTed at ``door``: 201 with the answer and ``Location: {location}/{id}``, or
        the refusal. ``read_body`` turns a door's body into the offer and metadata for the
        backend (WHIP's body is the offer)."""
        admitted = self.admission.decide(
            self._offer_request(request), time.monotonic(), time.time(), door
        )
        if isinstance(admitted, Refuse):
            return self._refused("POST", admitted)
        created: Created | Refuse | None = None
        placed = [False]  # the session entered the server's table: its place counts there

        def registered() -> None:
            placed[0] = True
            self.admission.registered()

        try:
            body = await self._offer_body(request, admitted, door, read_body)
            if isinstance(body, Refuse):
                created = body
            else:
                created = await self._create(admitted, *body, registered)
        finally:
            session_id = created.id if isinstance(created, Created) else None
            self.admission.settle(admitted, session_id, registered=placed[0])
        if isinstance(created, Refuse):
            return self._refused("POST", created)
        self.metrics.whip_requests.labels("POST", "201").inc()
        return web.Response(
            status=201,
            text=created.answer_sdp,
            content_type="application/sdp",
            headers={
                "Location": f"{location}/{created.resource}",
                "ETag": f'"{created.ufrag}"',
            },
        )

    async def _offer_body(
        self, request: web.Request, admit: Admit, door: Door, read_body: ReadBody | None
    ) -> tuple[bytes, dict[str, str]] | Refuse:
        """The body's offer and the metadata the backend is told, bounded in size and time."""
        too_large = self.admission.body_too_large(door)
        body = await self.read_body(request, too_large.refusal, OFFER_TIMEOUT)
        if isinstance(body, Refuse):
            return body
        if len(body) > too_large.limit:  # the app's read bound is the largest door's
            return too_large.refusal
        if read_body is None:
            return body, admit.metadata
        read = read_body(admit, request.headers.get("Content-Type", ""), body)
        if isinstance(read, Refuse):
            return read
        offer, extra = read
        return offer, {**admit.metadata, **extra}

    def _offer_request(self, request: web.Request) -> OfferRequest:
        """What the admission decides on: the POST's head and who sent it."""
        cfg, headers = self.config, request.headers
        return OfferRequest(
            authorization=headers.get("Authorization", ""),
            content_type=request.content_type,
            content_length=request.content_length,
            peer=request.remote,
            forwarded_for=headers.get(cfg.client_address_header),
            region=headers.get(cfg.region_header) if cfg.region_header else None,
            user_agent=headers.get("User-Agent", ""),
            resume=headers.get(RESUME_HEADER),
        )

    async def _create(
        self, admit: Admit, body: bytes, metadata: dict[str, str], registered: Callable[[], None]
    ) -> Created | Refuse:
        """Check the offer, claim the call it resumes (if it does), make the session: its
        answer, or why not (the admission's steps 8 and 9, then the server's)."""
        offer = self.admission.offer(body)
        if isinstance(offer, Refuse):
            return offer
        moved = await self._claim(admit)
        if isinstance(moved, Refuse):
            return moved
        resume_of, metadata = (None, metadata) if moved is None else moved
        try:
            session = await self.server.create_session(
                offer,
                admit.address or "",
                metadata,
                admit.region,
                offer_at=admit.received_at,
                resume_of=resume_of,
                on_registered=registered,
            )
        except BackendError as exc:
            # The detail (it may name the backend's URL and a secret in it) stays in our log.
            self.metrics.backend_errors.inc()
            log.warning("offer refused, backend unavailable: %s", exc)
            return BACKEND_UNAVAILABLE
        except ValueError as exc:  # e.g. the offer did not BUNDLE as it claimed
            return Refuse("rejected", f"offer rejected: {exc}", 400)
        if isinstance(session, Refuse):
            return session
        return Created(session.id, session.resource_id, session.ufrag, session.answer_sdp)

    async def _claim(self, admit: Admit) -> tuple[str, dict[str, str]] | Refuse | None:
        """The call a resume offer moves here, claimed from its owner only once the offer is
        known good: its id and metadata (as its backend had them); None for a new call."""
        route = self.admission.resume(admit, time.time())
        if not isinstance(route, Claim):
            return route
        assert admit.resume is not None
        claimed = await self.forwarder.claim(route, admit.resume)
        return resume_refused(claimed.reason) if isinstance(claimed, Refuse) else claimed

    async def read_body(
        self, request: web.Request, too_large: Refuse, late: Refuse
    ) -> bytes | Refuse:
        """A request's body, bounded in size (``client_max_size``) and time (--body-timeout)."""
        try:
            return await asyncio.wait_for(request.read(), self.config.body_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            return too_large
        except TimeoutError:
            return late

    # -- DELETE and PATCH /whip/{id}: a session, here or at its owner -----------------------------
    async def delete(self, request: web.Request) -> web.Response:
        return await self.end(request, self.gate)

    async def end(self, request: web.Request, gate: Gate) -> web.Response:
        """End the session the request names, if ``gate`` lets its bearer (an expired token
        still may) and it is here, or pass the request on to its owner."""
        header = request.headers.get("Authorization", "")
        subject = gate.check(header, time.time(), ending=True)
        if isinstance(subject, Refuse):
            return self._refused("DELETE", subject)
        session = await self._owned(request, subject)
        if not isinstance(session, Session):
            return session
        # Answered once the end has started: the teardown goes on in its task, each step
        # bounded (``Session._teardown``). Waiting for it held the caller, and a forwarding
        # peer's slot, as long as the slowest teardown (10 s with a dead RTCP task).
        session.end("deleted")
        return self._answer("DELETE", 200, "session ended")

    async def patch(self, request: web.Request) -> web.Response:
        session = await self._owned(request)
        if not isinstance(session, Session):
            return session
        return self._answer("PATCH", 405, PATCH_REASON, Allow="DELETE, OPTIONS")

    async def _owned(
        self, request: web.Request, subject: str | None = None
    ) -> Session | web.Response:
        """The session a DELETE/PATCH names if this transceiver owns it; else the owner's
        answer (``transceiver.signaling.forward``: its budgets count the client by address and
        ``subject``, as the quotas do) or a refusal."""
        method, resource_id = request.method, request.match_info["session_id"]
        route = self.router.route(resource_id, time.time(), FORWARDED_HEADER in request.headers)
        if isinstance(route, Local):
            session = self.server.sessions.get(route.call_id)
            if session is None:
                return self._refused(method, session_refused("no_session"))
            return session
        if isinstance(route, Refuse):
            return self._refused(method, session_refused(route.reason))
        body = None
        if request.body_exists:  # a PATCH's (the owner answers it): bounded in size and time
            body = await self.read_body(request, self.body_too_large, BODY_TIMEOUT)
            if isinstance(body, Refuse):
                return self._refused(method, body)
        forwarded_for = request.headers.get(self.config.client_address_header)
        client = client_key(client_address(request.remote, forwarded_for, self.trusted), subject)
        answer = await self.forwarder.forward(request, route, resource_id, body, client)
        if isinstance(answer, Refuse):
            return self._refused(method, session_refused(answer.reason))
        self.metrics.session_requests_forwarded.labels(method).inc()
        return answer

    # -- the owner's side of a move ----------------------------------------------------------------
    async def claim(self, request: web.Request) -> web.Response:
        """A peer claims a resume token (``transceiver.signaling.forward``). Only requests
        marked as forwarded are answered (a client never calls this); the token is the
        capability, answered once: 200 + the call id and metadata as JSON."""
        token = request.headers.get(RESUME_HEADER)
        if FORWARDED_HEADER not in request.headers or token is None:
            return web.Response(status=404, text="not found\n")
        claimed = self.server.claim_migration(token)
        if isinstance(claimed, Refuse):
            log.info("resume claim refused: %s", claimed.reason)
            status = CLAIM_ANSWERS.get(claimed.reason, 400)
            return web.Response(status=status, text=f"{claimed.reason}\n")
        call_id, metadata = claimed
        return web.json_response({"call_id": call_id, "metadata": metadata})


async def options(request: web.Request) -> web.Response:
    return web.Response(status=204, headers={"Accept-Post": "application/sdp"})
