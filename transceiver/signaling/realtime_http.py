"""OpenAI's Realtime WebRTC endpoints, served with ``--backend realtime`` beside WHIP.

- ``POST /v1/realtime/client_secrets`` (an operator API key as the bearer, OpenAI's JSON body)
  -> 200 ``{"value", "expires_at", "session"}``: a short-lived client secret for a browser or app
  (``transceiver.signaling.realtime_secrets``). 401 for another bearer, 400 for a bad body, 503
  when the keys (--realtime-key-file) or the signing secret (--token-secret-file) are missing.
- ``POST /v1/realtime/calls`` (a client secret or an API key as the bearer; SDP, or a form with
  ``sdp`` and ``session``) -> 201, the answer and ``Location: /v1/realtime/calls/{id}``, as WHIP
  answers (``WhipHandlers.answer_offer``: the same capacity, quotas and offer checks; the body
  is read by ``transceiver.signaling.realtime_calls``).
- ``DELETE /v1/realtime/calls/{id}`` and ``POST /v1/realtime/calls/{id}/hangup`` end the call,
  here or at the transceiver that owns it.
- ``GET /realtime``: a page written to OpenAI's documented browser flow.

With neither a signing secret nor API keys configured the calls door is open, as WHIP is without
a token: the local demo. Client secrets are never minted without a key.
"""

from __future__ import annotations

import logging
import time

from aiohttp import web
from prometheus_client import Counter

from common.verdict import Refuse
from transceiver.signaling.admission import Admit
from transceiver.signaling.gate import Gate, unauthorized
from transceiver.signaling.http import STATIC_DIR, WhipHandlers
from transceiver.signaling.realtime_calls import CALLS_PATH, FORM, RealtimeCalls
from transceiver.signaling.realtime_secrets import (
    MAX_BODY_BYTES,
    client_secret_response,
    parse_secret_request,
)

log = logging.getLogger("rtcedge.transceiver")

SECRETS_PATH = "/v1/realtime/client_secrets"
NO_KEYS = "client secrets are not served here: no API keys (--realtime-key-file)"
NO_SIGNING = "client secrets are not served here: no signing secret (--token-secret-file)"
TOO_LARGE = Refuse("too_large", f"the body is over {MAX_BODY_BYTES} bytes", 413)
BODY_TIMEOUT = Refuse("body_timeout", "body not received in time", 408)


class RealtimeHandlers:
    """The Realtime API's endpoints, over the WHIP handlers' offer path (see the module)."""

    def __init__(
        self,
        whip: WhipHandlers,
        calls: RealtimeCalls,
        operators: Gate,
        signing_secret: bytes | None,
        max_ttl_s: float,
        secrets_answered: Counter,  # by status
    ) -> None:
        self.whip = whip
        self.calls = calls
        self.operators = operators  # API keys only: who may mint client secrets
        self.signing_secret = signing_secret
        self.max_ttl_s = max_ttl_s
        self.secrets_answered = secrets_answered

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(CALLS_PATH, self.post_call)
        app.router.add_route("OPTIONS", CALLS_PATH, options)
        app.router.add_delete(f"{CALLS_PATH}/{{session_id}}", self.end_call)
        app.router.add_post(f"{CALLS_PATH}/{{session_id}}/hangup", self.end_call)
        app.router.add_route("OPTIONS", f"{CALLS_PATH}/{{session_id}}", options)
        app.router.add_post(SECRETS_PATH, self.client_secret)
        app.router.add_route("OPTIONS", SECRETS_PATH, options)
        app.router.add_get("/realtime", page)

    async def post_call(self, request: web.Request) -> web.Response:
        return await self.whip.answer_offer(request, self.calls.door, CALLS_PATH, self._read)

    def _read(
        self, admit: Admit, content_type: str, body: bytes
    ) -> tuple[bytes, dict[str, str]] | Refuse:
        return self.calls.read(admit.caller, content_type, body)

    async def end_call(self, request: web.Request) -> web.Response:
        return await self.whip.end(request, self.calls.door.gate)

    async def client_secret(self, request: web.Request) -> web.Response:
        """Mint a client secret for an app server that shows an operator API key."""
        if self.operators.open:
            return self._answer(503, NO_KEYS)
        caller = self.operators.caller(request.headers.get("Authorization", ""), time.time())
        if isinstance(caller, Refuse) or not caller.operator:
            reason = caller.reason if isinstance(caller, Refuse) else "not_an_api_key"
            log.debug("client secret refused (401): %s", reason)
            refused = unauthorized(reason, "missing or invalid API key")
            return self._answer(401, refused.text, {"WWW-Authenticate": "Bearer"})
        if self.signing_secret is None:
            return self._answer(503, NO_SIGNING)
        body = await self.whip.read_body(request, TOO_LARGE, BODY_TIMEOUT)
        if isinstance(body, Refuse):
            return self._answer(body.status, body.text)
        try:
            secret_request = parse_secret_request(body)
        except ValueError as exc:
            return self._answer(400, str(exc))
        answer = client_secret_response(
            self.signing_secret, time.time(), secret_request, self.max_ttl_s
        )
        self.secrets_answered.labels("200").inc()
        return web.json_response(answer)

    def _answer(
        self, status: int, text: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        self.secrets_answered.labels(str(status)).inc()
        return web.json_response(
            {"error": {"type": "invalid_request_error", "message": text}},
            status=status,
            headers=headers,
        )


async def options(request: web.Request) -> web.Response:
    return web.Response(status=204, headers={"Accept-Post": f"application/sdp, {FORM}"})


async def page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "realtime.html")
