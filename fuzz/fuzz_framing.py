"""Target ``framing``: the RFC 4571 decoder of ICE over TCP (relay.framing) and the stall clock
of a connection (relay.tcpconns.TcpConn.feed).

An input is a frame limit (its first byte), read sizes (the next eight) and a byte stream (the
rest). The stream fed whole and fed in reads of those sizes must give the same frames and end
the same way: no error, or a FramingError with the same reason after the same frames; nothing
else may be raised. Between reads the decoder holds less than one frame and its length field,
and a connection's stall clock runs exactly while a frame is incomplete.
"""

from __future__ import annotations

import atheris

from fuzz.harness import main, require

with atheris.instrument_imports(include=["relay.framing", "relay.tcpconns"]):
    from relay.framing import LENGTH_BYTES, FrameDecoder, FramingError
    from relay.tcpconns import TcpConn


def reference(stream: bytes, limit: int) -> tuple[list[bytes], str | None]:
    """The frames of a whole stream and how it ends, the plain way."""
    frames, at = [], 0
    while len(stream) - at >= LENGTH_BYTES:
        n = int.from_bytes(stream[at : at + LENGTH_BYTES], "big")
        if n == 0:
            return frames, "zero_length"
        if n > limit:
            return frames, "oversize"
        if len(stream) - at - LENGTH_BYTES < n:
            break
        frames.append(stream[at + LENGTH_BYTES : at + LENGTH_BYTES + n])
        at += LENGTH_BYTES + n
    return frames, None


def test_one_input(data: bytes) -> None:
    if len(data) < 9:
        return
    limit = 20 + data[0] * 8
    sizes = [1 + b for b in data[1:9]]
    stream = data[9:]
    want, want_error = reference(stream, limit)
    conn = TcpConn(1, b"p", 0, limit)
    got: list[bytes] = []
    error = None
    at, turn = 0, 0
    while at < len(stream):
        size = sizes[turn % len(sizes)]
        chunk = stream[at : at + size]
        at += size
        turn += 1
        try:
            got += conn.feed(memoryview(chunk) if turn % 2 else chunk, turn)
        except FramingError as exc:
            got += exc.frames
            error = exc.reason
            break
        buffered = conn.decoder.buffered
        require(buffered < LENGTH_BYTES + limit, "the decoder holds more than one frame")
        require((conn.partial_since is None) == (buffered == 0), "stall clock without a half")
    require(error == want_error, "fed in reads, the stream ends otherwise than whole")
    require(got == want, "fed in reads, the frames differ from the whole stream's")
    whole = FrameDecoder(limit)
    try:
        require(whole.feed(stream) == want, "fed whole, the frames differ")
    except FramingError as exc:
        require((exc.frames, exc.reason) == (want, want_error), "fed whole, another error")


if __name__ == "__main__":
    main(test_one_input)
