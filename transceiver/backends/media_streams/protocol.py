"""One call as a Media Streams bot hears it: the telephony side of Twilio's protocol, sans-I/O.

Twilio's Media Streams (bidirectional, ``<Connect><Stream>``) is what telephony bots speak:
Pipecat's ``TwilioFrameSerializer``, hand-written phone bots and many agent frameworks. The
transceiver plays Twilio's part, so such a bot takes WebRTC callers unchanged. Toward the bot, as
Twilio documents it: ``connected``, then ``start`` (the stream's and the call's ids, the media
format, the caller's metadata as ``customParameters``), a ``media`` message per 20 ms of the
caller's audio (base64 mu-law, 8 kHz mono, 160 bytes), a ``mark`` back once the caller has been
sent every frame of the bot's audio that came before that mark, and ``stop`` at the end. From the
bot: ``media`` (its audio, any length), ``mark`` and ``clear`` (drop the audio not yet played,
and send back every mark still pending: Twilio's rule). docs/media-streams.md has the messages.

Marks are exact because the transceiver's outbound queue is FIFO: the frames given to it and no
longer queued have left toward the caller (``realtime.playout``, which this reuses: the audio
between two marks is one of its items, and a mark is due when its item has been sent in full).

Sans-I/O, like ``realtime.conversation``: methods take what arrived, ``queued`` (the call's
outbound frames not yet sent, read from the transceiver) and ``now`` (time.monotonic()), and
return the messages to send and the actions to carry out, in order.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from transceiver.backends.media_streams.g711 import SILENCE, pcm16_to_ulaw, ulaw_to_pcm16
from transceiver.backends.realtime.conversation import CLEAR, AudioOut, Clear, End
from transceiver.backends.realtime.playout import Playout

__all__ = [
    "ACCOUNT_SID",
    "FRAME_BYTES",
    "SAMPLE_RATE",
    "MediaStream",
    "Problem",
    "StreamCounts",
    "StreamLimits",
    "ToBot",
    "call_sid",
]

SAMPLE_RATE: Final = 8000
FRAME_SAMPLES: Final = SAMPLE_RATE // 50  # 20 ms: 160 mu-law bytes
FRAME_BYTES: Final = FRAME_SAMPLES * 2  # the same 20 ms as PCM16, what the transceiver hands over
TRACK: Final = "inbound"  # a bidirectional stream carries the caller's track only
MEDIA_FORMAT: Final = {"encoding": "audio/x-mulaw", "sampleRate": SAMPLE_RATE, "channels": 1}
# Twilio's ids are two letters and 32 hex digits. There is no Twilio account behind the call:
# a placeholder that no real account has.
ACCOUNT_SID: Final = "AC" + "0" * 32
MAX_MARK_NAME: Final = 1024  # characters; a longer name is the bot's mistake, not echoed


def call_sid(session_id: str) -> str:
    """The call's ``callSid``: the session id (32 hex digits) the other backends see, so that a
    call that moves to another transceiver keeps it (``resumed``)."""
    return "CA" + session_id


@dataclass(frozen=True)
class StreamLimits:
    """What one bot may make the transceiver hold; past each, the call degrades or ends."""

    # The bot's audio queued toward the caller ahead of what was played (1000: 20 s), under the
    # outbound track's own bound (1500, transceiver.call.outbound_track); a bot that sends more
    # ahead (a flood faster than real time) loses the excess, counted (``media_frames_dropped``).
    max_playout_frames: int = 1000
    max_pending_marks: int = 1024  # more are dropped, counted: never echoed
    max_protocol_errors: int = 100  # malformed messages dropped before the call ends

    def __post_init__(self) -> None:
        if not 1 <= self.max_playout_frames <= 1500:
            raise ValueError(f"max_playout_frames must be 1..1500, got {self.max_playout_frames!r}")
        for name in ("max_pending_marks", "max_protocol_errors"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{name} must be >= 1")


@dataclass(frozen=True)
class ToBot:
    """Send this text message to the bot."""

    text: str


@dataclass(frozen=True)
class Problem:
    """The bot sent something that was dropped; ``what`` says what (the I/O layer logs it)."""

    what: str


Action = AudioOut | Clear | End | ToBot | Problem


@dataclass
class StreamCounts:
    """What one call's stream did; the I/O layer reports these as metrics and logs."""

    media_out: int = 0  # caller frames made into media messages for the bot
    media_frames_in: int = 0  # the bot's 20 ms frames queued toward the caller
    media_frames_dropped: int = 0  # the bot's frames past ``max_playout_frames``
    marks_received: int = 0
    marks_echoed: int = 0
    marks_dropped: int = 0  # past ``max_pending_marks``
    clears: int = 0
    frames_cleared: int = 0  # the bot's frames a clear took back before they were played
    protocol_errors: int = 0  # malformed messages dropped
    unknown_events: int = 0  # well-formed messages of an event this side does not take


