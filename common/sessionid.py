"""The routable session id: the last segment of a WHIP resource URL (``/whip/<id>``).

Any pod behind the load-balanced Service may receive a DELETE or PATCH for a session; the id
says which transceiver owns it, so that pod can pass the request on (docs/transceiver.md,
"Session resources from any pod") with no shared store. Like the routing hint
(``common.hint``), it carries indexes, never addresses, and is signed with the same keyring
under its own domain string, so nobody without the keyring can make one name another owner.

Wire form, 36 bytes, big-endian, then URL-safe base64 (48 characters, no padding):

    ver_key (1: version << 4 | key id) | cluster (1) | transceiver id (2) |
    issued-at unix minutes (4) | call id (16) | tag (12) = HMAC-SHA256(key, DOMAIN + body)[:12]

The call id is the session's 128 random bits, the ``session_id`` the backend sees (32 hex
characters, docs/backend-protocol.md). It is not secret from the caller (it was the whole
resource id before); what makes a DELETE impossible to aim by guessing is the tag: 96 bits that
only a holder of the keyring can compute. The ICE ufrag cannot serve as the id: it travels in
clear in every STUN check, so anyone on the path would learn the URL that ends the call.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from common.hint import (
    SEAL_ERROR_REASONS,
    TAG_LEN,
    HintError,
    Keyring,
    check_age,
    seal_url,
    unix_minutes,
    unseal_url,
)

__all__ = [
    "CALL_ID_LEN",
    "DOMAIN",
    "SESSION_ID_ERROR_REASONS",
    "SESSION_ID_LEN_CHARS",
    "SessionId",
    "SessionIdError",
    "sign_session_id",
    "verify_session_id",
]

DOMAIN = b"rtcedge/session-id/v1\x00"
"""Domain separation from the hint (and any later format): the same keyring signs them all."""

CALL_ID_LEN = 16
_FIELDS = struct.Struct("!BHI16s")  # cluster, transceiver id, issued-at minutes, call id
SESSION_ID_LEN_BYTES = 1 + _FIELDS.size + TAG_LEN  # 36
SESSION_ID_LEN_CHARS = SESSION_ID_LEN_BYTES * 4 // 3  # 48; 36 is a multiple of 3: no '='

SESSION_ID_ERROR_REASONS: tuple[str, ...] = (*SEAL_ERROR_REASONS, "expired", "future")


class SessionIdError(HintError):
    """A resource id that is not a valid session id now; ``reason``: SESSION_ID_ERROR_REASONS."""


@dataclass(frozen=True, slots=True)
class SessionId:
    """What a verified id says: the owner (cluster, transceiver id) and the call it names."""

    key_id: int
    cluster: int
    transceiver_id: int
    issued_at_min: int
    call_id: str  # 32 lowercase hex characters

    @property
    def owner(self) -> tuple[int, int]:
        return self.cluster, self.transceiver_id


def sign_session_id(
    keyring: Keyring, cluster: int, transceiver_id: int, now_s: float, call_id: str
) -> str:
    """The resource id of a new session. Pure: the caller gives the time and the call id
    (``secrets.token_hex(16)``)."""
    if not 0 <= cluster <= 0xFF:
        raise ValueError(f"cluster {cluster} outside 0..255")
    if not 0 <= transceiver_id <= 0xFFFF:
        raise ValueError(f"transceiver id {transceiver_id} outside 0..65535")
    raw_call_id = bytes.fromhex(call_id)
    if len(raw_call_id) != CALL_ID_LEN or raw_call_id.hex() != call_id:
        raise ValueError(f"call id must be {2 * CALL_ID_LEN} lowercase hex characters")
    fields = _FIELDS.pack(cluster, transceiver_id, unix_minutes(now_s), raw_call_id)
    return seal_url(keyring, DOMAIN, fields)


def verify_session_id(
    keyring: Keyring,
    text: str,
    now_s: float,
    max_age_s: float,
    max_skew_s: float = 120.0,
) -> SessionId:
    """Check the id of a request's URL and return whom it names, or raise SessionIdError.

    Cheapest first: length, alphabet, then one HMAC, then the age. A session cannot outlive
    --max-duration, so ``max_age_s`` = that plus a minute (issued-at is rounded down)."""
    key_id, fields = unseal_url(keyring, DOMAIN, text, SESSION_ID_LEN_BYTES, SessionIdError)
    cluster, transceiver_id, issued_at_min, raw_call_id = _FIELDS.unpack(fields)
    check_age(issued_at_min, now_s, max_age_s, max_skew_s, SessionIdError)
    return SessionId(key_id, cluster, transceiver_id, issued_at_min, raw_call_id.hex())
