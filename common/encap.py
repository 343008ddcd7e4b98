"""The header the relay and a transceiver put in front of every datagram they exchange.

The transceiver never sees the client's packets directly, so each one arrives prefixed with the
client's address; replies go back with the same header so the relay knows where to send them. The
address is always the client's, in both directions. Layout (big-endian):

    0xFF | version << 4 | family (4 or 6) | hop limit | flags | client port (2) |
    client IP (4 or 16)

then the original payload. 0xFF is outside every RFC 7983 range, so an encapsulated datagram can
never be taken for STUN, DTLS or SRTP. The hop limit bounds relay tiers (edge relay -> cluster relay
-> transceiver): a relay forwarding to another relay decrements it and drops at zero.

``encode_header_packed`` and ``decode_packed`` are the relay's hot path (no ipaddress objects); the
rest is for reading, tests and stand-ins.
"""

import ipaddress
import struct
from dataclasses import dataclass

__all__ = [
    "DEFAULT_HOP_LIMIT",
    "HEADER_LEN_V4",
    "HEADER_LEN_V6",
    "MAGIC",
    "VERSION",
    "EncapError",
    "EncapHeader",
    "decode_header",
    "decode_packed",
    "encapsulate",
    "encode_header",
    "encode_header_packed",
]

MAGIC = 0xFF
VERSION = 1
HEADER_LEN_V4 = 10
HEADER_LEN_V6 = 22
DEFAULT_HOP_LIMIT = 4

_FIXED = struct.Struct("!BBBBH")  # magic, version|family, hop limit, flags, client port
_FIXED_LEN = _FIXED.size  # 6
_VERSION_FAMILY_V4 = (VERSION << 4) | 4
_VERSION_FAMILY_V6 = (VERSION << 4) | 6


class EncapError(ValueError):
    """Bad encapsulation input: a header that does not decode, or values that cannot be encoded."""


@dataclass(frozen=True, slots=True)
class EncapHeader:
    """A decoded header, with the client address in readable form."""

    family: int
    hop_limit: int
    flags: int
    client_ip: str
    client_port: int

    @property
    def header_len(self) -> int:
        return HEADER_LEN_V4 if self.family == 4 else HEADER_LEN_V6


def encode_header_packed(
    family: int,
    packed_ip: bytes,
    port: int,
    hop_limit: int = DEFAULT_HOP_LIMIT,
    flags: int = 0,
) -> bytes:
    """Encode from a packed address (as taken from a sockaddr). Hot path."""
    if family == 4:
        if len(packed_ip) != 4:
            raise EncapError("IPv4 address must be 4 bytes")
        version_family = _VERSION_FAMILY_V4
    elif family == 6:
        if len(packed_ip) != 16:
            raise EncapError("IPv6 address must be 16 bytes")
        version_family = _VERSION_FAMILY_V6
    else:
        raise EncapError(f"family must be 4 or 6, got {family!r}")
    try:
        return _FIXED.pack(MAGIC, version_family, hop_limit, flags, port) + packed_ip
    except struct.error:
        raise EncapError("port, hop limit or flags out of range") from None


def encode_header(
    client_ip: str,
    client_port: int,
    hop_limit: int = DEFAULT_HOP_LIMIT,
    flags: int = 0,
) -> bytes:
    """Encode from a textual address; the family follows from the address."""
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        raise EncapError(f"not an IP address: {client_ip!r}") from None
    return encode_header_packed(address.version, address.packed, client_port, hop_limit, flags)


def encapsulate(
    payload: bytes,
    client_ip: str,
    client_port: int,
    hop_limit: int = DEFAULT_HOP_LIMIT,
    flags: int = 0,
) -> bytes:
    """Header plus payload, for tests and stand-ins."""
    return encode_header(client_ip, client_port, hop_limit, flags) + bytes(payload)


def decode_packed(buf: bytes | bytearray | memoryview) -> tuple[int, bytes, int, int, int]:
    """(family, packed client IP, client port, hop limit, payload offset). Hot path.

    Flags are not returned: version 1 defines none, and the relay forwards headers it rewrites.
    """
    n = len(buf)
    if n < _FIXED_LEN:
        raise EncapError("too short")
    magic, version_family, hop_limit, _flags, port = _FIXED.unpack_from(buf, 0)
    if magic != MAGIC:
        raise EncapError("bad magic")
    if version_family == _VERSION_FAMILY_V4:
        if n < HEADER_LEN_V4:
            raise EncapError("too short")
        return 4, bytes(buf[_FIXED_LEN:HEADER_LEN_V4]), port, hop_limit, HEADER_LEN_V4
    if version_family == _VERSION_FAMILY_V6:
        if n < HEADER_LEN_V6:
            raise EncapError("too short")
        return 6, bytes(buf[_FIXED_LEN:HEADER_LEN_V6]), port, hop_limit, HEADER_LEN_V6
    if version_family >> 4 != VERSION:
        raise EncapError("bad version")
    raise EncapError("bad family")


def decode_header(buf: bytes | bytearray | memoryview) -> tuple[EncapHeader, int]:
    """The header in readable form and the offset where the original payload starts."""
    family, packed_ip, port, hop_limit, offset = decode_packed(buf)
    address = str(ipaddress.ip_address(packed_ip))
    return EncapHeader(family, hop_limit, buf[3], address, port), offset
