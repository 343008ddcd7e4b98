"""RFC 4571 framing: each datagram of a stream is a 2-byte big-endian length, then that many bytes.

ICE over TCP (RFC 6544 section 3) carries STUN, DTLS and SRTP this way, one frame per datagram.
Sans-I/O, in the manner of h11: the decoder is fed whatever bytes a stream delivered and returns
the complete frames; it never touches a socket, so a TLS transport (docs/relay.md, "ICE over
TCP") can feed it the bytes it decrypted just as the plain TCP connection feeds it the bytes it
read. One error type, ``FramingError``, whose ``reason`` is the counter label.

Bounds: a frame longer than ``max_frame_bytes`` is refused as soon as its length is read (the
decoder never buffers more than one frame's worth beyond what it returns), and a zero length
is refused: RFC 4571 allows it, but no STUN, DTLS or RTP datagram is empty, so on this port it
can only be an attacker's keep-alive that costs us a wake-up per two bytes.
"""

from __future__ import annotations

LENGTH_BYTES = 2
MAX_RFC4571_FRAME = 0xFFFF

ZERO_LENGTH = "zero_length"
OVERSIZE = "oversize"


class FramingError(ValueError):
    """The stream broke the framing; ``reason`` names how (ZERO_LENGTH or OVERSIZE), and
    ``frames`` are those the same feed completed before the bad length, in order."""

    def __init__(self, reason: str, frames: list[bytes] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.frames = frames or []


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """One datagram as a frame: its length, then the datagram."""
    n = len(payload)
    if not 0 < n <= MAX_RFC4571_FRAME:
        raise FramingError(ZERO_LENGTH if n == 0 else OVERSIZE)
    return n.to_bytes(LENGTH_BYTES, "big") + bytes(payload)


class FrameDecoder:
    """Frames out of a byte stream; keeps at most one incomplete frame between feeds."""

    __slots__ = ("_buf", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        if not 0 < max_frame_bytes <= MAX_RFC4571_FRAME:
            raise ValueError(f"max_frame_bytes must be 1..{MAX_RFC4571_FRAME}")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame (its length field included) held since the last feed."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """The frames ``data`` completes, in order; raises FramingError at the first bad length
        (with the frames before it: however a stream is split into feeds, the same frames come
        out before the error).

        After an error the decoder's state is undefined: the connection is to be closed.
        """
        return self.take(data, len(data) + 1)[0]

    def take(
        self, data: bytes | bytearray | memoryview, max_frames: int
    ) -> tuple[list[bytes], int]:
        """At most ``max_frames`` of the frames ``data`` completes, and how many bytes of
        ``data`` were taken for them. Below the cap every byte is taken (an incomplete last
        frame is buffered); at the cap taking stops right after the last frame returned, and
        the rest of ``data`` is to be fed again later (the I/O side peeks, then reads only what
        was taken: the rest stays in the kernel, whose window then throttles the sender).
        Errors as ``feed``'s.
        """
        buf = self._buf
        held = len(buf)
        if held:
            buf += data
            view: bytes | bytearray | memoryview = buf
        else:
            view = data  # the common case (whole frames per read): no copy into the buffer
        frames: list[bytes] = []
        at, end, limit = 0, len(view), self.max_frame_bytes
        while end - at >= LENGTH_BYTES:
            if len(frames) >= max_frames:
                if held:  # a frame was completed, so ``at`` is past what was held
                    buf.clear()
                return frames, at - held
            n = (view[at] << 8) | view[at + 1]
            if n == 0:
                raise FramingError(ZERO_LENGTH, frames)
            if n > limit:
                raise FramingError(OVERSIZE, frames)
            if end - at - LENGTH_BYTES < n:
                break
            at += LENGTH_BYTES
            frames.append(bytes(view[at : at + n]))
            at += n
        if held:
            del buf[:at]
        elif at < end:
            buf += view[at:end]
        return frames, len(data)
