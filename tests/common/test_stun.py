"""Tests for common.stun: RFC 5769 vectors, every rejection reason, builders, properties."""

import contextlib
import hashlib
import ipaddress
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import stun
from common.stun import (
    ATTR_FINGERPRINT,
    ATTR_ICE_CONTROLLED,
    ATTR_ICE_CONTROLLING,
    ATTR_MESSAGE_INTEGRITY,
    ATTR_MESSAGE_INTEGRITY_SHA256,
    ATTR_PRIORITY,
    ATTR_SOFTWARE,
    ATTR_USERNAME,
    ATTR_XOR_MAPPED_ADDRESS,
    BINDING_INDICATION,
    BINDING_REQUEST,
    BINDING_SUCCESS,
    MAGIC_COOKIE,
    StunError,
    binding_request,
    binding_request_username,
    binding_success,
    build,
    check_integrity,
    parse,
    server_ufrag,
    xor_mapped_address,
)
from tests.support.rfc5769 import (
    RFC5769_2_1_REQUEST,
    RFC5769_2_2_IPV4_RESPONSE,
    RFC5769_2_3_IPV6_RESPONSE,
    RFC5769_2_4_LONG_TERM_REQUEST,
    RFC5769_2_4_PASSWORD_RAW,
    RFC5769_2_4_USERNAME,
    RFC5769_PASSWORD,
    RFC5769_TRANSACTION_ID,
    VECTORS,
    key_for,
    long_term_key,
    saslprep_for_vector,
)

# --- RFC 5769 vectors ---


def test_vectors_have_the_lengths_the_rfc_states():
    assert [len(v) for v in VECTORS.values()] == [108, 80, 92, 116]


@pytest.mark.parametrize("name", VECTORS)
def test_rfc5769_vector_parses(name):
    msg = parse(VECTORS[name])
    assert msg.has_integrity
    assert msg.has_fingerprint is (name != "2.4")


@pytest.mark.parametrize("name", VECTORS)
def test_rfc5769_vector_integrity_verifies_with_the_rfc_password(name):
    assert check_integrity(VECTORS[name], key_for(name))


@pytest.mark.parametrize("name", VECTORS)
def test_rfc5769_vector_integrity_fails_with_another_password(name):
    assert not check_integrity(VECTORS[name], b"not the password")


def test_rfc5769_long_term_password_saslprep_gives_the_matrix():
    assert saslprep_for_vector(RFC5769_2_4_PASSWORD_RAW) == "TheMatrIX"
    expected = hashlib.md5(f"{RFC5769_2_4_USERNAME}:example.org:TheMatrIX".encode()).digest()
    assert long_term_key() == expected


def test_rfc5769_sample_request_fields():
    buf = RFC5769_2_1_REQUEST
    msg = parse(buf)
    assert msg.msg_type == BINDING_REQUEST
    assert msg.transaction_id == RFC5769_TRANSACTION_ID
    assert [t for t, _, _ in msg.attributes] == [
        ATTR_SOFTWARE,
        ATTR_PRIORITY,
        ATTR_ICE_CONTROLLED,
        ATTR_USERNAME,
        ATTR_MESSAGE_INTEGRITY,
        ATTR_FINGERPRINT,
    ]
    assert bytes(msg.value(buf, ATTR_SOFTWARE)) == b"STUN test client"
    assert bytes(msg.value(buf, ATTR_PRIORITY)) == bytes.fromhex("6e0001ff")
    assert bytes(msg.value(buf, ATTR_USERNAME)) == b"evtj:h6vY"
    assert msg.value(buf, ATTR_XOR_MAPPED_ADDRESS) is None


def test_rfc5769_sample_request_username_is_routable():
    username = binding_request_username(RFC5769_2_1_REQUEST)
    assert username == "evtj:h6vY"
    assert server_ufrag(username) == "evtj"


