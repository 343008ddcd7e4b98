"""The grpc backend's protocol core, sans-I/O: bytes in, actions out (``protocol.BackendCall``),
and the accept a call starts with. No sockets, no grpc: protobuf messages and numbers."""

from __future__ import annotations

import pytest

pytest.importorskip("google.protobuf", reason="the grpc extra: pip install -e '.[grpc]'")

from transceiver.backend import OpusFrame, SessionInfo
from transceiver.backends.grpc import CallLimits
from transceiver.backends.grpc.protocol import (
    METHOD,
    Accepted,
    BackendCall,
    Hangup,
    OpusOut,
    Problem,
    ProtocolError,
    accepted_format,
    start_message,
)
from transceiver.backends.grpc.v1 import backend_pb2 as pb
from transceiver.backends.realtime.conversation import AudioOut, Clear, End, ToCaller

OPUS_20MS = bytes([0xFC, 0xFF, 0xFE])


def accept(encoding: int, rate: int) -> bytes:
    audio = pb.AudioFormat(encoding=encoding, sample_rate=rate)
    return pb.FromBackend(accept=pb.SessionAccept(audio=audio)).SerializeToString()


def test_the_method_is_the_protos():
    method = pb.DESCRIPTOR.services_by_name["Backend"].methods_by_name["Call"]
    assert (
        METHOD
        == "/rtcedge.backend.v1.Backend/Call"
        == "/" + method.full_name.replace(".Call", "/Call")
    )


def test_the_start_carries_the_session_and_offers_every_format():
    info = SessionInfo("ab" * 16, 9, "203.0.113.5", {"subject": "s"}, resumed=True)
    start = pb.ToBackend.FromString(start_message(info)).start
    assert (start.session_id, start.transceiver_id, start.remote, start.resumed) == (
        "ab" * 16, 9, "203.0.113.5", True,
    )  # fmt: skip
    assert dict(start.metadata) == {"subject": "s"}
    assert len(start.offered) == 5 and start.offered[0].sample_rate == 48000


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (pb.FromBackend(accept=pb.SessionAccept()).SerializeToString(), ("pcm16", 48000)),
        (accept(pb.ENCODING_PCM16, 16000), ("pcm16", 16000)),
        (accept(pb.ENCODING_OPUS, 0), ("opus", 48000)),
        (accept(pb.ENCODING_PCM16, 44100), "not offered"),
        (accept(pb.ENCODING_OPUS, 16000), "not offered"),
        (accept(7, 48000), "not offered"),
        (b"\xff", "not a FromBackend"),
        (pb.FromBackend(clear=pb.AudioClear()).SerializeToString(), "clear, not accept"),
    ],
)
def test_the_first_message_must_accept_an_offered_format(data, expected):
    if isinstance(expected, tuple):
        assert accepted_format(data) == Accepted(*expected)
    else:
        with pytest.raises(ProtocolError, match=expected):
            accepted_format(data)


def message(**kind) -> bytes:
    return pb.FromBackend(**kind).SerializeToString()


def test_each_message_is_its_action():
    call = BackendCall(Accepted("pcm16", 8000))
    frames = bytes(320 * 3)
    assert call.backend_message(message(pcm16=pb.Pcm16(pcm=frames)), 0) == [AudioOut(frames)]
    assert call.backend_message(message(event=pb.Event(json='{"a": 1}')), 0) == [ToCaller({"a": 1})]
    assert call.backend_message(message(clear=pb.AudioClear()), 7) == [Clear()]
    assert call.backend_message(message(hangup=pb.Hangup(reason="bye")), 0) == [Hangup("bye")]
    counts = call.counts
    assert (counts.frames_out, counts.events_out, counts.clears, counts.frames_cleared) == (
        3, 1, 1, 7,
    )  # fmt: skip
    opus = BackendCall(Accepted("opus", 48000))
    assert opus.backend_message(message(opus=pb.OpusPacket(payload=OPUS_20MS)), 0) == [
        OpusOut(OPUS_20MS)
    ]
    sent = pb.ToBackend.FromString(opus.caller_opus(OpusFrame(OPUS_20MS, 65535, 2**32 - 1)))
    assert (sent.opus.sequence, sent.opus.timestamp) == (65535, 2**32 - 1)


def test_audio_ahead_of_the_limit_is_cut_to_it():
    call = BackendCall(Accepted("pcm16", 8000), CallLimits(max_playout_frames=10))
    actions = call.backend_message(message(pcm16=pb.Pcm16(pcm=bytes(320 * 8))), 6)
    assert actions[0] == AudioOut(bytes(320 * 4)) and isinstance(actions[1], Problem)
    assert (call.counts.frames_out, call.counts.frames_ahead_dropped) == (4, 4)
    opus = BackendCall(Accepted("opus", 48000), CallLimits(max_playout_frames=10))
    assert isinstance(opus.backend_message(message(opus=pb.OpusPacket(payload=OPUS_20MS)), 10)[0],
                      Problem)  # fmt: skip
    assert opus.counts.frames_ahead_dropped == 1


def test_bad_messages_are_problems_then_the_end():
    call = BackendCall(Accepted("pcm16", 48000), CallLimits(max_protocol_errors=2))
    assert isinstance(call.backend_message(message(opus=pb.OpusPacket(payload=OPUS_20MS)), 0)[0],
                      Problem)  # fmt: skip
    assert call.counts.wrong_codec == 1
    assert isinstance(call.backend_message(b"\x0a\xff", 0)[0], Problem)
    (end,) = call.backend_message(message(event=pb.Event(json="[1]")), 0)
    assert isinstance(end, End) and "more than 2 bad messages" in end.reason
    assert call.backend_message(b"", 0) == [Problem("a message of a kind this side does not take")]
    assert call.counts.unknown_messages == 1 and call.counts.protocol_errors == 3
