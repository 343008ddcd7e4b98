"""Tests for common.encap: the relay <-> transceiver encapsulation header."""

import contextlib
import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.encap import (
    ADDRESS_LEN,
    ADDRESS_OFFSET,
    DEFAULT_HOP_LIMIT,
    FLAGS_OFFSET,
    HEADER_LEN,
    HEADER_LEN_V4,
    HEADER_LEN_V6,
    HOP_LIMIT_OFFSET,
    MAGIC,
    MAGIC_OFFSET,
    PORT_LEN,
    PORT_OFFSET,
    VERSION,
    VERSION_FAMILY,
    VERSION_FAMILY_OFFSET,
    EncapError,
    EncapHeader,
    decode_header,
    decode_packed,
    encapsulate,
    encode_header,
    encode_header_packed,
)
from common.packet_class import PacketClass, classify


def test_ipv4_header_has_the_documented_layout():
    assert encode_header("192.0.2.1", 32853) == bytes(
        [0xFF, 0x14, DEFAULT_HOP_LIMIT, 0x00, 0x80, 0x55, 192, 0, 2, 1]
    )


def test_ipv6_header_has_the_documented_layout():
    header = encode_header("2001:db8::1", 443, hop_limit=2, flags=0x80)
    assert (
        header
        == bytes([0xFF, 0x16, 2, 0x80, 0x01, 0xBB]) + ipaddress.ip_address("2001:db8::1").packed
    )


def test_constants_match_the_layout():
    assert (MAGIC, VERSION) == (0xFF, 1)
    assert len(encode_header("10.0.0.1", 1)) == HEADER_LEN_V4 == 10
    assert len(encode_header("::1", 1)) == HEADER_LEN_V6 == 22


@pytest.mark.parametrize(("family", "ip"), [(4, "192.0.2.1"), (6, "2001:db8::1")])
def test_every_field_sits_at_its_exported_offset(family, ip):
    """The offsets the relay derives its header checks and copy plan from are the encoder's."""
    packed = ipaddress.ip_address(ip).packed
    header = encode_header_packed(family, packed, 0x1234, hop_limit=7, flags=9)
    assert len(header) == HEADER_LEN[family] == ADDRESS_OFFSET + ADDRESS_LEN[family]
    assert header[MAGIC_OFFSET] == MAGIC
    assert header[VERSION_FAMILY_OFFSET] == VERSION_FAMILY[family] == (VERSION << 4) | family
    assert header[HOP_LIMIT_OFFSET] == 7
    assert header[FLAGS_OFFSET] == 9
    assert header[PORT_OFFSET : PORT_OFFSET + PORT_LEN] == b"\x12\x34"
    assert header[ADDRESS_OFFSET:] == packed


def test_encapsulated_datagrams_classify_as_encap_not_as_webrtc_traffic():
    assert classify(encapsulate(b"\x00\x01", "10.0.0.1", 5000)[0]) is PacketClass.ENCAP


@pytest.mark.parametrize(
    ("ip", "family", "header_len"), [("198.51.100.7", 4, 10), ("2001:db8::42", 6, 22)]
)
def test_decode_header_returns_the_client_address_and_payload_offset(ip, family, header_len):
    datagram = encapsulate(b"payload", ip, 50000, hop_limit=3, flags=1)
    header, offset = decode_header(datagram)
    assert header == EncapHeader(family, 3, 1, ip, 50000)
    assert header.header_len == header_len == offset
    assert datagram[offset:] == b"payload"


def test_decode_packed_returns_raw_address_without_parsing_it():
    datagram = encapsulate(b"x", "203.0.113.9", 1234, hop_limit=7)
    assert decode_packed(datagram) == (4, bytes([203, 0, 113, 9]), 1234, 7, HEADER_LEN_V4)


