"""Tests for common.packet_class: RFC 7983 demultiplexing by first byte."""

import pytest

from common.packet_class import CLASS_BY_FIRST_BYTE, PacketClass, PacketClassError, classify

EXPECTED_RANGES = [
    (0, 3, PacketClass.STUN),
    (4, 15, PacketClass.UNKNOWN),
    (16, 19, PacketClass.ZRTP),
    (20, 63, PacketClass.DTLS),
    (64, 79, PacketClass.TURN_CHANNEL),
    (80, 127, PacketClass.UNKNOWN),
    (128, 191, PacketClass.RTP),
    (192, 254, PacketClass.UNKNOWN),
    (255, 255, PacketClass.ENCAP),
]


def test_enum_values_are_stable_because_other_code_stores_them_as_ints():
    assert [(c.name, c.value) for c in PacketClass] == [
        ("UNKNOWN", 0),
        ("STUN", 1),
        ("DTLS", 2),
        ("RTP", 3),
        ("ENCAP", 4),
        ("ZRTP", 5),
        ("TURN_CHANNEL", 6),
    ]


def test_table_has_one_entry_per_byte_value():
    assert isinstance(CLASS_BY_FIRST_BYTE, bytes)
    assert len(CLASS_BY_FIRST_BYTE) == 256


@pytest.mark.parametrize(("first", "last", "expected"), EXPECTED_RANGES)
def test_every_byte_in_a_range_gets_that_class(first, last, expected):
    for b in range(first, last + 1):
        assert classify(b) is expected
        assert CLASS_BY_FIRST_BYTE[b] == expected


def test_ranges_cover_all_byte_values_exactly_once():
    covered = [b for first, last, _ in EXPECTED_RANGES for b in range(first, last + 1)]
    assert covered == list(range(256))


def test_classify_agrees_with_table_for_every_byte():
    assert all(classify(b) == CLASS_BY_FIRST_BYTE[b] for b in range(256))


@pytest.mark.parametrize("bad", [-1, 256, 1000])
def test_out_of_range_first_byte_is_rejected(bad):
    with pytest.raises(PacketClassError):
        classify(bad)


def test_packet_class_error_is_a_value_error():
    assert issubclass(PacketClassError, ValueError)


def test_real_packets_classify_as_expected():
    stun_binding_request = bytes.fromhex("00010000")
    dtls_client_hello = bytes.fromhex("16fefd")
    rtp_v2 = bytes.fromhex("8060")
    assert classify(stun_binding_request[0]) is PacketClass.STUN
    assert classify(dtls_client_hello[0]) is PacketClass.DTLS
    assert classify(rtp_v2[0]) is PacketClass.RTP
