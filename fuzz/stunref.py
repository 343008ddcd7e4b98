"""An independent, lenient reading of STUN for the harnesses: oracle and input repair.

Written from RFC 8489 (sections 5, 14.5, 14.7), not from ``common.stun``, so the two can be
compared. It never decides whether a message is acceptable; it only answers "does this
MESSAGE-INTEGRITY verify with this key" and rewrites the fields a mutator cannot guess (the
length, the HMAC, the CRC) so that fuzzing reaches the code behind those checks.
"""

from __future__ import annotations

import hmac
import struct
import zlib

HEADER_LEN = 20
MAGIC_COOKIE = b"\x21\x12\xa4\x42"
MESSAGE_INTEGRITY = 0x0008
FINGERPRINT = 0x8028
FINGERPRINT_XOR = 0x5354554E
_MI_LEN = 20


def attributes(buf: bytes | bytearray) -> list[tuple[int, int, int]]:
    """(type, header offset, value length) of each whole attribute header after the STUN header.

    Lenient: stops at the first header that does not fit; values may run past the end.
    """
    found = []
    offset = HEADER_LEN
    n = len(buf)
    while offset + 4 <= n:
        attr_type, attr_len = struct.unpack_from("!HH", buf, offset)
        found.append((attr_type, offset, attr_len))
        offset += 4 + ((attr_len + 3) & ~3)
    return found


def _integrity_mac(buf: bytes | bytearray, mi_offset: int, key: bytes) -> bytes:
    # RFC 8489 14.5: the HMAC input is the message up to MESSAGE-INTEGRITY, with the header's
    # length set as if MESSAGE-INTEGRITY were the last attribute.
    length = mi_offset + 4 + _MI_LEN - HEADER_LEN
    covered = bytes(buf[0:2]) + struct.pack("!H", length) + bytes(buf[4:mi_offset])
    return hmac.digest(key, covered, "sha1")


def integrity_valid(buf: bytes | bytearray, key: bytes) -> bool:
    """Whether the first MESSAGE-INTEGRITY verifies with ``key`` (knowledge of the password)."""
    if len(buf) < HEADER_LEN:
        return False
    for attr_type, offset, attr_len in attributes(buf):
        if attr_type == MESSAGE_INTEGRITY:
            value = bytes(buf[offset + 4 : offset + 4 + attr_len])
            if attr_len != _MI_LEN or len(value) != _MI_LEN:
                return False
            return hmac.compare_digest(value, _integrity_mac(buf, offset, key))
    return False


def repair(data: bytes, key: bytes) -> bytes:
    """``data`` with the header length, the first MESSAGE-INTEGRITY (keyed with ``key``) and a
    trailing FINGERPRINT recomputed. Returns ``data`` itself when it is not STUN-shaped."""
    n = len(data)
    if n < HEADER_LEN or n - HEADER_LEN > 0xFFFF:
        return data
    buf = bytearray(data)
    struct.pack_into("!H", buf, 2, n - HEADER_LEN)
    attrs = attributes(buf)
    for attr_type, offset, attr_len in attrs:
        if attr_type == MESSAGE_INTEGRITY:
            if attr_len == _MI_LEN and offset + 4 + _MI_LEN <= n:
                buf[offset + 4 : offset + 4 + _MI_LEN] = _integrity_mac(buf, offset, key)
            break
    if attrs:
        attr_type, offset, attr_len = attrs[-1]
        if attr_type == FINGERPRINT and attr_len == 4 and offset + 8 == n:
            crc = zlib.crc32(buf[:offset]) ^ FINGERPRINT_XOR
            struct.pack_into("!I", buf, offset + 4, crc)
    return bytes(buf)
