"""WHIP signaling (RFC 9725), health, readiness, metrics and the demo page, over aiohttp.

- ``POST /whip`` (application/sdp) -> 201 Created, the SDP answer, ``Location`` and ``ETag``.
- ``DELETE /whip/{id}`` ends the session; ``PATCH`` is answered 405 with the reason (no trickle,
  no ICE restart: clients are reached through the relay and a restart means a new session).
- ``OPTIONS`` and CORS headers, so a page from another origin can call it; optional bearer token.
- Errors are plain-text reasons with a precise status: 400 bad offer, 401 token, 404 session,
  413 too large, 415 content type, 503 + Retry-After at capacity or while draining.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from transceiver.backend import BackendError
from transceiver.offer import OfferError, check_offer
from transceiver.server import SessionLimitError, TransceiverServer

log = logging.getLogger("rtcedge.transceiver")

STATIC_DIR = Path(__file__).parent / "static"
RETRY_AFTER_S = "5"
PATCH_REASON = (
    "PATCH is not supported: trickled candidates are not used (clients are reached through "
    "the relay) and an ICE restart needs a new session (POST a new offer)"
)


def make_app(server: TransceiverServer) -> web.Application:
    cfg = server.config
    app = web.Application(client_max_size=cfg.max_sdp_bytes, middlewares=[_cors(cfg.cors_origin)])

    def count(method: str, status: int) -> None:
        server.metrics.whip_requests.labels(method, str(status)).inc()

    def fail(method: str, status: int, reason: str, **headers: str) -> web.Response:
        count(method, status)
        return web.Response(status=status, text=reason + "\n", headers=headers)

    def authorized(request: web.Request) -> bool:
        if not cfg.auth_token:
            return True
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {cfg.auth_token}".encode())

    async def post_whip(request: web.Request) -> web.Response:
        if not authorized(request):
            return fail(
                "POST", 401, "missing or wrong bearer token", **{"WWW-Authenticate": "Bearer"}
            )
        if request.content_type != "application/sdp":
            return fail(
                "POST", 415, f"Content-Type must be application/sdp, not {request.content_type}"
            )
        if request.content_length is not None and request.content_length > cfg.max_sdp_bytes:
            return fail("POST", 413, f"offer larger than {cfg.max_sdp_bytes} bytes")
        if server.draining:
            return fail("POST", 503, "draining: no new sessions", **{"Retry-After": RETRY_AFTER_S})
        if len(server.sessions) >= cfg.max_sessions:
            return fail("POST", 503, "session limit reached", **{"Retry-After": RETRY_AFTER_S})
        try:
            raw = await asyncio.wait_for(request.read(), cfg.body_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            return fail("POST", 413, f"offer larger than {cfg.max_sdp_bytes} bytes")
        except TimeoutError:
            return fail("POST", 408, "offer not received in time")
        try:
            offer = check_offer(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return fail("POST", 400, "malformed SDP: not UTF-8")
        except OfferError as exc:
            return fail("POST", exc.status, exc.reason)
        remote = request.remote or ""
        metadata = {"user_agent": request.headers.get("User-Agent", "")[:200]}
        try:
            session = await server.create_session(offer, remote, metadata)
        except SessionLimitError as exc:
            return fail("POST", 503, str(exc), **{"Retry-After": RETRY_AFTER_S})
        except BackendError as exc:
            server.metrics.backend_errors.inc()
            return fail(
                "POST", 503, f"backend unavailable: {exc}", **{"Retry-After": RETRY_AFTER_S}
            )
        except ValueError as exc:  # e.g. the offer did not BUNDLE as it claimed
            return fail("POST", 400, f"offer rejected: {exc}")
        count("POST", 201)
        return web.Response(
            status=201,
            text=session.answer_sdp,
            content_type="application/sdp",
            headers={"Location": f"/whip/{session.id}", "ETag": f'"{session.ufrag}"'},
        )

    async def delete_whip(request: web.Request) -> web.Response:
        if not authorized(request):
            return fail(
                "DELETE", 401, "missing or wrong bearer token", **{"WWW-Authenticate": "Bearer"}
            )
        session = server.sessions.get(request.match_info["session_id"])
        if session is None:
            return fail("DELETE", 404, "no such session")
        session.end("deleted")
        await session.closed.wait()
        count("DELETE", 200)
        return web.Response(status=200, text="session ended\n")

    async def patch_whip(request: web.Request) -> web.Response:
        if request.match_info["session_id"] not in server.sessions:
            return fail("PATCH", 404, "no such session")
        return fail("PATCH", 405, PATCH_REASON, Allow="DELETE, OPTIONS")

    async def options(request: web.Request) -> web.Response:
        return web.Response(status=204, headers={"Accept-Post": "application/sdp"})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        if server.draining:
            return web.Response(status=503, text="draining\n")
        return web.Response(text=f"ready, {len(server.sessions)} sessions\n")

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(server.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    app.router.add_post("/whip", post_whip)
    app.router.add_route("OPTIONS", "/whip", options)
    app.router.add_delete("/whip/{session_id}", delete_whip)
    app.router.add_patch("/whip/{session_id}", patch_whip)
    app.router.add_route("OPTIONS", "/whip/{session_id}", options)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/", index)
    if STATIC_DIR.is_dir():
        app.router.add_static("/static/", STATIC_DIR)
    return app


def _cors(origin: str):  # type: ignore[no-untyped-def]
    @web.middleware
    async def middleware(request: web.Request, handler):  # type: ignore[no-untyped-def]
        response = await handler(request)
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Methods"] = "POST, DELETE, PATCH, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type, If-Match"
        response.headers["Access-Control-Expose-Headers"] = "Location, ETag, Retry-After"
        return response

    return middleware
