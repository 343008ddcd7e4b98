"""The signed routing hint a transceiver uses as its ICE ufrag (docs/design.md, "Routing hint").

A browser echoes our ufrag in the USERNAME of every connectivity check (RFC 8445 7.2.2), so the
relay can learn from a flow's first packet which transceiver owns the session, with no shared state.
The hint carries indexes (cluster, transceiver id), never addresses, and is authenticated so that a
client cannot steer traffic anywhere else.

Wire form, 27 bytes, big-endian, then standard base64 (36 characters, no padding; its alphabet is
exactly ICE's ice-char set, RFC 8839):

    ver_key (1: version << 4 | key id) | cluster (1) | transceiver id (2) |
    issued-at unix minutes (4) | nonce (7) | tag (12) = HMAC-SHA256(key, DOMAIN + body)[:12]

``seal``/``unseal`` (version, key id, tag) and ``check_age`` are shared with the other values
signed with the same keyring (``common.sessionid``), each under its own domain string.
"""

import base64
import binascii
import hmac
import json
import os
import secrets
import struct
from dataclasses import dataclass

__all__ = [
    "DOMAIN",
    "HINT_ERROR_REASONS",
    "HINT_LEN_CHARS",
    "NONCE_LEN",
    "TAG_LEN",
    "VERSION",
    "HintError",
    "HintVerifier",
    "Keyring",
    "KeyringError",
    "RoutingHint",
    "check_age",
    "seal",
    "seal_url",
    "sign_hint",
    "unix_minutes",
    "unseal",
    "unseal_url",
    "verify_hint",
]

VERSION = 1
NONCE_LEN = 7
TAG_LEN = 12
DOMAIN = b"rtcedge/ice-hint/v1\x00"
"""Domain separation: a key shared with another use can never produce a valid hint by accident."""

MAX_KEY_ID = 15
MIN_SECRET_LEN = 16

_FIELDS = struct.Struct("!BHI7s")  # cluster, transceiver id, issued-at minutes, nonce
BODY_LEN = 1 + _FIELDS.size  # 15: ver_key, then the fields
HINT_LEN_BYTES = BODY_LEN + TAG_LEN  # 27
HINT_LEN_CHARS = HINT_LEN_BYTES * 4 // 3  # 36; 27 is a multiple of 3, so base64 needs no '='

SEAL_ERROR_REASONS: tuple[str, ...] = ("malformed", "version", "unknown_key", "bad_tag")
"""What reading any keyring-signed format can fail on (``unseal``, ``unseal_url``, a bad length):
each format adds the reasons of its own clock."""

HINT_ERROR_REASONS: tuple[str, ...] = (*SEAL_ERROR_REASONS, "expired", "future")


