"""Target ``stun``: the relay's STUN parser (common.stun) on arbitrary bytes.

Every input is checked twice: as it is, and repaired (header length, MESSAGE-INTEGRITY keyed with
``KEY`` and FINGERPRINT recomputed by fuzz.stunref), so that mutations reach the code behind the
CRC and the HMAC. Findings: any exception but StunError from ``parse``,
``binding_request_username``, ``server_ufrag``, ``check_integrity`` or ``xor_mapped_address``; a
parsed message whose index does not describe its buffer; ``check_integrity`` disagreeing with the
independent reference in fuzz.stunref.
"""

from __future__ import annotations

import zlib

import atheris

from fuzz import stunref
from fuzz.fixtures import STUN_KEY
from fuzz.harness import main, require

with atheris.instrument_imports(include=["common"]):
    from common import stun

KEY = STUN_KEY
_MI_SHA256 = 0x001C


def check_index(buf: bytes, msg: stun.StunMessage) -> None:
    """The parsed index must describe ``buf`` exactly: contiguous, in bounds, trailers last."""
    n = len(buf)
    require(msg.msg_type < 0x4000, "message type with the top bits set")
    require(msg.transaction_id == buf[8:20], "transaction id is not bytes 8..20")
    expected_offset = stunref.HEADER_LEN + 4
    types = []
    for attr_type, value_offset, attr_len in msg.attributes:
        require(value_offset == expected_offset, "attributes are not contiguous")
        require(value_offset + attr_len <= n, "attribute value past the end")
        expected_offset = value_offset + ((attr_len + 3) & ~3) + 4
        types.append(attr_type)
    require(expected_offset - 4 == n, "attributes do not end at the message end")
    fingerprints = types.count(stun.ATTR_FINGERPRINT)
    require(fingerprints == int(msg.has_fingerprint), "has_fingerprint disagrees with the index")
    require(not msg.has_fingerprint or types[-1] == stun.ATTR_FINGERPRINT, "fingerprint not last")
    if msg.has_fingerprint:  # RFC 8489 14.7, computed here without common.stun
        crc = zlib.crc32(buf[: n - 8]) ^ stunref.FINGERPRINT_XOR
        require(buf[n - 4 :] == crc.to_bytes(4, "big"), "a wrong fingerprint was accepted")
    integrity = types.count(stun.ATTR_MESSAGE_INTEGRITY)
    require(integrity == int(msg.has_integrity), "has_integrity disagrees with the index")
    if msg.has_integrity:
        after = types[types.index(stun.ATTR_MESSAGE_INTEGRITY) + 1 :]
        allowed = (_MI_SHA256, stun.ATTR_FINGERPRINT)
        require(all(t in allowed for t in after), "attribute accepted after message-integrity")
    if _MI_SHA256 in types:
        after = types[types.index(_MI_SHA256) + 1 :]
        require(all(t == stun.ATTR_FINGERPRINT for t in after), "attribute after mi-sha256")
    firsts: dict[int, tuple[int, int]] = {}
    for attr_type, value_offset, attr_len in msg.attributes:
        firsts.setdefault(attr_type, (value_offset, attr_len))
    for attr_type, (value_offset, attr_len) in firsts.items():
        require(msg.find(attr_type) == (value_offset, attr_len), "find() is not the first")
        value = msg.value(buf, attr_type)
        require(value is not None and value == buf[value_offset : value_offset + attr_len], "value")


def check_message(buf: bytes) -> stun.StunMessage | None:
    """Run every public reader on ``buf``; return the parsed message, or None if rejected."""
    try:
        msg = stun.parse(buf)
    except stun.StunError:
        msg = None
    else:
        check_index(buf, msg)
        require(stun.parse(memoryview(buf)) == msg, "a memoryview parses differently")

    try:
        username = stun.binding_request_username(buf)
    except stun.StunError:
        username = None
    if username is not None:
        require(msg is not None, "username read from a message that does not parse")
        require(msg.msg_type == stun.BINDING_REQUEST, "username of a non-request")
        require(msg.has_fingerprint, "username of a message without fingerprint")
        require(0 < len(username.encode("utf-8")) < stun.MAX_USERNAME_LEN, "username length")
        check_server_ufrag(username)

    try:
        verified = stun.check_integrity(buf, KEY)
    except stun.StunError:
        require(msg is None, "check_integrity rejects a message that parses")
    else:
        require(msg is not None, "check_integrity accepts a message that does not parse")
        require(verified == stunref.integrity_valid(buf, KEY), "integrity differs from the RFC")

    if msg is not None:
        try:
            mapped = stun.xor_mapped_address(buf, msg)
        except stun.StunError:
            pass
        else:
            require(mapped is None or 0 <= mapped[1] <= 0xFFFF, "mapped port out of range")
    return msg


def check_server_ufrag(username: str) -> None:
    try:
        ours = stun.server_ufrag(username)
    except stun.StunError:
        return
    require(ours and ":" not in ours, "server ufrag empty or with a colon")
    require(username.startswith(ours + ":") and len(username) > len(ours) + 1, "ufrag split")


def test_one_input(data: bytes) -> None:
    check_message(data)
    repaired = stunref.repair(data, KEY)
    if repaired != data:
        msg = check_message(repaired)
        if msg is not None and msg.has_integrity:
            require(stun.check_integrity(repaired, KEY), "a freshly keyed message fails integrity")
    # USERNAME values are attacker-chosen text; the split must hold for any string.
    check_server_ufrag(data.decode("utf-8", "replace"))


if __name__ == "__main__":
    main(test_one_input)
