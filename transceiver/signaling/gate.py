"""Who may call the WHIP endpoint: anyone (no token configured), the static token, or a signed one.

Sans-I/O: the Authorization header and the time in, the token's subject (None when it names
nobody) or a 401 refusal out. The refusal's reason (missing, wrong_token, or the signed token's
own: ``transceiver.signaling.tokens``) is for our log only; what the caller reads says no more
than "missing or invalid" (or that its token expired, so that it fetches a new one).
"""

from __future__ import annotations

import hmac

from common.verdict import Refuse
from transceiver.signaling.tokens import TokenError, TokenVerifier

TOKEN = "token"  # the kind of a refusal by the gate (common.verdict.Refuse)
UNAUTHORIZED = "missing or invalid bearer token"


def unauthorized(reason: str, text: str = UNAUTHORIZED) -> Refuse:
    """401: ``reason`` is logged (debug), ``text`` answered."""
    return Refuse(reason, text, 401, kind=TOKEN)


MISSING = unauthorized("missing")
WRONG_TOKEN = unauthorized("wrong_token")


class Gate:
    """Who may call: anyone (no token configured), the static token, or a signed token."""

    def __init__(self, static_token: str | None, verifier: TokenVerifier | None) -> None:
        self._static = static_token.encode() if static_token else None
        self._verifier = verifier

    @property
    def open(self) -> bool:
        return self._static is None and self._verifier is None

    def check(self, header: str, now: float, ending: bool = False) -> str | Refuse | None:
        """The token's subject (None when it names nobody), or why the caller may not call.
        ``ending``: the request ends a session, which an expired signed token still may.

        ``header`` is the Authorization header as aiohttp decoded it: bytes that are not UTF-8
        arrive as surrogate escapes, so they are compared as the bytes they were.
        """
        if self.open:
            return None
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return MISSING
        raw = token.encode("utf-8", "surrogateescape")
        if self._static is not None and hmac.compare_digest(raw, self._static):
            return None
        if self._verifier is None:
            return WRONG_TOKEN
        try:
            claims = self._verifier.verify(token, now, allow_expired=ending)
        except TokenError as exc:
            if exc.reason == "expired":
                return unauthorized(exc.reason, "token expired")
            return unauthorized(exc.reason)
        return claims.subject