class HintError(ValueError):
    """A ufrag that is not a valid hint now. ``reason`` is one of HINT_ERROR_REASONS."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KeyringError(ValueError):
    """A keyring that must not be used: bad key id, short secret, missing signing key, bad JSON."""


@dataclass(frozen=True, slots=True)
class RoutingHint:
    """What a verified hint says: which transceiver owns the session, and since when."""

    key_id: int
    cluster: int
    transceiver_id: int
    issued_at_min: int
    nonce: bytes

    @property
    def issued_at_s(self) -> int:
        return self.issued_at_min * 60


class Keyring:
    """Hint keys by id. Signing uses ``signing_key_id``; verification accepts every key.

    Rotation (docs/design.md): add the new key everywhere, switch ``signing_key_id``, then drop
    the old key once the maximum session age has passed.
    """

    __slots__ = ("keys", "signing_key_id")

    keys: dict[int, bytes]
    signing_key_id: int

    def __init__(self, keys: dict[int, bytes], signing_key_id: int) -> None:
        if not keys:
            raise KeyringError("keyring has no keys")
        checked: dict[int, bytes] = {}
        for key_id, secret in keys.items():
            if not isinstance(key_id, int) or isinstance(key_id, bool):
                raise KeyringError(f"key id must be an int, got {key_id!r}")
            if not 0 <= key_id <= MAX_KEY_ID:
                raise KeyringError(f"key id {key_id} outside 0..{MAX_KEY_ID}")
            if not isinstance(secret, bytes | bytearray):
                raise KeyringError(f"secret of key {key_id} must be bytes")
            if len(secret) < MIN_SECRET_LEN:
                raise KeyringError(f"secret of key {key_id} shorter than {MIN_SECRET_LEN} bytes")
            checked[key_id] = bytes(secret)
        if signing_key_id not in checked:
            raise KeyringError(f"signing key id {signing_key_id!r} not in keyring")
        self.keys = checked
        self.signing_key_id = signing_key_id

    def __repr__(self) -> str:
        # Never print secrets (logs, tracebacks).
        return f"Keyring(key_ids={sorted(self.keys)}, signing_key_id={self.signing_key_id})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Keyring):
            return NotImplemented
        return self.keys == other.keys and self.signing_key_id == other.signing_key_id

    __hash__ = None  # type: ignore[assignment]  # mutable-looking container: not hashable

    @classmethod
    def from_json(cls, text: str) -> "Keyring":
        """Parse ``{"signing_key_id": 1, "keys": {"1": "<base64 secret>", ...}}``."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise KeyringError(f"keyring is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise KeyringError("keyring JSON must be an object")
        signing_key_id = doc.get("signing_key_id")
        raw_keys = doc.get("keys")
        if not isinstance(signing_key_id, int) or isinstance(signing_key_id, bool):
            raise KeyringError("signing_key_id must be an integer")
        if not isinstance(raw_keys, dict):
            raise KeyringError("keys must be an object of key id -> base64 secret")
        keys: dict[int, bytes] = {}
        for key_id_text, secret_b64 in raw_keys.items():
            if not key_id_text.isascii() or not key_id_text.isdigit():
                raise KeyringError(f"key id {key_id_text!r} is not a decimal integer")
            if not isinstance(secret_b64, str):
                raise KeyringError(f"secret of key {key_id_text} must be a base64 string")
            try:
                keys[int(key_id_text)] = base64.b64decode(secret_b64, validate=True)
            except (binascii.Error, ValueError):
                raise KeyringError(f"secret of key {key_id_text} is not base64") from None
        return cls(keys, signing_key_id)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Keyring":
        """Read a keyring file (e.g. a mounted Kubernetes Secret)."""
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read())

    def to_json(self) -> str:
        keys = {str(k): base64.b64encode(v).decode("ascii") for k, v in sorted(self.keys.items())}
        return json.dumps({"signing_key_id": self.signing_key_id, "keys": keys}, indent=2)

    @staticmethod
    def generate(key_id: int = 0) -> "Keyring":
        """A fresh one-key ring with a random 32-byte secret."""
        return Keyring({key_id: secrets.token_bytes(32)}, key_id)


def _tag(key: bytes, domain: bytes, body: bytes) -> bytes:
    return hmac.digest(key, domain + body, "sha256")[:TAG_LEN]


def seal(keyring: Keyring, domain: bytes, fields: bytes) -> bytes:
    """``ver_key | fields | tag``: the signing shared by every keyring-signed format (the hint,
    ``common.sessionid``). ``domain`` keeps the formats apart: a value signed as one never
    verifies as another."""
    key_id = keyring.signing_key_id
    body = bytes(((VERSION << 4) | key_id,)) + fields
    return body + _tag(keyring.keys[key_id], domain, body)


def unseal(
    keyring: Keyring, domain: bytes, raw: bytes, error: type[HintError] = HintError
) -> tuple[int, bytes]:
    """The inverse of ``seal``: (key id, fields), or ``error`` with reason version, unknown_key
    or bad_tag. The caller checks the length first (a format has one length)."""
    ver_key = raw[0]
    if ver_key >> 4 != VERSION:
        raise error("version")
    key = keyring.keys.get(ver_key & 0x0F)
    if key is None:
        raise error("unknown_key")
    body = raw[:-TAG_LEN]
    if not hmac.compare_digest(_tag(key, domain, body), raw[-TAG_LEN:]):
        raise error("bad_tag")
    return ver_key & 0x0F, body[1:]


def seal_url(keyring: Keyring, domain: bytes, fields: bytes) -> str:
    """``seal`` as URL-safe base64 (RFC 4648 5): the text form of the formats that travel in
    URLs and headers (``common.sessionid``, ``common.resumetoken``). Their lengths are
    multiples of 3 bytes: no padding."""
    return base64.urlsafe_b64encode(seal(keyring, domain, fields)).decode("ascii")


def unseal_url(
    keyring: Keyring, domain: bytes, text: str, raw_len: int, error: type[HintError] = HintError
) -> tuple[int, bytes]:
    """The inverse of ``seal_url`` for a format of ``raw_len`` bytes: (key id, fields), or
    ``error`` (``malformed``, then ``unseal``'s reasons). Cheapest first: length, alphabet,
    then one HMAC."""
    if len(text) != raw_len * 4 // 3:
        raise error("malformed")
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
    except (binascii.Error, ValueError):  # ValueError: non-ASCII text
        raise error("malformed") from None
    # urlsafe_b64decode skips characters outside its alphabet: a length check alone would let
    # '+', '/', '=' or spaces through, and so two spellings of one value.
    if len(raw) != raw_len or base64.urlsafe_b64encode(raw).decode() != text:
        raise error("malformed")
    return unseal(keyring, domain, raw, error)


