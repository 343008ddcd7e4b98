"""Realtime client secrets: the short-lived keys an app's server gets for its browser or phone.

OpenAI's WebRTC flow, followed here as OpenAI documents it: the app's server, which holds an API
key, POSTs ``/v1/realtime/client_secrets`` (``{"expires_after": {"anchor": "created_at",
"seconds": 600}, "session": {...}}``) and hands the returned ``value`` to its client, which
offers SDP to ``/v1/realtime/calls`` with it as the bearer. Behind rtcedge the API key is one of
the operator's keys (``--realtime-key-file``), and the client secret is one of our signed tokens
(``transceiver.signaling.tokens``, audience ``rtcedge-realtime``) carrying the app's session, so
that any transceiver can verify it with no shared state and apply that session to the call.

Sans-I/O: parse a request body, build a response; minting takes ``now``.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from transceiver.signaling.tokens import REALTIME_AUDIENCE, mint

__all__ = [
    "DEFAULT_TTL_S",
    "MAX_SESSION_BYTES",
    "MAX_TTL_S",
    "MIN_TTL_S",
    "SecretRequest",
    "client_secret_response",
    "parse_secret_request",
    "parse_session",
]

MIN_TTL_S, DEFAULT_TTL_S, MAX_TTL_S = 10, 600, 7200  # OpenAI's range and default for seconds
MAX_SESSION_BYTES = 8 * 1024  # the session rides in the key: a bearer header stays small
MAX_BODY_BYTES = 16 * 1024
MAX_KEY_CHARS = 2048 + (MAX_SESSION_BYTES * 4) // 3 + 64  # a verifier's bound on our keys
# Session fields the transceiver sets itself; an app may not choose them (the audio formats are
# what the media path decodes and encodes, not a preference).
FIXED_SESSION_FIELDS = ("type",)


@dataclass(frozen=True)
class SecretRequest:
    ttl_s: int
    session: dict[str, Any]


def parse_session(value: object, where: str) -> dict[str, Any]:
    """An app's Realtime session: an object of ``type`` realtime, small; ValueError says why."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    kind = value.get("type", "realtime")
    if kind != "realtime":
        raise ValueError(f"{where}.type {kind!r}: only realtime sessions are served here")
    audio = value.get("audio")
    if isinstance(audio, dict) and any(
        isinstance(audio.get(side), dict) and "format" in audio[side] for side in audio
    ):
        raise ValueError(f"{where}.audio formats are the transceiver's (PCM16 at its rate)")
    session = {k: v for k, v in value.items() if k not in FIXED_SESSION_FIELDS}
    if len(json.dumps(session, separators=(",", ":"))) > MAX_SESSION_BYTES:
        raise ValueError(f"{where} is over {MAX_SESSION_BYTES} bytes")
    return session


def parse_secret_request(body: bytes) -> SecretRequest:
    """The body of ``POST /v1/realtime/client_secrets``; ValueError with the reason for a 400."""
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"the body is over {MAX_BODY_BYTES} bytes")
    try:
        raw = json.loads(body or b"{}")
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if not isinstance(raw, dict):
        raise ValueError("the body must be a JSON object")
    unknown = set(raw) - {"expires_after", "session"}
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
    ttl = DEFAULT_TTL_S
    expires = raw.get("expires_after")
    if expires is not None:
        if not isinstance(expires, dict) or expires.get("anchor", "created_at") != "created_at":
            raise ValueError("expires_after must be {anchor: created_at, seconds: N}")
        ttl = expires.get("seconds", DEFAULT_TTL_S)
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not MIN_TTL_S <= ttl <= MAX_TTL_S:
            raise ValueError(f"expires_after.seconds must be {MIN_TTL_S}..{MAX_TTL_S}")
    return SecretRequest(ttl, parse_session(raw.get("session"), "session"))


def client_secret_response(
    signing_secret: bytes, now: float, request: SecretRequest, max_ttl_s: float
) -> dict[str, Any]:
    """The response OpenAI gives (``value``, ``expires_at``, ``session``), with our key."""
    ttl = min(request.ttl_s, int(max_ttl_s))
    value = mint(
        signing_secret, now, ttl, audience=REALTIME_AUDIENCE, session=request.session or None
    )
    session = {
        "id": f"sess_{secrets.token_hex(12)}",
        "object": "realtime.session",
        "type": "realtime",
        **request.session,
    }
    return {"value": value, "expires_at": int(now) + ttl, "session": session}