def test_rfc5769_long_term_request_username_decodes_but_is_not_routable_without_fingerprint():
    msg = parse(RFC5769_2_4_LONG_TERM_REQUEST)
    username = msg.value(RFC5769_2_4_LONG_TERM_REQUEST, ATTR_USERNAME)
    assert str(username, "utf-8") == RFC5769_2_4_USERNAME
    with pytest.raises(StunError, match="missing fingerprint"):
        binding_request_username(RFC5769_2_4_LONG_TERM_REQUEST)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("2.2", ("192.0.2.1", 32853)), ("2.3", ("2001:db8:1234:5678:11:2233:4455:6677", 32853))],
)
def test_rfc5769_responses_carry_the_documented_mapped_address(name, expected):
    buf = VECTORS[name]
    msg = parse(buf)
    assert msg.msg_type == BINDING_SUCCESS
    assert xor_mapped_address(buf, msg) == expected


@pytest.mark.parametrize("name", VECTORS)
def test_flipping_any_bit_pattern_of_any_byte_of_a_vector_is_detected(name):
    vector = VECTORS[name]
    key = key_for(name)
    for i in range(len(vector)):
        for mask in (0x01, 0x10, 0x80, 0xFF):
            damaged = bytearray(vector)
            damaged[i] ^= mask
            try:
                accepted = check_integrity(damaged, key)
            except StunError:
                continue
            assert not accepted, f"byte {i} ^ {mask:#x} went unnoticed"


# --- rejection reasons ---

TID = bytes(range(1, 13))


def _raw(body: bytes, msg_type: int = BINDING_REQUEST, length: int | None = None) -> bytes:
    """A message with a correct header around hand-made attribute bytes."""
    length = len(body) if length is None else length
    return struct.pack("!HHI", msg_type, length, MAGIC_COOKIE) + TID + body


def _attr(attr_type: int, value: bytes) -> bytes:
    return struct.pack("!HH", attr_type, len(value)) + value + bytes(-len(value) % 4)


def _fingerprinted(body: bytes, msg_type: int = BINDING_REQUEST) -> bytes:
    """Append a correct FINGERPRINT (computed independently of the module under test)."""
    head = _raw(body, msg_type, len(body) + 8)
    crc = zlib.crc32(head) ^ 0x5354554E
    return head + struct.pack("!HHI", ATTR_FINGERPRINT, 4, crc)