def test_decode_accepts_memoryview_of_a_larger_receive_buffer():
    receive_buffer = bytearray(2048)
    datagram = encapsulate(b"hello", "2001:db8::5", 9)
    receive_buffer[: len(datagram)] = datagram
    view = memoryview(receive_buffer)[: len(datagram)]
    family, packed_ip, port, hop_limit, offset = decode_packed(view)
    assert (family, port, hop_limit) == (6, 9, DEFAULT_HOP_LIMIT)
    assert packed_ip == ipaddress.ip_address("2001:db8::5").packed
    assert bytes(view[offset:]) == b"hello"


def test_empty_payload_is_allowed():
    header = encode_header("10.1.2.3", 80)
    assert decode_packed(header)[4] == len(header)


def test_encode_header_packed_matches_encode_header():
    for ip in ("10.9.8.7", "fe80::1"):
        address = ipaddress.ip_address(ip)
        assert encode_header_packed(address.version, address.packed, 4000, 1, 2) == encode_header(
            ip, 4000, 1, 2
        )


@pytest.mark.parametrize(
    ("buf", "reason"),
    [
        (b"", "too short"),
        (b"\xff\x14\x04\x00\x00", "too short"),
        (b"\xfe\x14\x04\x00\x00\x01\x0a\x00\x00\x01", "bad magic"),
        (b"\xff\x24\x04\x00\x00\x01\x0a\x00\x00\x01", "bad version"),
        (b"\xff\x15\x04\x00\x00\x01\x0a\x00\x00\x01", "bad family"),
        (b"\xff\x14\x04\x00\x00\x01\x0a\x00\x00", "too short"),
        (b"\xff\x16\x04\x00\x00\x01" + bytes(15), "too short"),
    ],
)
def test_malformed_headers_are_rejected_with_a_reason(buf, reason):
    with pytest.raises(EncapError, match=reason):
        decode_packed(buf)
    with pytest.raises(EncapError, match=reason):
        decode_header(buf)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"client_ip": "not-an-ip", "client_port": 1},
        {"client_ip": "10.0.0.1", "client_port": 65536},
        {"client_ip": "10.0.0.1", "client_port": -1},
        {"client_ip": "10.0.0.1", "client_port": 1, "hop_limit": 256},
        {"client_ip": "10.0.0.1", "client_port": 1, "flags": -1},
    ],
)
def test_encode_header_rejects_values_that_do_not_fit(kwargs):
    with pytest.raises(EncapError):
        encode_header(**kwargs)


@pytest.mark.parametrize(
    ("family", "packed_ip"), [(4, bytes(16)), (6, bytes(4)), (5, bytes(4)), (0, b"")]
)
def test_encode_header_packed_rejects_family_and_address_length_mismatch(family, packed_ip):
    with pytest.raises(EncapError):
        encode_header_packed(family, packed_ip, 1)


def test_encap_error_is_a_value_error():
    assert issubclass(EncapError, ValueError)


@settings(max_examples=300)
@given(
    address=st.ip_addresses(),
    port=st.integers(0, 65535),
    hop_limit=st.integers(0, 255),
    flags=st.integers(0, 255),
    payload=st.binary(max_size=64),
)
def test_any_address_round_trips(address, port, hop_limit, flags, payload):
    datagram = encapsulate(payload, str(address), port, hop_limit, flags)
    header, offset = decode_header(datagram)
    assert ipaddress.ip_address(header.client_ip) == address
    assert (header.family, header.client_port) == (address.version, port)
    assert (header.hop_limit, header.flags) == (hop_limit, flags)
    assert datagram[offset:] == payload
    assert decode_packed(datagram) == (address.version, address.packed, port, hop_limit, offset)


@settings(max_examples=500)
@given(st.binary(max_size=64) | st.binary(max_size=30).map(lambda b: b"\xff" + b))
def test_arbitrary_bytes_raise_only_encap_error(buf):
    with contextlib.suppress(EncapError):
        decode_header(buf)
    with contextlib.suppress(EncapError):
        decode_packed(buf)
