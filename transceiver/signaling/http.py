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

``/metrics`` is served by ``make_metrics_app`` on its own listener (``--metrics``): the WHIP port
is public through the ingress, and metrics are for the cluster only.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from transceiver.backend import BackendError
from transceiver.call.session import Session
from transceiver.headroom import Refusal
from transceiver.migration import ClaimRefused
from transceiver.ownership import (
    CLAIM_PATH,
    FORWARDED_HEADER,
    RESUME_HEADER,
    Local,
    Refused,
)
from transceiver.server import SessionLimitError, TransceiverServer
from transceiver.signaling.clients import client_address, client_key, from_trusted_proxy
from transceiver.signaling.forward import PeerForwarder
from transceiver.signaling.offer import OfferError, check_offer
from transceiver.signaling.quota import RateLimiter, SessionsPerClient, retry_after
from transceiver.signaling.tokens import TokenError, TokenVerifier

log = logging.getLogger("rtcedge.transceiver")

STATIC_DIR = Path(__file__).parents[1] / "static"  # transceiver/static: the demo page
RETRY_AFTER_S = "5"
PEER_RETRY_AFTER_S = "1"
PATCH_REASON = (
    "PATCH is not supported: trickled candidates are not used (clients are reached through "
    "the relay) and an ICE restart needs a new session (POST a new offer)"
)
UNAUTHORIZED = "missing or invalid bearer token"
# A resume offer refused, by why (transceiver.migration.FAILURE_REASONS): status and reason.
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
# A session request refused with 503 + Retry-After (trying again may work), by reason; any
# other refusal is 404.
RETRY_REFUSALS = ("busy", "owner_busy", "client_busy", "owner_failing", "owner_failed")
# What the owner's claim endpoint answers, by ClaimRefused reason (anything else: 400).
CLAIM_ANSWERS = {"no_session": 404, "replayed": 409, "expired": 410}


class Unauthorized(Exception):
    """A request without a token we accept; ``reason`` is logged (debug), ``text`` answered."""

    def __init__(self, reason: str, text: str = UNAUTHORIZED) -> None:
        super().__init__(reason)
        self.reason = reason
        self.text = text


@dataclass(frozen=True)
class Created:
    """What a 201 needs of a new session."""

    id: str  # the call id (Session.id)
    resource: str  # the signed id of its WHIP URL (Session.resource_id)
    ufrag: str
    answer_sdp: str


class Gate:
    """Who may call: anyone (no token configured), the static token, or a signed token."""

    def __init__(self, static_token: str | None, verifier: TokenVerifier | None) -> None:
        self._static = static_token.encode() if static_token else None
        self._verifier = verifier

    @property
    def open(self) -> bool:
        return self._static is None and self._verifier is None

    def check(self, header: str, now: float, ending: bool = False) -> str | None:
        """The token's subject (None when it names nobody), or Unauthorized.

        ``header`` is the Authorization header as aiohttp decoded it: bytes that are not UTF-8
        arrive as surrogate escapes, so they are compared as the bytes they were.
        """
        if self.open:
            return None
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("missing")
        raw = token.encode("utf-8", "surrogateescape")
        if self._static is not None and hmac.compare_digest(raw, self._static):
            return None
        if self._verifier is None:
            raise Unauthorized("wrong_token")
        try:
            claims = self._verifier.verify(token, now, allow_expired=ending)
        except TokenError as exc:
            if exc.reason == "expired":
                raise Unauthorized(exc.reason, "token expired") from None
            raise Unauthorized(exc.reason) from None
        return claims.subject


