"""STUN (RFC 8489) message parsing for the relay and the transceiver, plus builders for tests,
benchmarks and stand-ins.

The relay reads exactly one thing from STUN: the USERNAME of a Binding request that may start a
flow (its admission rule). The transceiver parses every STUN datagram with ``parse`` before aioice
sees it, and its demultiplexer finds a check's session by ``server_ufrag`` and verifies it with
``check_integrity`` before it learns a client address. ``parse`` is therefore strict (any doubt is
a drop) and zero-copy: attributes are recorded as offsets into the caller's buffer and values are
sliced out as memoryviews only when asked for. ICE semantics (roles, priorities, consent) belong to
the transceiver's ICE agent (aioice), not here.

``parse`` and ``binding_request_username`` are written for speed: they run for every STUN packet
that may start a flow at the relay (within the first-packet budget; a confirmed flow's packets are
forwarded unread) and for the STUN datagrams of the transceiver. The builders at the bottom are
written for reading.
"""

import hashlib
import hmac
import ipaddress
import struct
import zlib
from dataclasses import dataclass

__all__ = [
    "ATTR_FINGERPRINT",
    "ATTR_ICE_CONTROLLED",
    "ATTR_ICE_CONTROLLING",
    "ATTR_MESSAGE_INTEGRITY",
    "ATTR_MESSAGE_INTEGRITY_SHA256",
    "ATTR_PRIORITY",
    "ATTR_SOFTWARE",
    "ATTR_USERNAME",
    "ATTR_USE_CANDIDATE",
    "ATTR_XOR_MAPPED_ADDRESS",
    "BINDING_INDICATION",
    "BINDING_REQUEST",
    "BINDING_SUCCESS",
    "FINGERPRINT_XOR",
    "HEADER_LEN",
    "MAGIC_COOKIE",
    "MAX_USERNAME_LEN",
    "StunError",
    "StunMessage",
    "binding_request",
    "binding_request_username",
    "binding_success",
    "build",
    "check_integrity",
    "parse",
    "server_ufrag",
    "xor_mapped_address",
]

MAGIC_COOKIE = 0x2112A442
HEADER_LEN = 20
TRANSACTION_ID_LEN = 12

BINDING_REQUEST = 0x0001
BINDING_SUCCESS = 0x0101
BINDING_INDICATION = 0x0011

ATTR_USERNAME = 0x0006
ATTR_MESSAGE_INTEGRITY = 0x0008
ATTR_XOR_MAPPED_ADDRESS = 0x0020
ATTR_PRIORITY = 0x0024
ATTR_USE_CANDIDATE = 0x0025
ATTR_MESSAGE_INTEGRITY_SHA256 = 0x001C
ATTR_SOFTWARE = 0x8022
ATTR_FINGERPRINT = 0x8028
ATTR_ICE_CONTROLLED = 0x8029
ATTR_ICE_CONTROLLING = 0x802A

FINGERPRINT_XOR = 0x5354554E
MAX_USERNAME_LEN = 513
"""RFC 8489 14.3: USERNAME MUST be less than 513 bytes, so valid lengths are 1..512."""

_MESSAGE_INTEGRITY_LEN = 20
_MI_SHA256_LENGTHS = frozenset(range(16, 33, 4))  # RFC 8489 14.6: a truncated HMAC-SHA256

_HEADER = struct.Struct("!HHI")  # message type, message length, magic cookie
_ATTR_HEADER = struct.Struct("!HH")  # attribute type, value length
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")

# States of the attribute walk: which integrity attribute, if any, has been seen so far; and
# after one, what may still follow it besides FINGERPRINT (RFC 8489 14.5, 14.6).
_BEFORE_INTEGRITY = 0
_AFTER_MI = 1
_AFTER_MI_SHA256 = 2
_MAY_FOLLOW = {
    _AFTER_MI: frozenset({ATTR_MESSAGE_INTEGRITY_SHA256}),
    _AFTER_MI_SHA256: frozenset(),
}

Buffer = bytes | bytearray | memoryview


