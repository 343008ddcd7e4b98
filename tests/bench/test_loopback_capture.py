"""The realtime benchmark's loopback capture with bytes: RTP keys read in clear at each hop,
a WebSocket reassembled across segments (HTTP upgrade skipped, client frames unmasked,
permessage-deflate inflated), the session and the sound onsets it carries; and, where this
process may capture (root), the kernel filter passing only the outgoing copy of our ports."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
import zlib

import pytest

from bench.loopback_capture import (
    C2R,
    FRAMINGS,
    H2_PREFACE,
    R2T,
    WIRES,
    Capture,
    CaptureThread,
    Ports,
)
from transceiver.backends.media_streams.g711 import pcm16_to_ulaw

PORTS = Ports(relay=40001, media=40002, agent=40003)
LOUD = struct.pack("<480h", *([9000, -9000] * 240))
QUIET = bytes(960)


def ip_frame(proto: int, src: int, dst: int, payload: bytes, seq: int = 0) -> bytes:
    if proto == 17:
        l4 = struct.pack("!HHHH", src, dst, 8 + len(payload), 0)
    else:
        l4 = struct.pack("!HHIIBBHHH", src, dst, seq, 0, 5 << 4, 0x18, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4) + len(payload), 0, 0, 64, proto, 0,
                     bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))  # fmt: skip
    return bytes(12) + b"\x08\x00" + ip + l4 + payload


def rtp(ssrc: int, seq: int) -> bytes:
    return bytes([0x80, 111]) + struct.pack("!HII", seq, 0, ssrc) + b"srtp payload"


def client_frame(text: str, compressor: zlib._Compress) -> bytes:
    body = compressor.compress(text.encode()) + compressor.flush(zlib.Z_SYNC_FLUSH)
    body = body[:-4]  # RFC 7692: the tail 00 00 ff ff is left off
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(body))
    return bytes([0xC1, 0x80 | 126]) + struct.pack("!H", len(body)) + mask + masked


def masked_frame(opcode: int, body: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(body))
    return bytes([0x80 | opcode, 0x80 | 126]) + struct.pack("!H", len(body)) + mask + masked


def server_frame(opcode: int, body: bytes) -> bytes:
    return bytes([0x80 | opcode, 126]) + struct.pack("!H", len(body)) + body


UPGRADE = b"GET / HTTP/1.1\r\n\r\n"
SWITCHED = b"HTTP/1.1 101 Switching Protocols\r\n\r\n"


def append(pcm: bytes) -> str:
    return json.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
    )


def test_rtp_is_keyed_per_hop_and_rtcp_and_others_are_left_out() -> None:
    capture = Capture(PORTS)
    capture.feed(1.0, ip_frame(17, 50000, PORTS.relay, rtp(7, 100)))
    capture.feed(1.1, ip_frame(17, 41000, PORTS.media, b"\xff" + bytes(9) + rtp(7, 100)))
    capture.feed(1.2, ip_frame(17, 50000, PORTS.relay, bytes([0x80, 200]) + bytes(30)))  # RTCP
    capture.feed(1.3, ip_frame(17, 50000, 40999, rtp(7, 101)))  # not ours
    assert capture.rtp == {(C2R, 7, 100): 1.0, (R2T, 7, 100): 1.1}


def test_a_websocket_is_read_across_segments_unmasked_and_inflated() -> None:
    capture = Capture(PORTS)
    up = b"GET /v1/realtime HTTP/1.1\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    frames = [client_frame(append(pcm), compressor) for pcm in (QUIET, LOUD, LOUD, QUIET, LOUD)]
    stream = up + b"".join(frames)
    cut = len(up) + len(frames[0]) + 7  # the second frame split across two segments
    capture.feed(2.0, ip_frame(6, 51000, PORTS.agent, stream[:cut], seq=1000))
    capture.feed(2.1, ip_frame(6, 51000, PORTS.agent, stream[cut:], seq=1000 + cut))
    capture.feed(2.2, ip_frame(6, 51000, PORTS.agent, stream[cut:], seq=1000 + cut))  # again
    down = b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
    created = json.dumps({"type": "session.created", "event_id": "event_abcd1234_1"}).encode()
    down += bytes([0x81, len(created)]) + created
    capture.feed(1.9, ip_frame(6, PORTS.agent, 51000, down, seq=5))
    (connection,) = capture.connections.values()
    assert connection.session == "abcd1234"
    assert connection.appends == [2.1, 2.1], "the loud after quiet, twice, in the second segment"


def test_the_native_protocol_names_its_session_by_session_start_and_times_binary_audio() -> None:
    capture = Capture(PORTS, WIRES["websocket"])
    start = json.dumps({"type": "session.start", "session_id": "ab" * 16}).encode()
    up = UPGRADE + masked_frame(1, start)
    up += b"".join(masked_frame(2, pcm) for pcm in (QUIET, LOUD, QUIET))
    capture.feed(1.0, ip_frame(6, 51000, PORTS.agent, up, seq=1))
    down = SWITCHED + b"".join(server_frame(2, pcm) for pcm in (LOUD, LOUD))
    down += server_frame(1, b'{"type": "echo", "event": {"audio": "loud"}}')
    capture.feed(1.5, ip_frame(6, PORTS.agent, 51000, down, seq=1))
    (connection,) = capture.connections.values()
    assert connection.session == "ab" * 16
    assert connection.appends == [1.0] and connection.deltas == [1.5]


def test_media_streams_name_the_call_by_start_and_time_mu_law_media_both_ways() -> None:
    capture = Capture(PORTS, WIRES["media-streams"])

    def media(pcm: bytes) -> bytes:
        payload = base64.b64encode(pcm16_to_ulaw(pcm)).decode()
        return json.dumps({"event": "media", "media": {"payload": payload}}).encode()

    start = {"event": "start", "start": {"callSid": "CA" + "cd" * 16}, "streamSid": "MZ1"}
    up = UPGRADE + masked_frame(1, json.dumps(start).encode())
    up += b"".join(masked_frame(1, media(pcm)) for pcm in (LOUD, QUIET, LOUD))
    capture.feed(2.0, ip_frame(6, 52000, PORTS.agent, up, seq=9))
    bad = json.dumps({"event": "media", "media": {"payload": "not base64!"}}).encode()
    down = SWITCHED + server_frame(1, bad) + server_frame(1, media(LOUD))
    capture.feed(2.5, ip_frame(6, PORTS.agent, 52000, down, seq=9))
    (connection,) = capture.connections.values()
    assert connection.session == "cd" * 16
    assert connection.appends == [2.0, 2.0] and connection.deltas == [2.5]


def h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """An HTTP/2 frame (RFC 9113 4.1): 24-bit length, type, flags, 31-bit stream id."""
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def grpc_message(message: object) -> bytes:
    """A gRPC length-prefixed message: not compressed, 4-byte big-endian length, protobuf."""
    body = message.SerializeToString()  # type: ignore[attr-defined]
    return b"\0" + struct.pack("!I", len(body)) + body


SETTINGS, HEADERS, WINDOW_UPDATE = 0x4, 0x1, 0x8
END_STREAM, END_HEADERS, PADDED = 0x1, 0x4, 0x8


def test_grpc_is_read_from_http2_data_frames_per_stream_padded_and_split() -> None:
    pb = pytest.importorskip("transceiver.backends.grpc.v1.backend_pb2")
    capture = Capture(PORTS, WIRES["grpc"], FRAMINGS["grpc"])
    start = pb.ToBackend(start=pb.SessionStart(session_id="ef" * 16, transceiver_id=3))
    quiet, loud = (grpc_message(pb.ToBackend(pcm16=pb.Pcm16(pcm=pcm))) for pcm in (QUIET, LOUD))
    # The client: preface, SETTINGS, the stream's HEADERS (HPACK, not read), then DATA: the
    # start and a quiet frame in one DATA frame, a loud one split over two (the second padded),
    # a WINDOW_UPDATE between them; a second loud frame, then a quiet one, then END_STREAM.
    up = H2_PREFACE + h2_frame(SETTINGS, 0, 0, b"") + h2_frame(HEADERS, END_HEADERS, 1, b"\x83")
    up += h2_frame(0, 0, 1, grpc_message(start) + quiet)
    up += h2_frame(0, 0, 1, loud[:100]) + h2_frame(WINDOW_UPDATE, 0, 0, struct.pack("!I", 1 << 16))
    up += h2_frame(0, PADDED, 1, bytes([7]) + loud[100:] + bytes(7))
    first, second = up[:500], up[500:]
    capture.feed(3.0, ip_frame(6, 53000, PORTS.agent, first, seq=100))
    capture.feed(3.1, ip_frame(6, 53000, PORTS.agent, second, seq=100 + len(first)))
    capture.feed(3.2, ip_frame(6, 53000, PORTS.agent, second, seq=100 + len(first)))  # again
    more = h2_frame(0, 0, 1, quiet) + h2_frame(0, 0, 1, loud) + h2_frame(0, END_STREAM, 1, quiet)
    capture.feed(4.0, ip_frame(6, 53000, PORTS.agent, more, seq=100 + len(up)))
    # The server: no preface; SETTINGS, HEADERS, the accept, an undecodable message, then the
    # beep in one message of 5 frames.
    accept = pb.FromBackend(
        accept=pb.SessionAccept(audio=pb.AudioFormat(encoding=1, sample_rate=24000))
    )
    beep = pb.FromBackend(pcm16=pb.Pcm16(pcm=LOUD * 5))
    junk = b"\0" + struct.pack("!I", 3) + b"\xff\xff\xff"
    down = h2_frame(SETTINGS, 0, 0, b"") + h2_frame(HEADERS, END_HEADERS, 1, b"\x88")
    down += h2_frame(0, 0, 1, grpc_message(accept) + junk + grpc_message(beep))
    capture.feed(3.5, ip_frame(6, PORTS.agent, 53000, down, seq=1))
    (connection,) = capture.connections.values()
    assert connection.session == "ef" * 16
    assert connection.appends == [3.1, 4.0], "the loud after quiet, where each was completed"
    assert connection.deltas == [3.5]
    assert connection.up.bad_frames == 0 and not connection.up.streams, "END_STREAM: forgotten"


def test_http2_without_its_preface_or_with_bad_padding_is_counted_not_fatal() -> None:
    pb = pytest.importorskip("transceiver.backends.grpc.v1.backend_pb2")
    capture = Capture(PORTS, WIRES["grpc"], FRAMINGS["grpc"])
    loud = grpc_message(pb.ToBackend(pcm16=pb.Pcm16(pcm=LOUD)))
    not_h2 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + h2_frame(0, 0, 1, loud)
    capture.feed(5.0, ip_frame(6, 54000, PORTS.agent, not_h2, seq=1))
    capture.feed(5.1, ip_frame(6, 54000, PORTS.agent, h2_frame(0, 0, 1, loud), seq=1 + len(not_h2)))
    up = H2_PREFACE + h2_frame(0, PADDED, 1, bytes([200]) + b"short")  # padding past its end
    up += h2_frame(0, 0, 1, loud)
    capture.feed(6.0, ip_frame(6, 55000, PORTS.agent, up, seq=1))
    ignored, read = capture.connections[54000], capture.connections[55000]
    assert ignored.up.bad_frames == 1 and ignored.appends == [] and not ignored.up.buffer
    assert read.up.bad_frames == 1 and read.appends == [6.0]


@pytest.mark.skipif(os.geteuid() != 0, reason="capturing on lo needs root (or CAP_NET_RAW)")
def test_the_kernel_passes_only_our_ports_and_each_packet_once() -> None:
    capture = Capture(PORTS)
    seen: list[int] = []
    capture.feed = lambda t, frame: seen.append(struct.unpack_from("!H", frame, 36)[0])
    thread = CaptureThread(capture)
    assert thread.start(), thread.error
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for port in (PORTS.relay, 40999, PORTS.media, PORTS.agent):
                s.sendto(b"x" * 20, ("127.0.0.1", port))
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        thread.stop()
    assert seen == [PORTS.relay, PORTS.media, PORTS.agent]
