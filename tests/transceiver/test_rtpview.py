"""transceiver.call.rtpview reads what aiortc's parser reads, and refuses what it refuses."""

from __future__ import annotations

import random

import pytest
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import HeaderExtensions, HeaderExtensionsMap, RtpPacket

from transceiver.call.rtpview import RtpView, parse

FIELDS = RtpView.__slots__


def _extensions() -> HeaderExtensionsMap:
    extensions = HeaderExtensionsMap()
    params = RTCRtpParameters(
        headerExtensions=[
            RTCRtpHeaderExtensionParameters(1, "urn:ietf:params:rtp-hdrext:ssrc-audio-level"),
            RTCRtpHeaderExtensionParameters(4, "urn:ietf:params:rtp-hdrext:sdes:mid"),
        ]
    )
    extensions.configure(params)
    return extensions


def _packet(csrcs: int = 0, with_extensions: bool = True, padding: int = 0) -> bytes:
    packet = RtpPacket(
        payload_type=111, marker=1, sequence_number=65535, timestamp=0xFFFFFFF0, ssrc=0x01020304
    )
    packet.csrc = list(range(1, csrcs + 1))
    if with_extensions:
        packet.extensions.audio_level = (True, 40)
        packet.extensions.mid = "0"
    packet.payload = bytes(range(60))
    packet.padding_size = padding
    return packet.serialize(_extensions())


class _Unread(HeaderExtensionsMap):
    """aiortc's parser with the extension elements left unread, as rtpview leaves them: what
    is inside the extension block (its elements, a MID's UTF-8) is nobody's concern here."""

    def get(self, profile: int, data: bytes) -> HeaderExtensions:
        return HeaderExtensions()


def _same_verdict(data: bytes) -> None:
    try:
        expected = RtpPacket.parse(data, _Unread())
    except ValueError:
        with pytest.raises(ValueError):
            parse(data)
        return
    view = parse(data)
    assert {k: getattr(view, k) for k in FIELDS} == {k: getattr(expected, k) for k in FIELDS}


@pytest.mark.parametrize("csrcs", [0, 1, 15])
@pytest.mark.parametrize("with_extensions", [False, True])
@pytest.mark.parametrize("padding", [0, 1, 7])
def test_reads_what_aiortc_reads(csrcs: int, with_extensions: bool, padding: int) -> None:
    data = _packet(csrcs, with_extensions, padding)
    view = parse(data)
    assert view.payload == bytes(range(60))
    assert (view.payload_type, view.marker, view.sequence_number) == (111, 1, 65535)
    assert (view.timestamp, view.ssrc) == (0xFFFFFFF0, 0x01020304)
    _same_verdict(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x80" * 11,  # short of the fixed header
        b"\x40" + bytes(20),  # version 1
        b"\x82" + bytes(11) + bytes(4),  # two CSRCs announced, one there
        b"\x90" + bytes(11) + b"\xbe",  # extension header cut
        b"\x90" + bytes(11) + b"\xbe\xde\x00\x02" + bytes(4),  # extension body cut
        b"\xa0" + bytes(11) + b"\x00",  # padding length 0
        b"\xa0" + bytes(11) + b"\x05",  # padding longer than the payload
        b"\xa0" + bytes(11) + b"\x01",  # padding is the whole payload: empty payload, valid
    ],
)
def test_refuses_what_aiortc_refuses(data: bytes) -> None:
    _same_verdict(data)


def test_random_mutations_agree_with_aiortc() -> None:
    rng = random.Random(7)
    seeds = [_packet(c, x, p) for c in (0, 2) for x in (False, True) for p in (0, 3)]
    for _ in range(4000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            if choice < 0.5 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif choice < 0.8:
                del data[rng.randrange(len(data) + 1) :]
            elif data:
                data[0] = rng.choice((0x80, 0x90, 0xA0, 0xB0, 0xBF, 0x8F))
        _same_verdict(bytes(data))
