"""The resume token: what a draining transceiver gives a caller so that its call moves.

On SIGTERM a transceiver asks each caller with an open data channel to move
(``session.migrate``, docs/transceiver.md "Moving calls on scale-down"). The caller re-offers
to the fleet with this token; the transceiver that gets the offer verifies it, then claims it
from the owner named inside, which answers a valid token once. So the token must name the owner
and the call, expire soon, be unforgeable and tell one offer from another: it is signed with
the hint keyring (``common.hint`` ``seal``/``unseal``) under its own domain string, so no value
signed as a hint or a session id ever verifies as one, nor the reverse.

Wire form, 45 bytes, big-endian, then URL-safe base64 (60 characters, no padding):

    ver_key (1: version << 4 | key id) | cluster (1) | owner transceiver id (2) |
    expires unix seconds (4) | call id (16) | nonce (9) |
    tag (12) = HMAC-SHA256(key, DOMAIN + body)[:12]

The expiry is in seconds (not minutes, as the hint's issued-at): a token lives seconds. The
nonce (72 random bits) makes each offer's token distinct, so the owner can tell the token it
gave from an older one for the same call. One use is the owner's business
(``transceiver.migration``): this module only says whether a token is genuine and current.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from common.hint import SEAL_ERROR_REASONS, TAG_LEN, HintError, Keyring, seal_url, unseal_url
from common.sessionid import CALL_ID_LEN

__all__ = [
    "DOMAIN",
    "NONCE_LEN",
    "RESUME_TOKEN_ERROR_REASONS",
    "RESUME_TOKEN_LEN_CHARS",
    "ResumeToken",
    "ResumeTokenError",
    "sign_resume_token",
    "verify_resume_token",
]

DOMAIN = b"rtcedge/resume-token/v1\x00"
"""Domain separation from the hint and the session id: the same keyring signs them all."""

NONCE_LEN = 9
_FIELDS = struct.Struct(f"!BHI{CALL_ID_LEN}s{NONCE_LEN}s")  # cluster, owner, expires, call, nonce
RESUME_TOKEN_LEN_BYTES = 1 + _FIELDS.size + TAG_LEN  # 45
RESUME_TOKEN_LEN_CHARS = RESUME_TOKEN_LEN_BYTES * 4 // 3  # 60; 45 is a multiple of 3: no '='

RESUME_TOKEN_ERROR_REASONS: tuple[str, ...] = (
    *SEAL_ERROR_REASONS,
    "expired",
    "future",  # expires further ahead than any token we give (a clock far off, or a forgery)
)


class ResumeTokenError(HintError):
    """A token that is not genuine and current; ``reason``: RESUME_TOKEN_ERROR_REASONS."""


@dataclass(frozen=True, slots=True)
class ResumeToken:
    """What a verified token says: the owner (cluster, transceiver id), the call, its nonce."""

    key_id: int
    cluster: int
    transceiver_id: int
    expires_s: int  # unix seconds
    call_id: str  # 32 lowercase hex characters: the backend's session_id
    nonce: bytes

    @property
    def owner(self) -> tuple[int, int]:
        return self.cluster, self.transceiver_id


def sign_resume_token(
    keyring: Keyring,
    cluster: int,
    transceiver_id: int,
    expires_s: float,
    call_id: str,
    nonce: bytes,
) -> str:
    """The token for one offer to move ``call_id``. Pure: the caller gives the expiry and the
    nonce (``secrets.token_bytes(NONCE_LEN)``)."""
    if not 0 <= cluster <= 0xFF:
        raise ValueError(f"cluster {cluster} outside 0..255")
    if not 0 <= transceiver_id <= 0xFFFF:
        raise ValueError(f"transceiver id {transceiver_id} outside 0..65535")
    if not 0 <= int(expires_s) <= 0xFFFFFFFF:
        raise ValueError(f"expiry {expires_s} outside 32-bit unix seconds")
    raw_call_id = bytes.fromhex(call_id)
    if len(raw_call_id) != CALL_ID_LEN or raw_call_id.hex() != call_id:
        raise ValueError(f"call id must be {2 * CALL_ID_LEN} lowercase hex characters")
    if len(nonce) != NONCE_LEN:
        raise ValueError(f"nonce must be {NONCE_LEN} bytes")
    fields = _FIELDS.pack(cluster, transceiver_id, int(expires_s), raw_call_id, bytes(nonce))
    return seal_url(keyring, DOMAIN, fields)


def verify_resume_token(
    keyring: Keyring,
    text: str,
    now_s: float,
    max_ttl_s: float,
    max_skew_s: float = 120.0,
) -> ResumeToken:
    """Check a token from an offer (or a claim) and return what it says, or raise
    ResumeTokenError. Cheapest first: length, alphabet, one HMAC, then the expiry: past is
    ``expired``; more than ``max_ttl_s`` (the longest we give) + ``max_skew_s`` ahead is
    ``future``."""
    key_id, fields = unseal_url(keyring, DOMAIN, text, RESUME_TOKEN_LEN_BYTES, ResumeTokenError)
    cluster, transceiver_id, expires_s, raw_call_id, nonce = _FIELDS.unpack(fields)
    if now_s > expires_s:
        raise ResumeTokenError("expired")
    if expires_s - now_s > max_ttl_s + max_skew_s:
        raise ResumeTokenError("future")
    return ResumeToken(key_id, cluster, transceiver_id, expires_s, raw_call_id.hex(), nonce)
