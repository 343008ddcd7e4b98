"""Who may call a door: anyone (nothing configured), the static token, a signed one, or an API key.

The WHIP door takes the static token and signed WHIP tokens; the Realtime door
(``transceiver.signaling.realtime_calls``) takes Realtime client secrets (signed tokens of their
own audience, carrying the app's session) and the operator's API keys.

Sans-I/O: the Authorization header and the time in, the ``Caller`` (the token's subject, the
session it carries, whether it is an operator's key) or a 401 refusal out. The refusal's
reason (missing, wrong_token, or the signed token's own: ``transceiver.signaling.tokens``) is
for our log only; what the caller reads says no more than "missing or invalid" (or that its
token expired, so that it fetches a new one).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from common.verdict import Refuse
from transceiver.signaling.tokens import TokenError, TokenVerifier

TOKEN = "token"  # the kind of a refusal by the gate (common.verdict.Refuse)
UNAUTHORIZED = "missing or invalid bearer token"


def unauthorized(reason: str, text: str = UNAUTHORIZED) -> Refuse:
    """401: ``reason`` is logged (debug), ``text`` answered."""
    return Refuse(reason, text, 401, kind=TOKEN)


MISSING = unauthorized("missing")
WRONG_TOKEN = unauthorized("wrong_token")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a bearer showed the gate to be."""

    subject: str | None = None  # a signed token's ``sub``: passed to the backend, quotas count it
    session: dict[str, Any] | None = None  # a Realtime client secret's: its app's session
    operator: bool = False  # an operator's API key: trusted as the app servers are


ANYONE = Caller()  # an open gate's caller, and the static token's
OPERATOR = Caller(operator=True)


class Gate:
    """Who may call: anyone (nothing configured), the static token, a signed token, or one of
    the operator's API keys."""

    def __init__(
        self,
        static_token: str | None,
        verifier: TokenVerifier | None,
        api_keys: tuple[bytes, ...] = (),
    ) -> None:
        self._static = static_token.encode() if static_token else None
        self._verifier = verifier
        self._api_keys = api_keys

    @property
    def open(self) -> bool:
        return self._static is None and self._verifier is None and not self._api_keys

    def check(self, header: str, now: float, ending: bool = False) -> str | Refuse | None:
        """The token's subject (None when it names nobody), or why the caller may not call."""
        caller = self.caller(header, now, ending)
        return caller if isinstance(caller, Refuse) else caller.subject

    def caller(self, header: str, now: float, ending: bool = False) -> Caller | Refuse:
        """Who the bearer is, or why the caller may not call. ``ending``: the request ends a
        session, which an expired signed token still may.

        ``header`` is the Authorization header as aiohttp decoded it: bytes that are not UTF-8
        arrive as surrogate escapes, so they are compared as the bytes they were.
        """
        if self.open:
            return ANYONE
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return MISSING
        raw = token.encode("utf-8", "surrogateescape")
        if self._static is not None and hmac.compare_digest(raw, self._static):
            return ANYONE
        if any(hmac.compare_digest(raw, key) for key in self._api_keys):
            return OPERATOR
        if self._verifier is None:
            return WRONG_TOKEN
        try:
            claims = self._verifier.verify(token, now, allow_expired=ending)
        except TokenError as exc:
            if exc.reason == "expired":
                return unauthorized(exc.reason, "token expired")
            return unauthorized(exc.reason)
        return Caller(claims.subject, claims.session)
