"""The header the relay and a transceiver put in front of every datagram they exchange.

The transceiver never sees the client's packets directly, so each one arrives prefixed with the
client's address; replies go back with the same header so the relay knows where to send them. The
address is always the client's, in both directions. Layout (big-endian):

    0xFF | version << 4 | family (4 or 6) | hop limit | flags | client port (2) |
    client IP (4 or 16)

then the original payload. 0xFF is outside every RFC 7983 range, so an encapsulated datagram can
never be taken for STUN, DTLS or SRTP. The hop limit bounds relay tiers (edge relay -> cluster relay
-> transceiver): a relay receiving from another relay decrements it and drops at zero.

Flags: ``FLAG_PROBE`` marks a liveness probe one relay sends another's peer ingress (a header
with an all-zero client address, then a ``PROBE_NONCE_LEN``-byte nonce); the answer is the same
bytes with ``FLAG_PROBE_REPLY`` instead (same size: no amplification). ``FLAG_TCP`` marks a
datagram of a client that reached the relay over TCP (ICE-TCP, RFC 6544: the payload was one
RFC 4571 frame); the client address is then that of its TCP connection, and a transceiver's
reply keeps the flag so that the relay frames it back onto that connection. Media over UDP
never sets a flag.

The layout is defined once, as the offsets below; every reader and writer derives from them. The
relay never calls a function of this module per packet: it writes a flow's header once with
``encode_header_packed`` and, per batch, checks and copies header fields at these offsets with
strided views (relay.headers). The transceiver decodes each datagram with ``decode_packed`` (no
ipaddress objects); the rest is for reading, tests and stand-ins.
"""

import ipaddress
import struct
from dataclasses import dataclass

__all__ = [
    "ADDRESS_LEN",
    "ADDRESS_OFFSET",
    "DEFAULT_HOP_LIMIT",
    "FLAGS_OFFSET",
    "FLAG_PROBE",
    "FLAG_PROBE_REPLY",
    "FLAG_TCP",
    "HEADER_LEN",
    "HEADER_LEN_V4",
    "HEADER_LEN_V6",
    "HOP_LIMIT_OFFSET",
    "MAGIC",
    "MAGIC_OFFSET",
    "PORT_LEN",
    "PORT_OFFSET",
    "PROBE_NONCE_LEN",
    "VERSION",
    "VERSION_FAMILY",
    "VERSION_FAMILY_OFFSET",
    "EncapError",
    "EncapHeader",
    "decode_header",
    "decode_packed",
    "encapsulate",
    "encode_header",
    "encode_header_packed",
    "probe",
]

MAGIC = 0xFF
VERSION = 1
DEFAULT_HOP_LIMIT = 4
FLAG_PROBE = 0x01
FLAG_PROBE_REPLY = 0x02
FLAG_TCP = 0x04
PROBE_NONCE_LEN = 8

# The layout: byte offset (and length) of each field; the family is 4 or 6, as in the header.
MAGIC_OFFSET = 0
VERSION_FAMILY_OFFSET = 1
HOP_LIMIT_OFFSET = 2
FLAGS_OFFSET = 3
PORT_OFFSET = 4
PORT_LEN = 2
ADDRESS_OFFSET = PORT_OFFSET + PORT_LEN
ADDRESS_LEN = {4: 4, 6: 16}
HEADER_LEN = {family: ADDRESS_OFFSET + n for family, n in ADDRESS_LEN.items()}
HEADER_LEN_V4 = HEADER_LEN[4]  # 10
HEADER_LEN_V6 = HEADER_LEN[6]  # 22
VERSION_FAMILY = {family: (VERSION << 4) | family for family in ADDRESS_LEN}

# The fields before the address, in the order of their offsets above (the tests check it).
_FIXED = struct.Struct("!BBBBH")  # magic, version|family, hop limit, flags, client port
assert _FIXED.size == ADDRESS_OFFSET
_VERSION_FAMILY_V4 = VERSION_FAMILY[4]
_VERSION_FAMILY_V6 = VERSION_FAMILY[6]


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
        return HEADER_LEN[self.family]


def encode_header_packed(
    family: int,
    packed_ip: bytes,
    port: int,
    hop_limit: int = DEFAULT_HOP_LIMIT,
    flags: int = 0,
) -> bytes:
    """Encode from a packed address, as a sockaddr holds it (the relay: once per flow)."""
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
    """(family, packed client IP, client port, hop limit, payload offset): per packet, so no
    ipaddress objects.

    Flags are not returned: read ``buf[FLAGS_OFFSET]`` where they matter (``FLAG_TCP``).
    """
    n = len(buf)
    if n < ADDRESS_OFFSET:
        raise EncapError("too short")
    magic, version_family, hop_limit, _flags, port = _FIXED.unpack_from(buf, 0)
    if magic != MAGIC:
        raise EncapError("bad magic")
    if version_family == _VERSION_FAMILY_V4:
        if n < HEADER_LEN_V4:
            raise EncapError("too short")
        return 4, bytes(buf[ADDRESS_OFFSET:HEADER_LEN_V4]), port, hop_limit, HEADER_LEN_V4
    if version_family == _VERSION_FAMILY_V6:
        if n < HEADER_LEN_V6:
            raise EncapError("too short")
        return 6, bytes(buf[ADDRESS_OFFSET:HEADER_LEN_V6]), port, hop_limit, HEADER_LEN_V6
    if version_family >> 4 != VERSION:
        raise EncapError("bad version")
    raise EncapError("bad family")


def decode_header(buf: bytes | bytearray | memoryview) -> tuple[EncapHeader, int]:
    """The header in readable form and the offset where the original payload starts."""
    family, packed_ip, port, hop_limit, offset = decode_packed(buf)
    address = str(ipaddress.ip_address(packed_ip))
    return EncapHeader(family, hop_limit, buf[FLAGS_OFFSET], address, port), offset


def probe(family: int, nonce: bytes, flags: int = FLAG_PROBE) -> bytes:
    """A liveness probe between relays (or, with ``FLAG_PROBE_REPLY``, its answer)."""
    if len(nonce) != PROBE_NONCE_LEN:
        raise EncapError(f"a probe nonce is {PROBE_NONCE_LEN} bytes")
    return encode_header_packed(family, bytes(ADDRESS_LEN[family]), 0, flags=flags) + nonce