class StunError(ValueError):
    """Bad STUN input. ``reason`` is a short fixed string saying what is wrong, for tests and
    logs; callers count every StunError under a drop reason of their own (``stun_malformed``)."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, slots=True)
class StunMessage:
    """A parsed STUN message that still refers to its buffer: attribute values are offsets."""

    msg_type: int
    transaction_id: bytes
    attributes: tuple[tuple[int, int, int], ...]
    """(attribute type, value offset, value length) in message order; offsets index the buffer."""
    has_fingerprint: bool
    has_integrity: bool

    def find(self, attr_type: int) -> tuple[int, int] | None:
        """(value offset, value length) of the first attribute of ``attr_type``, or None."""
        for a_type, offset, length in self.attributes:
            if a_type == attr_type:
                return offset, length
        return None

    def value(self, buf: Buffer, attr_type: int) -> memoryview | None:
        """The value of the first attribute of ``attr_type``, as a view of ``buf`` (no copy)."""
        found = self.find(attr_type)
        if found is None:
            return None
        offset, length = found
        return memoryview(buf)[offset : offset + length]


def parse(buf: Buffer) -> StunMessage:
    """Validate ``buf`` as one complete STUN message and index its attributes.

    Runs for every packet that may start a flow at the relay and every STUN datagram at the
    transceiver. Strict where RFC 8489 allows leniency, because a relay that forwards on doubt can
    be abused: FINGERPRINT, when present, must be last and correct, and nothing but FINGERPRINT
    (or MESSAGE-INTEGRITY-SHA256 after MESSAGE-INTEGRITY) may follow an integrity attribute (RFC
    8489 14.5, 14.6).
    """
    n = len(buf)
    if n < HEADER_LEN:
        raise StunError("too short")
    msg_type, length, cookie = _HEADER.unpack_from(buf, 0)
    # One test for a good header, and only a bad one asks ``_header_error`` which rule it broke.
    if (msg_type & 0xC000, cookie, length & 3, length) != (0, MAGIC_COOKIE, 0, n - HEADER_LEN):
        raise _header_error(msg_type, length, cookie, n)

    attributes = []
    has_integrity = False
    has_fingerprint = False
    state = _BEFORE_INTEGRITY
    offset = HEADER_LEN
    # The message length is a multiple of 4 and every step below is too, so an attribute header
    # that starts before n always ends within it; only values need a bounds check.
    while offset < n:
        attr_type, attr_len = _ATTR_HEADER.unpack_from(buf, offset)
        value_offset = offset + 4
        end = value_offset + ((attr_len + 3) & ~3)
        if end > n:
            raise StunError("attribute overflows message")
        if attr_type == ATTR_FINGERPRINT:
            if attr_len != 4:
                raise StunError("bad fingerprint length")
            if end != n:
                raise StunError("fingerprint not last")
            # RFC 8489 14.7: CRC-32 of the message up to (excluding) the FINGERPRINT attribute,
            # with the header length already covering it.
            crc = zlib.crc32(memoryview(buf)[:offset]) ^ FINGERPRINT_XOR
            if crc != _U32.unpack_from(buf, value_offset)[0]:
                raise StunError("bad fingerprint")
            has_fingerprint = True
        elif state and attr_type not in _MAY_FOLLOW[state]:
            raise StunError("attribute after message-integrity")
        elif attr_type == ATTR_MESSAGE_INTEGRITY:
            if attr_len != _MESSAGE_INTEGRITY_LEN:
                raise StunError("bad message-integrity length")
            has_integrity = True
            state = _AFTER_MI
        elif attr_type == ATTR_MESSAGE_INTEGRITY_SHA256:
            # RFC 8489 14.6: 16..32 bytes, a multiple of 4 (a truncated HMAC-SHA256).
            if attr_len not in _MI_SHA256_LENGTHS:
                raise StunError("bad message-integrity-sha256 length")
            state = _AFTER_MI_SHA256
        attributes.append((attr_type, value_offset, attr_len))
        offset = end

    return StunMessage(
        msg_type,
        bytes(buf[8:HEADER_LEN]),
        tuple(attributes),
        has_fingerprint,
        has_integrity,
    )


def _header_error(msg_type: int, length: int, cookie: int, n: int) -> StunError:
    """Which header rule a datagram of ``n`` bytes broke, the first one first (``parse``)."""
    if msg_type & 0xC000:
        return StunError("not stun")
    if cookie != MAGIC_COOKIE:
        return StunError("bad magic cookie")
    if length & 3:
        return StunError("length not multiple of 4")
    return StunError("length mismatch")


def binding_request_username(buf: Buffer) -> str:
    """The USERNAME of a well-formed, fingerprinted Binding request: what the relay routes on.

    Requiring FINGERPRINT costs nothing for browsers (ICE always sends it, RFC 8445 7.1) and makes
    random or misdirected datagrams fail cheaply. The transceiver finds a check's session with it
    too.
    """
    msg = parse(buf)
    if msg.msg_type != BINDING_REQUEST:
        raise StunError("not a binding request")
    if not msg.has_fingerprint:
        raise StunError("missing fingerprint")
    found = msg.find(ATTR_USERNAME)
    if found is None:
        raise StunError("missing username")
    offset, length = found
    if not 0 < length < MAX_USERNAME_LEN:
        raise StunError("bad username length")
    try:
        return str(memoryview(buf)[offset : offset + length], "utf-8")
    except UnicodeDecodeError:
        raise StunError("username not utf-8") from None


def server_ufrag(username: str) -> str:
    """Our own ufrag out of a Binding request's USERNAME.

    RFC 8445 7.2.2: a check sent to us carries "<our ufrag>:<peer ufrag>". ICE ufrags cannot contain
    ':' (RFC 8839 ice-char), so the first ':' is the separator.
    """
    ours, sep, theirs = username.partition(":")
    if not sep:
        raise StunError("username without colon")
    if not ours or not theirs:
        raise StunError("empty ufrag in username")
    return ours


def check_integrity(buf: Buffer, key: bytes) -> bool:
    """Whether MESSAGE-INTEGRITY (HMAC-SHA1) verifies with ``key``; False if there is none.

    The transceiver's demultiplexer checks every Binding request with the session's ICE password
    before it learns or refreshes an address; stand-ins and tests use it too. The relay never holds
    ICE passwords. Raises StunError if ``buf`` does not parse. RFC 8489 14.5: the HMAC covers the
    message up to the MESSAGE-INTEGRITY attribute, with the header length rewritten to end just
    after that attribute (so FINGERPRINT is excluded).
    """
    msg = parse(buf)
    found = msg.find(ATTR_MESSAGE_INTEGRITY)
    if found is None:
        return False
    value_offset = found[0]
    view = memoryview(buf)
    attr_offset = value_offset - 4
    mac = hmac.new(key, view[:2], hashlib.sha1)
    mac.update(struct.pack("!H", attr_offset + 4 + _MESSAGE_INTEGRITY_LEN - HEADER_LEN))
    mac.update(view[4:attr_offset])
    expected = view[value_offset : value_offset + _MESSAGE_INTEGRITY_LEN]
    return hmac.compare_digest(mac.digest(), expected)


def xor_mapped_address(buf: Buffer, msg: StunMessage) -> tuple[str, int] | None:
    """The (host, port) of the first XOR-MAPPED-ADDRESS (RFC 8489 14.2), or None if absent."""
    value = msg.value(buf, ATTR_XOR_MAPPED_ADDRESS)
    if value is None:
        return None
    if len(value) < 4:
        raise StunError("bad xor-mapped-address")
    family = value[1]
    port = ((value[2] << 8) | value[3]) ^ (MAGIC_COOKIE >> 16)
    mask = _U32.pack(MAGIC_COOKIE) + msg.transaction_id
    if family == 0x01 and len(value) == 8:
        raw = bytes(a ^ b for a, b in zip(value[4:8], mask[:4], strict=True))
        return str(ipaddress.IPv4Address(raw)), port
    if family == 0x02 and len(value) == 20:
        raw = bytes(a ^ b for a, b in zip(value[4:20], mask, strict=True))
        return str(ipaddress.IPv6Address(raw)), port
    raise StunError("bad xor-mapped-address")


# --- Builders: for tests, benchmarks and stand-in transceivers; not the hot path. ---


def build(
    msg_type: int,
    transaction_id: bytes,
    attributes: list[tuple[int, bytes]],
    integrity_key: bytes | None = None,
    fingerprint: bool = True,
) -> bytes:
    """Encode a STUN message; MESSAGE-INTEGRITY and FINGERPRINT are computed, never passed in.

    Keeping the two trailing attributes out of ``attributes`` means every message built here parses.
    """
    if not 0 <= msg_type <= 0x3FFF:
        raise StunError("bad message type")
    if len(transaction_id) != TRANSACTION_ID_LEN:
        raise StunError("bad transaction id length")
    body = bytearray()
    for attr_type, value in attributes:
        if not 0 <= attr_type <= 0xFFFF:
            raise StunError("bad attribute type")
        if attr_type in (ATTR_MESSAGE_INTEGRITY, ATTR_MESSAGE_INTEGRITY_SHA256, ATTR_FINGERPRINT):
            raise StunError("integrity and fingerprint attributes are computed by build")
        if len(value) > 0xFFFF:
            raise StunError("attribute value too long")
        body += _ATTR_HEADER.pack(attr_type, len(value))
        body += value
        body += bytes(-len(value) % 4)
    trailer_len = (4 + _MESSAGE_INTEGRITY_LEN if integrity_key is not None else 0) + (
        8 if fingerprint else 0
    )
    if len(body) + trailer_len > 0xFFFF:
        raise StunError("message too long")

    def header(length: int) -> bytes:
        return _HEADER.pack(msg_type, length, MAGIC_COOKIE) + transaction_id

    if integrity_key is not None:
        length = len(body) + 4 + _MESSAGE_INTEGRITY_LEN
        mac = hmac.digest(integrity_key, header(length) + body, "sha1")
        body += _ATTR_HEADER.pack(ATTR_MESSAGE_INTEGRITY, _MESSAGE_INTEGRITY_LEN) + mac
    if fingerprint:
        message = header(len(body) + 8) + body
        crc = zlib.crc32(message) ^ FINGERPRINT_XOR
        return message + _ATTR_HEADER.pack(ATTR_FINGERPRINT, 4) + _U32.pack(crc)
    return header(len(body)) + bytes(body)


def binding_request(
    username: str,
    transaction_id: bytes,
    integrity_key: bytes | None = None,
    priority: int = 0x6E7F1EFF,
    controlling: bool = True,
    tie_breaker: int = 0,
) -> bytes:
    """An ICE connectivity check as a browser sends it (RFC 8445 7.1), always fingerprinted."""
    raw_username = username.encode("utf-8")
    if not 0 < len(raw_username) < MAX_USERNAME_LEN:
        raise StunError("bad username length")
    if not 0 <= priority <= 0xFFFFFFFF:
        raise StunError("bad priority")
    if not 0 <= tie_breaker <= 0xFFFFFFFFFFFFFFFF:
        raise StunError("bad tie breaker")
    role = ATTR_ICE_CONTROLLING if controlling else ATTR_ICE_CONTROLLED
    attributes = [
        (ATTR_USERNAME, raw_username),
        (ATTR_PRIORITY, _U32.pack(priority)),
        (role, _U64.pack(tie_breaker)),
    ]
    return build(BINDING_REQUEST, transaction_id, attributes, integrity_key)


def binding_success(
    transaction_id: bytes,
    mapped: tuple[str, int],
    integrity_key: bytes | None = None,
) -> bytes:
    """A Binding success response carrying XOR-MAPPED-ADDRESS (IPv4 or IPv6), fingerprinted."""
    host, port = mapped
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise StunError("bad mapped address") from None
    if not 0 <= port <= 0xFFFF:
        raise StunError("bad mapped port")
    if len(transaction_id) != TRANSACTION_ID_LEN:
        raise StunError("bad transaction id length")
    mask = _U32.pack(MAGIC_COOKIE) + transaction_id
    raw = address.packed
    family = 0x01 if address.version == 4 else 0x02
    xored = bytes(a ^ b for a, b in zip(raw, mask, strict=False))
    value = struct.pack("!BBH", 0, family, port ^ (MAGIC_COOKIE >> 16)) + xored
    return build(BINDING_SUCCESS, transaction_id, [(ATTR_XOR_MAPPED_ADDRESS, value)], integrity_key)
