"""Short-lived signed WHIP tokens, minted by the app's backend with a secret it shares with us.

The format is a JSON Web Token (RFC 7519) signed with HS256 (HMAC-SHA256, RFC 7518 3.2), so an
app backend in any language mints one with its usual JWT library or twenty lines of code
(docs/transceiver.md, "Signed tokens"). PyJWT verifies, with exactly one algorithm allowed, which
keeps JWT's known traps shut (``alg: none`` and RS256/HS256 confusion are refused); the claims
below are checked against a clock passed in.

    token  = b64url(header) "." b64url(claims) "." b64url(HMAC-SHA256(secret, first two parts))
    header = {"alg": "HS256", "typ": "JWT"}            (typ optional; "crit" refused)
    claims = {"aud": "rtcedge-whip",                    (required: a string, or a list holding it)
              "exp": 1767225600,                        (required: seconds since the epoch)
              "sub": "user-42",                         (optional: who, passed to the backend)
              "iat": 1767225540, "nbf": 1767225540}     (optional)

b64url is base64 with the URL alphabet and no ``=`` padding (RFC 7515 2). The secret is the
UTF-8 bytes of one line of the secret file (at least 32 bytes); several lines form a ring: every
one verifies, the first one signs (``mint``), which is how a secret is rotated.

Sans-I/O: ``now`` is passed in (seconds since the epoch).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from common.config import ConfigError

AUDIENCE = "rtcedge-whip"  # a token the app signs for anything else is refused here
# The audience of a Realtime client secret (transceiver.signaling.realtime_secrets): a WHIP token
# is not one, and one is not a WHIP token.
REALTIME_AUDIENCE = "rtcedge-realtime"
MIN_SECRET_BYTES = 32
MAX_TOKEN_CHARS = 2048  # refused before any work: a bearer header is small
MAX_SUBJECT_CHARS = 256
CLOCK_SKEW_S = 60.0  # nbf and iat may be this far ahead of our clock (another host minted it)
_TOKEN = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_HEADER = {"alg": "HS256", "typ": "JWT"}


class TokenError(Exception):
    """A token was refused; ``reason`` is a short label for our log, never shown to the caller."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Claims:
    subject: str | None
    expires_at: float
    session: dict[str, Any] | None = None  # a Realtime client secret's session (its app's)


def parse_secrets(text: str, option: str = "--token-secret-file") -> tuple[bytes, ...]:
    """The secrets of a secret file or variable: one per line, blank lines and ``#`` ignored."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        secret = line.encode()
        if len(secret) < MIN_SECRET_BYTES:
            raise ConfigError(
                option, f"line {number}: a secret needs at least {MIN_SECRET_BYTES} bytes"
            )
        found.append(secret)
    if not found:
        raise ConfigError(option, "no secret in it")
    return tuple(found)


def read_secrets_file(path: str) -> tuple[bytes, ...]:
    """The secrets of ``--token-secret-file`` (ConfigError names the option)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("--token-secret-file", f"cannot read {path}: {exc.strerror}") from None
    return parse_secrets(text, "--token-secret-file")


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _sign(secret: bytes, signing_input: bytes) -> bytes:
    return hmac.new(secret, signing_input, hashlib.sha256).digest()


def mint(
    secret: bytes,
    now: float,
    ttl_s: float,
    subject: str | None = None,
    audience: str = AUDIENCE,
    session: dict[str, Any] | None = None,
) -> str:
    """A token valid for ``ttl_s`` from ``now``: what an app backend does, in Python."""
    claims: dict[str, Any] = {"aud": audience, "iat": int(now), "exp": int(now + ttl_s)}
    if subject is not None:
        claims["sub"] = subject
    if session is not None:
        claims["session"] = session
    head = _b64encode(json.dumps(_HEADER, separators=(",", ":")).encode())
    body = _b64encode(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{head}.{body}".encode("ascii")
    return f"{head}.{body}.{_b64encode(_sign(secret, signing_input))}"


class TokenVerifier:
    """Checks bearer tokens against a ring of secrets; stateless, so nothing to fill.

    PyJWT does the parsing, the algorithm allowlist (HS256 only), the constant-time signature
    check and the audience; the times are checked here against ``now`` (sans-I/O).
    """

    def __init__(
        self,
        secrets: tuple[bytes, ...],
        max_ttl_s: float,
        audience: str = AUDIENCE,
        max_chars: int = MAX_TOKEN_CHARS,
    ) -> None:
        self.secrets = secrets
        self.max_ttl_s = max_ttl_s
        self.audience = audience
        self.max_chars = max_chars

    def verify(self, token: str, now: float, allow_expired: bool = False) -> Claims:
        """The token's claims, or TokenError.

        ``allow_expired`` is for ending a session (DELETE): a call outlives the token that
        started it, and a token with a good signature was issued by the app all the same.
        """
        if len(token) > self.max_chars or not _TOKEN.fullmatch(token):
            raise TokenError("malformed")
        decoded = self._decode(token)
        header, claims = decoded["header"], decoded["payload"]
        if header.get("typ", "JWT") != "JWT" or "crit" in header:
            raise TokenError("bad_header")
        expires_at = _number(claims, "exp")
        if expires_at is None:
            raise TokenError("bad_claims")
        if not allow_expired:
            self._check_times(claims, expires_at, now)
        subject = claims.get("sub")
        if subject is not None and (
            not isinstance(subject, str) or len(subject) > MAX_SUBJECT_CHARS
        ):
            raise TokenError("bad_claims")
        session = claims.get("session")
        if session is not None and not isinstance(session, dict):
            raise TokenError("bad_claims")
        return Claims(subject, expires_at, session)

    def _check_times(self, claims: dict[str, Any], expires_at: float, now: float) -> None:
        """A token in force now: not expired, not living too long, not issued in the future."""
        if now >= expires_at:
            raise TokenError("expired")
        if expires_at - now > self.max_ttl_s:
            raise TokenError("lives_too_long")
        for name in ("nbf", "iat"):
            at = _number(claims, name)
            if at is not None and at > now + CLOCK_SKEW_S:
                raise TokenError("not_yet_valid")

    def _decode(self, token: str) -> dict[str, Any]:
        """Signature (every secret of the ring in turn) and audience, by PyJWT."""
        options = {
            "require": ["aud"],
            "verify_exp": False,  # our clock: verify() checks the times against ``now``
            "verify_nbf": False,
            "verify_iat": False,
            "verify_sub": False,
        }
        for secret in self.secrets:
            try:
                return jwt.api_jwt.decode_complete(
                    token, secret, algorithms=["HS256"], audience=self.audience, options=options
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.InvalidAlgorithmError:
                raise TokenError("bad_header") from None
            except (jwt.InvalidAudienceError, jwt.MissingRequiredClaimError):
                raise TokenError("wrong_audience") from None
            except (jwt.DecodeError, ValueError, RecursionError):
                raise TokenError("malformed") from None
            except jwt.InvalidTokenError:  # e.g. a "crit" extension we do not implement
                raise TokenError("bad_header") from None
        raise TokenError("bad_signature")


def _number(claims: dict[str, Any], name: str) -> float | None:
    """A NumericDate claim; absent -> None; anything but a finite number -> TokenError."""
    if name not in claims:
        return None
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenError("bad_claims")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        raise TokenError("bad_claims") from None
    if not math.isfinite(number):
        raise TokenError("bad_claims")
    return number
