"""Classify a UDP datagram by its first byte, as RFC 7983 (updated by RFC 9443) demultiplexes.

The relay and the transceiver both receive STUN, DTLS and SRTP/SRTCP on one port and must tell them
apart before parsing anything. The relay's admission (relay.admission: only STUN may start a flow)
indexes ``CLASS_BY_FIRST_BYTE`` directly, once per packet of a client without a flow; a confirmed
flow's packets are forwarded unread and never classified. ``classify`` is the readable form, with
a range check, for everything else.
"""

import enum

__all__ = ["CLASS_BY_FIRST_BYTE", "PacketClass", "PacketClassError", "classify"]


class PacketClassError(ValueError):
    """A value that cannot be the first byte of a datagram (outside 0..255)."""


class PacketClass(enum.IntEnum):
    """What a datagram is, judged by its first byte alone."""

    UNKNOWN = 0
    STUN = 1
    DTLS = 2
    RTP = 3  # RTP and RTCP (SRTP/SRTCP): RFC 5761 separates them later, by payload type
    ENCAP = 4  # 0xFF: rtcedge relay <-> transceiver encapsulation (common.encap)
    ZRTP = 5
    TURN_CHANNEL = 6


def _build_table() -> bytes:
    table = bytearray(256)  # all UNKNOWN
    ranges = (
        (0, 3, PacketClass.STUN),
        (16, 19, PacketClass.ZRTP),
        (20, 63, PacketClass.DTLS),
        (64, 79, PacketClass.TURN_CHANNEL),
        (128, 191, PacketClass.RTP),
        # RFC 9443 gives 192..255 to QUIC, which WebRTC never multiplexes on a media port; we claim
        # only 255 for our encapsulation and leave 192..254 UNKNOWN.
        (255, 255, PacketClass.ENCAP),
    )
    for first, last, cls in ranges:
        for b in range(first, last + 1):
            table[b] = cls
    return bytes(table)


CLASS_BY_FIRST_BYTE: bytes = _build_table()
"""``CLASS_BY_FIRST_BYTE[b]`` is the ``PacketClass`` value (an int) for first byte ``b``."""

_CLASSES: tuple[PacketClass, ...] = tuple(PacketClass(v) for v in CLASS_BY_FIRST_BYTE)


def classify(first_byte: int) -> PacketClass:
    """Return the class of a datagram whose first byte is ``first_byte``."""
    if not 0 <= first_byte <= 255:
        raise PacketClassError(f"first byte out of range: {first_byte!r}")
    return _CLASSES[first_byte]