@pytest.mark.parametrize(
    ("buf", "reason"),
    [
        (b"", "too short"),
        (_raw(b"")[:19], "too short"),
        (_raw(b"", msg_type=0x8001), "not stun"),
        (_raw(b"", msg_type=0x4001), "not stun"),
        (_raw(b"")[:4] + b"\x21\x12\xa4\x43" + TID, "bad magic cookie"),
        (_raw(b"\x00\x00", length=2), "length not multiple of 4"),
        (_raw(b"", length=4), "length mismatch"),
        (_raw(b"\x00\x00\x00\x00", length=0), "length mismatch"),
        (_raw(struct.pack("!HH", ATTR_USERNAME, 8) + b"abcd"), "attribute overflows message"),
        (_raw(struct.pack("!HH", ATTR_SOFTWARE, 5) + b"abcd"), "attribute overflows message"),
        (_raw(_attr(ATTR_FINGERPRINT, b"\x00" * 8)), "bad fingerprint length"),
        (_raw(_attr(ATTR_FINGERPRINT, b"\x00" * 4) + _attr(ATTR_SOFTWARE, b"x")), "not last"),
        (_raw(_attr(ATTR_FINGERPRINT, b"\x00" * 4)), "bad fingerprint"),
        (_raw(_attr(ATTR_MESSAGE_INTEGRITY, bytes(16))), "bad message-integrity length"),
        (
            _raw(_attr(ATTR_MESSAGE_INTEGRITY, bytes(20)) + _attr(ATTR_USERNAME, b"a:b")),
            "attribute after message-integrity",
        ),
        (
            _raw(_attr(ATTR_MESSAGE_INTEGRITY, bytes(20)) * 2),
            "attribute after message-integrity",
        ),
        (_raw(_attr(ATTR_MESSAGE_INTEGRITY_SHA256, bytes(12))), "bad message-integrity-sha256"),
        (_raw(_attr(ATTR_MESSAGE_INTEGRITY_SHA256, bytes(18))), "bad message-integrity-sha256"),
        (
            _raw(
                _attr(ATTR_MESSAGE_INTEGRITY_SHA256, bytes(32))
                + _attr(ATTR_MESSAGE_INTEGRITY, bytes(20))
            ),
            "attribute after message-integrity",
        ),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(buf, reason):
    with pytest.raises(StunError, match=reason) as caught:
        parse(buf)
    assert reason in caught.value.reason


def test_flipped_fingerprint_is_rejected():
    good = _fingerprinted(_attr(ATTR_USERNAME, b"a:b"))
    parse(good)
    bad = good[:-1] + bytes([good[-1] ^ 1])
    with pytest.raises(StunError, match="bad fingerprint"):
        parse(bad)


def test_message_integrity_sha256_may_follow_message_integrity():
    body = _attr(ATTR_MESSAGE_INTEGRITY, bytes(20)) + _attr(
        ATTR_MESSAGE_INTEGRITY_SHA256, bytes(32)
    )
    msg = parse(_fingerprinted(body))
    assert msg.has_integrity and msg.has_fingerprint


def test_unknown_attributes_are_indexed_not_rejected():
    buf = _fingerprinted(_attr(0x7777, b"xyz") + _attr(0xC001, b""))
    msg = parse(buf)
    assert [(t, n) for t, _, n in msg.attributes] == [
        (0x7777, 3),
        (0xC001, 0),
        (ATTR_FINGERPRINT, 4),
    ]
    assert bytes(msg.value(buf, 0x7777)) == b"xyz"


def test_value_is_a_view_into_the_callers_buffer_not_a_copy():
    buf = bytearray(_fingerprinted(_attr(ATTR_USERNAME, b"abc:def")))
    view = parse(buf).value(buf, ATTR_USERNAME)
    assert view.obj is buf
    buf[24] = ord("X")
    assert bytes(view) == b"Xbc:def"


def test_parse_accepts_a_memoryview_slice_of_a_receive_buffer():
    datagram = binding_request("ours:theirs", TID)
    receive_buffer = bytearray(2048)
    receive_buffer[: len(datagram)] = datagram
    view = memoryview(receive_buffer)[: len(datagram)]
    assert binding_request_username(view) == "ours:theirs"


def test_username_at_the_rfc_limit_is_accepted():
    username = "a:" + "b" * 510
    assert binding_request_username(binding_request(username, TID)) == username


@pytest.mark.parametrize(
    ("buf", "reason"),
    [
        (binding_success(TID, ("192.0.2.1", 1)), "not a binding request"),
        (build(BINDING_INDICATION, TID, [(ATTR_USERNAME, b"a:b")]), "not a binding request"),
        (build(BINDING_REQUEST, TID, [(ATTR_USERNAME, b"a:b")], fingerprint=False), "fingerprint"),
        (build(BINDING_REQUEST, TID, [(ATTR_SOFTWARE, b"x")]), "missing username"),
        (build(BINDING_REQUEST, TID, [(ATTR_USERNAME, b"")]), "bad username length"),
        (build(BINDING_REQUEST, TID, [(ATTR_USERNAME, b"a" * 513)]), "bad username length"),
        (build(BINDING_REQUEST, TID, [(ATTR_USERNAME, b"a:\xff\xfe")]), "username not utf-8"),
        (b"\x80\x60" + bytes(42), "not stun"),  # RTP
    ],
)
def test_binding_request_username_rejects_what_may_not_start_a_flow(buf, reason):
    with pytest.raises(StunError, match=reason):
        binding_request_username(buf)


@pytest.mark.parametrize(
    ("username", "ufrag"), [("ours:theirs", "ours"), ("a:b:c", "a"), ("x:y", "x")]
)
def test_server_ufrag_is_the_part_before_the_first_colon(username, ufrag):
    assert server_ufrag(username) == ufrag


@pytest.mark.parametrize("username", ["", "nocolon", ":theirs", "ours:", ":"])
def test_server_ufrag_rejects_usernames_without_two_ufrags(username):
    with pytest.raises(StunError):
        server_ufrag(username)


def test_check_integrity_is_false_without_message_integrity():
    assert not check_integrity(binding_request("a:b", TID), b"key")


def test_check_integrity_raises_on_malformed_input():
    with pytest.raises(StunError):
        check_integrity(b"garbage", b"key")


def test_stun_error_is_a_value_error():
    assert issubclass(StunError, ValueError)


# --- builders ---


def test_binding_request_round_trips_through_parse():
    buf = binding_request("srv:cli", TID, b"pw", priority=12345, controlling=True, tie_breaker=7)
    msg = parse(buf)
    assert msg.msg_type == BINDING_REQUEST and msg.transaction_id == TID
    assert msg.has_integrity and msg.has_fingerprint
    assert bytes(msg.value(buf, ATTR_USERNAME)) == b"srv:cli"
    assert bytes(msg.value(buf, ATTR_PRIORITY)) == struct.pack("!I", 12345)
    assert bytes(msg.value(buf, ATTR_ICE_CONTROLLING)) == struct.pack("!Q", 7)
    assert msg.value(buf, ATTR_ICE_CONTROLLED) is None
    assert check_integrity(buf, b"pw")
    assert not check_integrity(buf, b"other")
    assert binding_request_username(buf) == "srv:cli"


def test_binding_request_controlled_role_uses_ice_controlled():
    buf = binding_request("srv:cli", TID, controlling=False, tie_breaker=2**64 - 1)
    msg = parse(buf)
    assert bytes(msg.value(buf, ATTR_ICE_CONTROLLED)) == b"\xff" * 8
    assert not msg.has_integrity


@pytest.mark.parametrize("mapped", [("192.0.2.1", 32853), ("2001:db8::1", 1), ("::", 65535)])
def test_binding_success_round_trips_mapped_address(mapped):
    buf = binding_success(TID, mapped, integrity_key=b"pw")
    msg = parse(buf)
    assert msg.msg_type == BINDING_SUCCESS
    host, port = xor_mapped_address(buf, msg)
    assert (ipaddress.ip_address(host), port) == (ipaddress.ip_address(mapped[0]), mapped[1])
    assert check_integrity(buf, b"pw")


def test_binding_success_reproduces_the_rfc5769_xor_mapped_address_bytes():
    ipv4 = binding_success(RFC5769_TRANSACTION_ID, ("192.0.2.1", 32853))
    ipv6 = binding_success(RFC5769_TRANSACTION_ID, ("2001:db8:1234:5678:11:2233:4455:6677", 32853))
    assert ipv4[20:32] == RFC5769_2_2_IPV4_RESPONSE[36:48]
    assert ipv6[20:44] == RFC5769_2_3_IPV6_RESPONSE[36:60]


def test_build_reproduces_rfc5769_sample_request_exactly():
    attributes = [
        (ATTR_SOFTWARE, b"STUN test client"),
        (ATTR_PRIORITY, bytes.fromhex("6e0001ff")),
        (ATTR_ICE_CONTROLLED, bytes.fromhex("932ff9b151263b36")),
        (ATTR_USERNAME, b"evtj:h6vY"),
    ]
    built = build(BINDING_REQUEST, RFC5769_TRANSACTION_ID, attributes, RFC5769_PASSWORD)
    # The RFC pads USERNAME with spaces (RFC 5389 allowed any padding); build pads with zeros.
    expected = bytearray(RFC5769_2_1_REQUEST)
    expected[73:76] = b"\x00\x00\x00"
    assert built[:76] == bytes(expected[:76])
    assert check_integrity(built, RFC5769_PASSWORD)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ((0x4000, TID, []), "bad message type"),
        ((BINDING_REQUEST, TID[:11], []), "bad transaction id length"),
        ((BINDING_REQUEST, TID, [(0x10000, b"")]), "bad attribute type"),
        ((BINDING_REQUEST, TID, [(ATTR_FINGERPRINT, bytes(4))]), "computed by build"),
        ((BINDING_REQUEST, TID, [(ATTR_MESSAGE_INTEGRITY, bytes(20))]), "computed by build"),
        ((BINDING_REQUEST, TID, [(ATTR_SOFTWARE, bytes(70000))]), "too long"),
        ((BINDING_REQUEST, TID, [(ATTR_SOFTWARE, bytes(65000))] * 2), "message too long"),
    ],
)
def test_build_rejects_what_it_cannot_encode(args, reason):
    with pytest.raises(StunError, match=reason):
        build(*args)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"username": ""}, "bad username length"),
        ({"username": "x" * 513}, "bad username length"),
        ({"username": "a:b", "priority": -1}, "bad priority"),
        ({"username": "a:b", "tie_breaker": 2**64}, "bad tie breaker"),
    ],
)
def test_binding_request_rejects_bad_arguments(kwargs, reason):
    with pytest.raises(StunError, match=reason):
        binding_request(transaction_id=TID, **kwargs)