def make_app(server: TransceiverServer) -> web.Application:
    cfg = server.config
    app = web.Application(client_max_size=cfg.max_sdp_bytes, middlewares=[_cors(cfg.cors_origin)])
    verifier = TokenVerifier(cfg.token_secrets, cfg.token_max_ttl_s) if cfg.token_secrets else None
    gate = Gate(cfg.auth_token, verifier)
    trusted = cfg.trusted_proxy_networks()
    limiter = (
        RateLimiter(cfg.client_rate_per_s, cfg.client_burst) if cfg.client_rate_per_s else None
    )
    per_client = SessionsPerClient(cfg.client_max_sessions) if cfg.client_max_sessions else None
    forwarder = PeerForwarder(
        cfg.transceiver_id, cfg.peer_timeout_s, cfg.peer_limits(), cfg.peer_connect_timeout_s
    )
    app.on_cleanup.append(forwarder.close)

    def count(method: str, status: int) -> None:
        server.metrics.whip_requests.labels(method, str(status)).inc()

    def fail(method: str, status: int, reason: str, **headers: str) -> web.Response:
        count(method, status)
        return web.Response(status=status, text=reason + "\n", headers=headers)

    def refuse(refusal: Refusal, resume: bool = False) -> web.Response:
        """503 + Retry-After: no capacity now (``TransceiverServer.capacity_refusal``). A call
        that is moving has seconds to do it: another pod may take it at once (0 from a draining
        one, which the Service is dropping) or soon (1)."""
        server.metrics.refusals.labels(refusal.reason).inc()
        retry_s = refusal.retry_after_s
        if resume:
            retry_s = 0 if refusal.reason == "draining" else 1
        return fail("POST", 503, refusal.text, **{"Retry-After": str(retry_s)})

    def resume_refused(reason: str) -> web.Response:
        """A resume offer refused: counted by reason (the token itself never logged)."""
        server.metrics.migrations_failed.labels(reason).inc()
        log.info("resume offer refused: %s", reason)
        status, text = RESUME_REFUSALS.get(reason, INVALID_TOKEN)
        headers = {"Retry-After": PEER_RETRY_AFTER_S} if status == 503 else {}
        return fail("POST", status, text, **headers)

    too_large = f"offer larger than {cfg.max_sdp_bytes} bytes"

    def bad_offer(exc: OfferError) -> web.Response:
        """An offer refused before it is parsed or while it is checked: counted by reason."""
        server.metrics.offers_refused.labels(exc.label).inc()
        return fail("POST", exc.status, exc.reason)

    def unauthorized(method: str, exc: Unauthorized) -> web.Response:
        log.debug("%s refused (401): %s", method, exc.reason)
        return fail(method, 401, exc.text, **{"WWW-Authenticate": "Bearer"})

    async def post_whip(request: web.Request) -> web.Response:
        now = time.monotonic()
        try:
            subject = gate.check(request.headers.get("Authorization", ""), time.time())
        except Unauthorized as exc:
            return unauthorized("POST", exc)
        if request.content_type != "application/sdp":
            return fail(
                "POST", 415, f"Content-Type must be application/sdp, not {request.content_type}"
            )
        if request.content_length is not None and request.content_length > cfg.max_sdp_bytes:
            return bad_offer(OfferError(413, too_large, "too_large"))
        resume = request.headers.get(RESUME_HEADER)
        refusal = server.capacity_refusal()
        if refusal is not None:
            return refuse(refusal, resume is not None)
        address = client_address(
            request.remote, request.headers.get(cfg.client_address_header), trusted
        )
        key = client_key(address, subject)
        if limiter is not None:
            wait_s = limiter.take(key, now)
            if wait_s:
                return fail(
                    "POST",
                    429,
                    "too many new sessions from this client",
                    **{"Retry-After": retry_after(wait_s)},
                )
        if per_client is not None and not per_client.reserve(key, server.sessions):
            return fail(
                "POST",
                429,
                f"this client already has {cfg.client_max_sessions} sessions",
                **{"Retry-After": RETRY_AFTER_S},
            )
        session: Created | web.Response | None = None
        try:
            session = await create(request, address, subject, now, resume)
        finally:
            if per_client is not None:
                per_client.settle(key, session.id if isinstance(session, Created) else None)
        if not isinstance(session, Created):
            assert session is not None
            return session
        count("POST", 201)
        return web.Response(
            status=201,
            text=session.answer_sdp,
            content_type="application/sdp",
            headers={"Location": f"/whip/{session.resource}", "ETag": f'"{session.ufrag}"'},
        )

    async def create(
        request: web.Request,
        address: str | None,
        subject: str | None,
        received_at: float,
        resume: str | None,
    ) -> Created | web.Response:
        """Read and check the offer, make the session: its answer, or the error response.
        ``received_at``: when the POST arrived (time.monotonic()). ``resume``: the offer's
        resume token, claimed from its owner only once the offer is known good."""
        try:
            raw = await asyncio.wait_for(request.read(), cfg.body_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            return bad_offer(OfferError(413, too_large, "too_large"))
        except TimeoutError:
            return fail("POST", 408, "offer not received in time")
        try:
            offer = check_offer(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return bad_offer(OfferError(400, "malformed SDP: not UTF-8", "not_utf8"))
        except OfferError as exc:
            return bad_offer(exc)
        metadata = {"user_agent": request.headers.get("User-Agent", "")[:200]}
        if subject is not None:
            metadata["subject"] = subject
        region = None
        if cfg.region_header and from_trusted_proxy(request.remote, trusted):
            region = request.headers.get(cfg.region_header)
        resume_of = None
        if resume is not None:
            route = server.router.route_resume(resume, time.time(), cfg.migrate_deadline_s)
            if isinstance(route, Refused):
                return resume_refused(route.reason)
            claimed = await forwarder.claim(route, resume)
            if isinstance(claimed, str):
                return resume_refused(claimed)
            resume_of, metadata = claimed  # the call's own metadata, as its backend had it
        try:
            session = await server.create_session(
                offer, address or "", metadata, region, offer_at=received_at, resume_of=resume_of
            )
        except SessionLimitError as exc:
            return refuse(exc.refusal, resume is not None)
        except BackendError as exc:
            # The detail (it may name the backend's URL and a secret in it) stays in our log.
            server.metrics.backend_errors.inc()
            log.warning("offer refused, backend unavailable: %s", exc)
            return fail("POST", 503, "backend unavailable", **{"Retry-After": RETRY_AFTER_S})
        except ValueError as exc:  # e.g. the offer did not BUNDLE as it claimed
            return fail("POST", 400, f"offer rejected: {exc}")
        return Created(session.id, session.resource_id, session.ufrag, session.answer_sdp)

    def refused(method: str, reason: str) -> web.Response:
        """A session request nobody here answers: 404, or 503 + Retry-After when trying again
        may work (busy, owner_failed); counted by reason (``transceiver.ownership``)."""
        server.metrics.session_requests_refused.labels(reason).inc()
        log.debug("%s of a session refused: %s", method, reason)
        if reason in RETRY_REFUSALS:
            text = "the session's transceiver is busy or failed, try again"
            return fail(method, 503, text, **{"Retry-After": PEER_RETRY_AFTER_S})
        return fail(method, 404, "no such session")

    async def owned(request: web.Request, subject: str | None = None) -> Session | web.Response:
        """The session a DELETE/PATCH names if this transceiver owns it; else the owner's
        answer (``transceiver.signaling.forward``: its budgets count the client by address and
        ``subject``, as the quotas do) or a refusal."""
        method, resource_id = request.method, request.match_info["session_id"]
        route = server.router.route(resource_id, time.time(), FORWARDED_HEADER in request.headers)
        if isinstance(route, Local):
            session = server.sessions.get(route.call_id)
            return session if session is not None else refused(method, "no_session")
        if isinstance(route, Refused):
            return refused(method, route.reason)
        body = None
        if request.body_exists:  # a PATCH's (the owner answers it): bounded in size and time
            try:
                body = await asyncio.wait_for(request.read(), cfg.body_timeout_s)
            except web.HTTPRequestEntityTooLarge:
                return fail(method, 413, f"body larger than {cfg.max_sdp_bytes} bytes")
            except TimeoutError:
                return fail(method, 408, "body not received in time")
        address = client_address(
            request.remote, request.headers.get(cfg.client_address_header), trusted
        )
        client = client_key(address, subject)
        answer = await forwarder.forward(request, route, resource_id, body, client)
        if isinstance(answer, str):
            return refused(method, answer)
        server.metrics.session_requests_forwarded.labels(method).inc()
        return answer

    async def delete_whip(request: web.Request) -> web.Response:
        try:
            subject = gate.check(request.headers.get("Authorization", ""), time.time(), ending=True)
        except Unauthorized as exc:
            return unauthorized("DELETE", exc)
        session = await owned(request, subject)
        if not isinstance(session, Session):
            return session
        # Answered once the end has started: the teardown goes on in its task, each step
        # bounded (``Session._teardown``). Waiting for it held the caller, and a forwarding
        # peer's slot, as long as the slowest teardown (10 s with a dead RTCP task).
        session.end("deleted")
        count("DELETE", 200)
        return web.Response(status=200, text="session ended\n")

    async def patch_whip(request: web.Request) -> web.Response:
        session = await owned(request)
        if not isinstance(session, Session):
            return session
        return fail("PATCH", 405, PATCH_REASON, Allow="DELETE, OPTIONS")

    async def claim(request: web.Request) -> web.Response:
        """The owner's side of a move: a peer claims a resume token
        (``transceiver.signaling.forward``). Only requests marked as forwarded are answered (a
        client never calls this); the token is the capability, answered once: 200 + the call id
        and metadata as JSON."""
        token = request.headers.get(RESUME_HEADER)
        if FORWARDED_HEADER not in request.headers or token is None:
            return web.Response(status=404, text="not found\n")
        try:
            call_id, metadata = server.claim_migration(token)
        except ClaimRefused as exc:
            log.info("resume claim refused: %s", exc.reason)
            status = CLAIM_ANSWERS.get(exc.reason, 400)
            return web.Response(status=status, text=f"{exc.reason}\n")
        return web.json_response({"call_id": call_id, "metadata": metadata})

    async def options(request: web.Request) -> web.Response:
        return web.Response(status=204, headers={"Accept-Post": "application/sdp"})

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    app.router.add_post("/whip", post_whip)
    app.router.add_route("OPTIONS", "/whip", options)
    app.router.add_delete("/whip/{session_id}", delete_whip)
    app.router.add_patch("/whip/{session_id}", patch_whip)
    app.router.add_route("OPTIONS", "/whip/{session_id}", options)
    app.router.add_post(CLAIM_PATH, claim)
    _add_health(app, server)
    app.router.add_get("/", index)
    if STATIC_DIR.is_dir():
        app.router.add_static("/static/", STATIC_DIR)
    return app


def make_metrics_app(server: TransceiverServer) -> web.Application:
    """``/metrics`` (and health, for probes that use this port) for the cluster's eyes only."""

    async def metrics(request: web.Request) -> web.Response:
        server.metrics.flush()
        body = generate_latest(server.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    _add_health(app, server)
    return app


def _add_health(app: web.Application, server: TransceiverServer) -> None:
    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        # Ready follows admission: not ready while draining or while a new session would be
        # refused (the session limit, or no headroom by load), so that the signaling Service
        # sends new calls elsewhere. Live calls are untouched: their media goes by the
        # headless Service's per-pod name, which keeps not-ready pods (docs/deploy.md).
        refusal = server.capacity_refusal()
        if refusal is not None:
            return web.Response(status=503, text=f"{refusal.text}\n")
        return web.Response(text=f"ready, {len(server.sessions)} sessions\n")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


def _cors(origin: str):  # type: ignore[no-untyped-def]
    @web.middleware
    async def middleware(request: web.Request, handler):  # type: ignore[no-untyped-def]
        response = await handler(request)
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Methods"] = "POST, DELETE, PATCH, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = (
            f"Authorization, Content-Type, If-Match, {RESUME_HEADER}"
        )
        response.headers["Access-Control-Expose-Headers"] = "Location, ETag, Retry-After"
        return response

    return middleware