def unix_minutes(now_s: float) -> int:
    """The issued-at field of a signed value: whole unix minutes, in 32 bits."""
    minutes = int(now_s // 60)
    if not 0 <= minutes <= 0xFFFFFFFF:
        raise ValueError(f"time {now_s} outside the 32-bit minutes of a signed value")
    return minutes


def sign_hint(
    keyring: Keyring, cluster: int, transceiver_id: int, now_s: float, nonce: bytes
) -> str:
    """The ufrag a transceiver gives a new session. Pure: the caller supplies time and nonce.

    The nonce makes ufrags of sessions started in the same minute on the same transceiver distinct;
    draw it from ``secrets.token_bytes(NONCE_LEN)``.
    """
    if not 0 <= cluster <= 0xFF:
        raise ValueError(f"cluster {cluster} outside 0..255")
    if not 0 <= transceiver_id <= 0xFFFF:
        raise ValueError(f"transceiver id {transceiver_id} outside 0..65535")
    if len(nonce) != NONCE_LEN:
        raise ValueError(f"nonce must be {NONCE_LEN} bytes")
    fields = _FIELDS.pack(cluster, transceiver_id, unix_minutes(now_s), bytes(nonce))
    return base64.b64encode(seal(keyring, DOMAIN, fields)).decode("ascii")


def check_age(
    issued_at_min: int,
    now_s: float,
    max_age_s: float,
    max_skew_s: float,
    error: type[HintError] = HintError,
) -> None:
    """``error`` expired or future, for a value signed ``issued_at_min`` (unix minutes)."""
    issued_at_s = issued_at_min * 60
    if now_s - issued_at_s > max_age_s:
        raise error("expired")
    if issued_at_s - now_s > max_skew_s:
        raise error("future")


def verify_hint(
    keyring: Keyring,
    ufrag: str,
    now_s: float,
    max_age_s: float,
    max_skew_s: float = 120.0,
) -> RoutingHint:
    """Check a ufrag from a Binding request and return where it routes, or raise HintError.

    Cheapest checks first: length, base64, version, key id, then one HMAC. The issued-at time is
    rounded down to the minute, so a hint looks up to 60 s older than it is: set ``max_age_s`` to
    the maximum session age plus a minute.
    """
    if len(ufrag) != HINT_LEN_CHARS:
        raise HintError("malformed")
    try:
        raw = base64.b64decode(ufrag, validate=True)
    except (binascii.Error, ValueError):  # ValueError: non-ASCII text
        raise HintError("malformed") from None
    if len(raw) != HINT_LEN_BYTES:  # '=' padding inside 36 characters
        raise HintError("malformed")
    key_id, fields = unseal(keyring, DOMAIN, raw)
    cluster, transceiver_id, issued_at_min, nonce = _FIELDS.unpack(fields)
    hint = RoutingHint(key_id, cluster, transceiver_id, issued_at_min, nonce)
    check_age(hint.issued_at_min, now_s, max_age_s, max_skew_s)
    return hint


class HintVerifier:
    """``verify_hint`` with a bounded cache, so consent checks every few seconds cost no HMAC.

    Only hints that verified are cached, and their age is checked again on every hit, so the cache
    never returns a hint that would fail now. Replacing the keyring clears the cache, so a dropped
    key stops working at once.
    """

    def __init__(
        self,
        keyring: Keyring,
        max_age_s: float,
        max_skew_s: float = 120.0,
        cache_capacity: int = 4096,
    ) -> None:
        if cache_capacity < 1:
            raise ValueError("cache_capacity must be at least 1")
        self._keyring = keyring
        self.max_age_s = max_age_s
        self.max_skew_s = max_skew_s
        self.cache_capacity = cache_capacity
        self._cache: dict[str, RoutingHint] = {}

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    def replace_keyring(self, keyring: Keyring) -> None:
        """Switch keys (rotation); cached results made with the old ring are forgotten."""
        self._keyring = keyring
        self._cache.clear()

    def __len__(self) -> int:
        return len(self._cache)

    def verify(self, ufrag: str, now_s: float) -> RoutingHint:
        hint = self._cache.get(ufrag)
        if hint is not None:
            try:
                check_age(hint.issued_at_min, now_s, self.max_age_s, self.max_skew_s)
            except HintError:
                del self._cache[ufrag]
                raise
            return hint
        hint = verify_hint(self._keyring, ufrag, now_s, self.max_age_s, self.max_skew_s)
        if len(self._cache) >= self.cache_capacity:
            # Clearing beats LRU bookkeeping here: a refill costs one HMAC per live session.
            self._cache.clear()
        self._cache[ufrag] = hint
        return hint