@pytest.mark.parametrize(
    ("mapped", "tid"), [(("nope", 1), TID), (("1.2.3.4", 70000), TID), (("1.2.3.4", 1), b"x")]
)
def test_binding_success_rejects_bad_arguments(mapped, tid):
    with pytest.raises(StunError):
        binding_success(tid, mapped)


def test_xor_mapped_address_rejects_bad_family_or_length():
    for value in (bytes(3), b"\x00\x03" + bytes(6), b"\x00\x01" + bytes(18)):
        buf = build(BINDING_SUCCESS, TID, [(ATTR_XOR_MAPPED_ADDRESS, value)])
        with pytest.raises(StunError, match="xor-mapped-address"):
            xor_mapped_address(buf, parse(buf))


# --- properties ---

_RESERVED = {ATTR_MESSAGE_INTEGRITY, ATTR_MESSAGE_INTEGRITY_SHA256, ATTR_FINGERPRINT}
_attributes = st.lists(
    st.tuples(
        st.integers(0, 0xFFFF).filter(lambda t: t not in _RESERVED),
        st.binary(max_size=40),
    ),
    max_size=8,
)


@settings(max_examples=300)
@given(
    msg_type=st.integers(0, 0x3FFF),
    tid=st.binary(min_size=12, max_size=12),
    attributes=_attributes,
    key=st.none() | st.binary(min_size=1, max_size=32),
    fingerprint=st.booleans(),
)
def test_build_then_parse_round_trips(msg_type, tid, attributes, key, fingerprint):
    buf = build(msg_type, tid, attributes, key, fingerprint)
    msg = parse(buf)
    assert (msg.msg_type, msg.transaction_id) == (msg_type, tid)
    assert (msg.has_integrity, msg.has_fingerprint) == (key is not None, fingerprint)
    values = [(t, bytes(buf[o : o + n])) for t, o, n in msg.attributes if t not in _RESERVED]
    assert values == attributes
    if key is not None:
        assert check_integrity(buf, key)