class MediaStream:
    """The state of one stream: the sequence numbers, the bot's audio and its pending marks."""

    def __init__(
        self,
        stream_sid: str,
        call: str,
        parameters: Mapping[str, str],
        now: float,
        limits: StreamLimits | None = None,
    ) -> None:
        self.stream_sid = stream_sid
        self.call_sid = call
        self.parameters = dict(parameters)
        self.limits = limits or StreamLimits()
        self.counts = StreamCounts()
        # Items are the audio between two marks (``_segment`` names the current one); a mark
        # is due once its item has been sent in full.
        self.playout = Playout(
            SAMPLE_RATE, FRAME_SAMPLES, max_items=self.limits.max_pending_marks + 2
        )
        self._started_at = now
        self._sequence = 0
        self._chunk = 0
        self._tail = b""  # the bot's mu-law short of a whole frame
        self._segment = 0
        self._marks: dict[str, str] = {}  # segment -> the mark that ends it, oldest first

    # -- toward the bot -------------------------------------------------------------------------
    def opening(self) -> list[str]:
        """``connected`` and ``start``: the first two messages of the stream."""
        connected = {"event": "connected", "protocol": "Call", "version": "1.0.0"}
        start = {
            "event": "start",
            "sequenceNumber": self._next_sequence(),
            "start": {
                "accountSid": ACCOUNT_SID,
                "streamSid": self.stream_sid,
                "callSid": self.call_sid,
                "tracks": [TRACK],
                "mediaFormat": dict(MEDIA_FORMAT),
                "customParameters": self.parameters,
            },
            "streamSid": self.stream_sid,
        }
        return [_text(connected), _text(start)]

    def caller_audio(self, pcm: bytes, now: float) -> str:
        """One 20 ms PCM16 frame of the caller (8 kHz) as a ``media`` message."""
        self._chunk += 1
        self.counts.media_out += 1
        payload = base64.b64encode(pcm16_to_ulaw(pcm)).decode("ascii")
        timestamp = max(round((now - self._started_at) * 1000), 0)
        # Built by hand: one per 20 ms per call, and nothing in it needs JSON escaping.
        return (
            f'{{"event":"media","sequenceNumber":"{self._next_sequence()}","media":'
            f'{{"track":"{TRACK}","chunk":"{self._chunk}","timestamp":"{timestamp}",'
            f'"payload":"{payload}"}},"streamSid":"{self.stream_sid}"}}'
        )

    def closing(self) -> str:
        """``stop``: the last message of the stream."""
        stop = {
            "event": "stop",
            "sequenceNumber": self._next_sequence(),
            "stop": {"accountSid": ACCOUNT_SID, "callSid": self.call_sid},
            "streamSid": self.stream_sid,
        }
        return _text(stop)

    def _next_sequence(self) -> str:
        self._sequence += 1
        return str(self._sequence)

    # -- from the bot ---------------------------------------------------------------------------
    def bot_message(self, text: str, queued: int) -> list[Action]:
        """A text message from the bot; ``queued`` outbound frames not yet sent."""
        try:
            message = json.loads(text)
        except ValueError:
            return self._malformed(f"a message that is not JSON ({len(text)} characters)")
        if not isinstance(message, dict):
            return self._malformed(f"JSON {type(message).__name__}, not a message object")
        event = message.get("event")
        handler = {"media": self._media, "mark": self._mark, "clear": self._clear}.get(event)
        if handler is None:
            self.counts.unknown_events += 1
            return [Problem(f"an event this side does not take: {str(event)[:40]!r}")]
        if message.get("streamSid") != self.stream_sid:
            return self._malformed(f"a {event} message without this stream's streamSid")
        return handler(message, queued)

    def bot_binary(self, size: int) -> list[Action]:
        """A binary message: Media Streams are text only."""
        return self._malformed(f"a binary message ({size} bytes): Media Streams are JSON text")

    def _media(self, message: Mapping[str, Any], queued: int) -> list[Action]:
        media = message.get("media")
        payload = media.get("payload") if isinstance(media, Mapping) else None
        if not isinstance(payload, str):
            return self._malformed("a media message without a payload")
        try:
            ulaw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return self._malformed("a media payload that is not base64")
        data = self._tail + ulaw
        whole = len(data) - len(data) % FRAME_SAMPLES
        self._tail = data[whole:]
        frames = whole // FRAME_SAMPLES
        room = max(self.limits.max_playout_frames - queued, 0)
        kept = min(frames, room)
        actions: list[Action] = []
        if kept < frames:
            self.counts.media_frames_dropped += frames - kept
            ahead = self.limits.max_playout_frames
            actions.append(Problem(f"audio more than {ahead} frames ahead of the caller"))
        if kept:
            actions.insert(0, self._queue(data[: kept * FRAME_SAMPLES]))
        return actions

    def _queue(self, ulaw: bytes) -> AudioOut:
        """Whole frames of the bot's audio toward the caller, in the current segment."""
        frames = len(ulaw) // FRAME_SAMPLES
        self.playout.queued(str(self._segment), 0, frames, len(ulaw))
        self.counts.media_frames_in += frames
        return AudioOut(ulaw_to_pcm16(ulaw))

    def _mark(self, message: Mapping[str, Any], queued: int) -> list[Action]:
        mark = message.get("mark")
        name = mark.get("name") if isinstance(mark, Mapping) else None
        if not isinstance(name, str) or len(name) > MAX_MARK_NAME:
            return self._malformed(f"a mark without a name of <= {MAX_MARK_NAME} characters")
        self.counts.marks_received += 1
        if len(self._marks) >= self.limits.max_pending_marks:
            self.counts.marks_dropped += 1
            return [Problem(f"more than {self.limits.max_pending_marks} marks pending")]
        actions: list[Action] = []
        if self._tail:  # the audio before the mark ends mid-frame: its frame, padded, plays
            tail, self._tail = self._tail, b""
            actions.append(self._queue(tail.ljust(FRAME_SAMPLES, bytes([SILENCE]))))
        segment = str(self._segment)
        self.playout.queued(segment, 0, 0, 0)  # the segment's item, even with no audio in it
        self._marks[segment] = name
        self._segment += 1
        # A frame just padded is not queued yet: the mark cannot be due before it plays.
        return actions or self.due(queued)

    def _clear(self, message: Mapping[str, Any], queued: int) -> list[Action]:
        """Empty the playout at once and send back every pending mark (Twilio's rule)."""
        self.counts.clears += 1
        self.counts.frames_cleared += max(queued, 0)
        self.playout.cut(queued)
        self._tail = b""
        names = list(self._marks.values())
        self._marks.clear()
        return [CLEAR, *(self._echo(name) for name in names)]

    def _malformed(self, what: str) -> list[Action]:
        self.counts.protocol_errors += 1
        if self.counts.protocol_errors > self.limits.max_protocol_errors:
            return [End(f"bot sent more than {self.limits.max_protocol_errors} bad messages")]
        return [Problem(what)]

    # -- the playout clock ----------------------------------------------------------------------
    def due(self, queued: int) -> list[Action]:
        """The marks whose audio has now been sent to the caller in full, echoed in order."""
        actions: list[Action] = []
        for item in self.playout.forget_played(queued):
            name = self._marks.pop(item.item_id, None)
            if name is not None:
                actions.append(self._echo(name))
        return actions

    def wake_in(self, queued: int) -> float | None:
        """Seconds until the oldest pending mark may be due (``due`` then); None: none pending.
        The last frame before it is watched closely (5 ms): its slot may be held open a little
        (transceiver.call.outbound_track)."""
        if not self._marks:
            return None
        frames = self.playout.frames_before_end_of(next(iter(self._marks)), queued)
        if frames is None:  # cannot happen: a pending mark's item stays until it is due
            return 0.020
        if not frames:
            return 0.0
        return (frames - 1) * 0.020 + 0.005

    @property
    def pending_marks(self) -> int:
        return len(self._marks)

    def _echo(self, name: str) -> ToBot:
        self.counts.marks_echoed += 1
        mark = {
            "event": "mark",
            "sequenceNumber": self._next_sequence(),
            "streamSid": self.stream_sid,
            "mark": {"name": name},
        }
        return ToBot(_text(mark))


def _text(message: Mapping[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)
