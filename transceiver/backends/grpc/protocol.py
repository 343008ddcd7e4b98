"""One call as a gRPC backend sees it: the messages of ``rtcedge.backend.v1``, sans-I/O.

The same protocol as the WebSocket one (docs/backend-protocol.md), in protobuf messages on one
bidirectional stream per call (``v1/backend.proto``): the transceiver speaks first
(``SessionStart``, with the formats it offers) and last (``SessionEnd``); the backend's first
message (``SessionAccept``) names the call's audio format, as the WebSocket subprotocol does.

Sans-I/O, like ``media_streams.protocol``: the stream carries raw bytes (no (de)serializer on
the gRPC call), so every message the backend sends is parsed here, where a malformed one is
dropped and counted instead of failing the whole stream inside grpc. Methods take what arrived,
and ``queued`` (the call's outbound frames or packets not yet sent, read from the transceiver);
they return the bytes to send, or the actions to carry out, in order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError

from transceiver.backend import (
    AUDIO_SAMPLE_RATE,
    OPUS,
    PCM16,
    SAMPLE_RATES,
    OpusFrame,
    SessionInfo,
    frame_bytes,
)
from transceiver.backends.grpc.config import CallLimits
from transceiver.backends.grpc.v1 import backend_pb2 as pb
from transceiver.backends.media_streams.protocol import Problem
from transceiver.backends.realtime.conversation import CLEAR, AudioOut, Clear, End, ToCaller
from transceiver.call.opus import OpusError, packet_samples

__all__ = [
    "METHOD",
    "OFFERED",
    "Accepted",
    "BackendCall",
    "CallCounts",
    "CallLimits",
    "Hangup",
    "OpusOut",
    "Problem",
    "ProtocolError",
    "accepted_format",
    "start_message",
]

METHOD: Final = "/rtcedge.backend.v1.Backend/Call"  # the one RPC: one stream per call
# What a SessionStart offers, the default first: pcm16 at every rate libopus codes natively,
# and Opus untouched (its RTP clock is 48 kHz).
OFFERED: Final = (
    (PCM16, AUDIO_SAMPLE_RATE),
    *((PCM16, rate) for rate in SAMPLE_RATES if rate != AUDIO_SAMPLE_RATE),
    (OPUS, AUDIO_SAMPLE_RATE),
)
_ENCODINGS: Final = {PCM16: pb.ENCODING_PCM16, OPUS: pb.ENCODING_OPUS}


class ProtocolError(ValueError):
    """The backend's first message is not a SessionAccept of an offered format."""


@dataclass(frozen=True)
class OpusOut:
    """Queue this Opus packet toward the caller, as it is."""

    packet: bytes


@dataclass(frozen=True)
class Hangup:
    """The backend ends the call (reason ``backend_hangup``); ``reason`` is its own, logged."""

    reason: str


@dataclass(frozen=True)
class Accepted:
    """The call's audio format, as the backend's SessionAccept named it."""

    audio_format: str
    sample_rate: int


Action = AudioOut | OpusOut | ToCaller | Clear | Hangup | Problem | End


@dataclass
class CallCounts:
    """What one call did; the I/O layer adds its outbox's and reports them as metrics."""

    frames_out: int = 0  # the backend's 20 ms frames (or Opus packets) queued toward the caller
    frames_ahead_dropped: int = 0  # the backend's frames past ``max_playout_frames``
    events_out: int = 0  # backend events passed to the caller
    clears: int = 0
    frames_cleared: int = 0  # the backend's frames a clear took back before they were played
    protocol_errors: int = 0  # malformed messages dropped
    wrong_codec: int = 0  # audio in the format the call did not accept, dropped
    unknown_messages: int = 0  # well-formed messages of a kind this side does not take


def start_message(info: SessionInfo) -> bytes:
    """The first message of a call: who is calling, and the formats the backend may pick."""
    start = pb.SessionStart(
        session_id=info.session_id,
        transceiver_id=info.transceiver_id,
        remote=info.remote,
        metadata=dict(info.metadata),
        resumed=info.resumed,
        offered=[pb.AudioFormat(encoding=_ENCODINGS[f], sample_rate=r) for f, r in OFFERED],
    )
    return pb.ToBackend(start=start).SerializeToString()


def accepted_format(data: bytes) -> Accepted:
    """The backend's first message: a SessionAccept of one of ``OFFERED`` (ProtocolError)."""
    try:
        message = pb.FromBackend.FromString(data)
    except DecodeError:
        raise ProtocolError(f"its first message is not a FromBackend ({len(data)} bytes)") from None
    if message.WhichOneof("kind") != "accept":
        raise ProtocolError(f"its first message is {message.WhichOneof('kind')}, not accept")
    audio = message.accept.audio
    if audio.encoding in (pb.ENCODING_UNSPECIFIED, pb.ENCODING_PCM16):
        chosen = (PCM16, audio.sample_rate or AUDIO_SAMPLE_RATE)
    elif audio.encoding == pb.ENCODING_OPUS:
        chosen = (OPUS, audio.sample_rate or AUDIO_SAMPLE_RATE)
    else:
        chosen = (f"encoding {audio.encoding}", audio.sample_rate)
    if chosen not in OFFERED:
        raise ProtocolError(f"it accepted {chosen[0]} at {chosen[1]} Hz, which was not offered")
    return Accepted(*chosen)