def _stunlike_body() -> st.SearchStrategy[bytes]:
    """A valid header around random attribute bytes, so the attribute walk gets exercised."""
    return st.tuples(st.integers(0, 0x3FFF), st.binary(max_size=120)).map(
        lambda t: _raw(t[1] + bytes(-len(t[1]) % 4), msg_type=t[0])
    )


def _flip(vector: bytes, index: int, mask: int) -> bytes:
    i = index % len(vector)
    return vector[:i] + bytes([vector[i] ^ mask]) + vector[i + 1 :]


def _mutated_vector() -> st.SearchStrategy[bytes]:
    return st.builds(
        _flip, st.sampled_from(list(VECTORS.values())), st.integers(0, 115), st.integers(1, 255)
    )


@settings(max_examples=500)
@given(st.binary(max_size=1500) | _stunlike_body() | _mutated_vector())
def test_arbitrary_bytes_raise_only_stun_error(buf):
    for function in (parse, binding_request_username):
        with contextlib.suppress(StunError):
            function(buf)


def test_module_exports_the_names_other_packages_use():
    for name in (
        "BINDING_INDICATION",
        "ATTR_USE_CANDIDATE",
        "ATTR_XOR_MAPPED_ADDRESS",
        "FINGERPRINT_XOR",
        "HEADER_LEN",
        "MAX_USERNAME_LEN",
        "StunMessage",
    ):
        assert hasattr(stun, name)
    assert stun.MAX_USERNAME_LEN == 513
    assert stun.ATTR_USE_CANDIDATE == 0x0025
