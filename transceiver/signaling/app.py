"""The transceiver's HTTP apps, composed from its configuration: signaling (WHIP, and the
Realtime API's endpoints with ``--backend realtime``), health, readiness and the demo pages on
--http; ``/metrics`` on its own listener (--metrics: the WHIP port is public through the
ingress, and metrics are for the cluster only)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from transceiver.backends.realtime.policy import ClientEventPolicy
from transceiver.config import BACKENDS, TransceiverConfig
from transceiver.ownership import RESUME_HEADER
from transceiver.server import TransceiverServer
from transceiver.signaling.admission import OfferAdmission
from transceiver.signaling.forward import PeerForwarder
from transceiver.signaling.gate import Gate
from transceiver.signaling.http import STATIC_DIR, WhipHandlers, WhipServer
from transceiver.signaling.quota import RateLimiter, SessionsPerClient
from transceiver.signaling.realtime_calls import RealtimeCalls
from transceiver.signaling.realtime_http import RealtimeHandlers
from transceiver.signaling.realtime_secrets import MAX_KEY_CHARS
from transceiver.signaling.tokens import REALTIME_AUDIENCE, TokenVerifier


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


def page_info(cfg: TransceiverConfig) -> dict[str, str]:
    """What the demo page tells its reader about this server (``GET /page.json``): the kind of
    backend that answers (a built-in's name, or ``plugin``), and the echo's audio format. Never
    its URL, which may hold a credential, nor a plugin's module."""
    kind = cfg.backend if cfg.backend in BACKENDS else "plugin"
    info = {"backend": kind}
    if kind == "echo":
        info["audio_format"] = cfg.audio_format
    return info


def make_app(server: TransceiverServer) -> web.Application:
    """The signaling app of ``server``: the handlers over the offer's admission, composed from
    its configuration; health, readiness and the demo page beside them."""
    cfg = server.config
    realtime = _realtime_calls(cfg) if cfg.backend == "realtime" else None
    largest = cfg.max_sdp_bytes if realtime is None else realtime.max_body_bytes
    app = web.Application(client_max_size=largest, middlewares=[_cors(cfg.cors_origin)])
    verifier = TokenVerifier(cfg.token_secrets, cfg.token_max_ttl_s) if cfg.token_secrets else None
    gate = Gate(cfg.auth_token, verifier)
    rate = RateLimiter(cfg.client_rate_per_s, cfg.client_burst) if cfg.client_rate_per_s else None
    per_client = SessionsPerClient(cfg.client_max_sessions) if cfg.client_max_sessions else None
    admission = OfferAdmission(
        gate,
        server,
        server.router,
        max_sdp_bytes=cfg.max_sdp_bytes,
        migrate_deadline_s=cfg.migrate_deadline_s,
        trusted=cfg.trusted_proxy_networks(),
        rate=rate,
        per_client=per_client,
    )
    forwarder = PeerForwarder(
        cfg.transceiver_id, cfg.peer_timeout_s, cfg.peer_limits(), cfg.peer_connect_timeout_s
    )
    app.on_cleanup.append(forwarder.close)
    metrics = server.metrics.for_signaling()
    whip = WhipHandlers(cfg, server, gate, admission, server.router, forwarder, metrics)
    whip.add_routes(app)
    if realtime is not None:
        signing = cfg.token_secrets[0] if cfg.token_secrets else None
        operators = Gate(None, None, cfg.realtime_keys)
        secrets_answered = server.metrics.realtime_client_secrets
        RealtimeHandlers(
            whip, realtime, operators, signing, cfg.token_max_ttl_s, secrets_answered
        ).add_routes(app)
    _add_health(app, server)
    app.router.add_get("/", index)
    about = page_info(cfg)

    async def page_json(request: web.Request) -> web.Response:
        return web.json_response(about)

    app.router.add_get("/page.json", page_json)
    if STATIC_DIR.is_dir():
        app.router.add_static("/static/", STATIC_DIR)
    return app


def _realtime_calls(cfg: TransceiverConfig) -> RealtimeCalls:
    """The door of /v1/realtime/calls: client secrets (signed tokens of the Realtime audience,
    up to their size with a session in them), the operator's API keys, and the static
    --auth-token if one is set."""
    verifier = None
    if cfg.token_secrets:
        verifier = TokenVerifier(
            cfg.token_secrets, cfg.token_max_ttl_s, REALTIME_AUDIENCE, MAX_KEY_CHARS
        )
    policy = cfg.realtime_policy or ClientEventPolicy()
    gate = Gate(cfg.auth_token, verifier, cfg.realtime_keys)  # --auth-token guards it too
    return RealtimeCalls(gate, policy, cfg.max_sdp_bytes)


def make_metrics_app(server: TransceiverServer) -> web.Application:
    """``/metrics`` (and health, for probes that use this port) for the cluster's eyes only."""
    registered = server.metrics

    async def metrics(request: web.Request) -> web.Response:
        registered.flush()
        body = generate_latest(registered.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    _add_health(app, server)
    return app


def _add_health(app: web.Application, server: WhipServer) -> None:
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