class BackendCall:
    """The state of one call's stream: its audio format, its limits and what it did."""

    def __init__(self, accepted: Accepted, limits: CallLimits | None = None) -> None:
        self.audio_format = accepted.audio_format
        self.sample_rate = accepted.sample_rate
        self.limits = limits or CallLimits()
        self.counts = CallCounts()
        self.frame_bytes = frame_bytes(accepted.sample_rate)

    # -- toward the backend ---------------------------------------------------------------------
    @staticmethod
    def caller_pcm(pcm: bytes) -> bytes:
        return pb.ToBackend(pcm16=pb.Pcm16(pcm=pcm)).SerializeToString()

    @staticmethod
    def caller_opus(frame: OpusFrame) -> bytes:
        packet = pb.OpusPacket(
            payload=frame.payload, sequence=frame.sequence, timestamp=frame.timestamp
        )
        return pb.ToBackend(opus=packet).SerializeToString()

    @staticmethod
    def caller_event(event: Mapping[str, Any]) -> bytes:
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        return pb.ToBackend(event=pb.Event(json=text)).SerializeToString()

    @staticmethod
    def end(reason: str) -> bytes:
        return pb.ToBackend(end=pb.SessionEnd(reason=reason)).SerializeToString()

    # -- from the backend -----------------------------------------------------------------------
    def backend_message(self, data: bytes, queued: int) -> list[Action]:
        """One message from the backend; ``queued`` outbound frames (or packets) not yet sent."""
        try:
            message = pb.FromBackend.FromString(data)
        except DecodeError:
            return self._malformed(f"a message that is not a FromBackend ({len(data)} bytes)")
        kind = message.WhichOneof("kind")
        if kind == "pcm16":
            return self._pcm(message.pcm16.pcm, queued)
        if kind == "opus":
            return self._opus(message.opus.payload, queued)
        if kind == "event":
            return self._event(message.event.json)
        if kind == "clear":
            self.counts.clears += 1
            self.counts.frames_cleared += max(queued, 0)
            return [CLEAR]
        if kind == "hangup":
            return [Hangup(message.hangup.reason[:200])]
        if kind == "accept":
            return self._malformed("a second accept")
        # None: no field this version knows (a newer peer's message, or an empty one).
        self.counts.unknown_messages += 1
        return [Problem("a message of a kind this side does not take")]

    def _pcm(self, pcm: bytes, queued: int) -> list[Action]:
        if self.audio_format != PCM16:
            return self._wrong_codec("pcm16 audio in an opus call")
        size = len(pcm)
        if size == 0 or size % self.frame_bytes:
            return self._malformed(f"pcm16 of {size} bytes is not whole 20 ms frames")
        frames = size // self.frame_bytes
        kept = min(frames, max(self.limits.max_playout_frames - queued, 0))
        actions: list[Action] = []
        if kept:
            self.counts.frames_out += kept
            actions.append(AudioOut(pcm if kept == frames else pcm[: kept * self.frame_bytes]))
        if kept < frames:
            self.counts.frames_ahead_dropped += frames - kept
            ahead = self.limits.max_playout_frames
            actions.append(Problem(f"audio more than {ahead} frames ahead of the caller"))
        return actions

    def _opus(self, packet: bytes, queued: int) -> list[Action]:
        if self.audio_format != OPUS:
            return self._wrong_codec("an Opus packet in a pcm16 call")
        try:
            packet_samples(packet)
        except OpusError as exc:
            return self._malformed(f"not one Opus packet: {exc}")
        if queued >= self.limits.max_playout_frames:
            self.counts.frames_ahead_dropped += 1
            ahead = self.limits.max_playout_frames
            return [Problem(f"audio more than {ahead} packets ahead of the caller")]
        self.counts.frames_out += 1
        return [OpusOut(packet)]

    def _event(self, text: str) -> list[Action]:
        try:
            event = json.loads(text)
        except ValueError:
            return self._malformed(f"an event that is not JSON ({len(text)} characters)")
        if not isinstance(event, dict):
            return self._malformed(f"an event of JSON {type(event).__name__}, not an object")
        self.counts.events_out += 1
        return [ToCaller(event)]

    def _wrong_codec(self, what: str) -> list[Action]:
        self.counts.wrong_codec += 1
        return self._malformed(what)

    def _malformed(self, what: str) -> list[Action]:
        self.counts.protocol_errors += 1
        if self.counts.protocol_errors > self.limits.max_protocol_errors:
            return [End(f"backend sent more than {self.limits.max_protocol_errors} bad messages")]
        return [Problem(what)]
