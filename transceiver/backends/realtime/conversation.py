"""One call's Realtime conversation, as the transceiver plays OpenAI's WebRTC side of it.

The transceiver stands where OpenAI's WebRTC service stands: the caller's audio arrives over RTP
and goes to the model server as ``input_audio_buffer.append``; the model's
``response.output_audio.delta`` becomes RTP toward the caller; every other server event goes to
the caller on its ``oai-events`` data channel, and the caller's client events go to the model
server if the operator's policy lets them (``policy``). Barge-in is decided here: when the
server hears the caller start to speak (``input_audio_buffer.speech_started``), or the caller
asks (``output_audio_buffer.clear``), the audio not yet played is dropped at once and the server
is told exactly how much of the item the caller was sent (``conversation.item.truncate``,
``playout``).

Sans-I/O, as h11's connection: methods take what arrived (and ``queued``, the outbound frames not
yet sent, read from the transceiver; ``now`` for the caller's event budget) and return what to do,
a list of actions the I/O layer carries out in order. Events toward the model server are the
``openai`` package's typed client events (the caller's audio as such an event's JSON).
"""

from __future__ import annotations

import base64
import binascii
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from openai.types.realtime import ConversationItemTruncateEvent, ResponseCancelEvent

from transceiver.backends.realtime.playout import Playout
from transceiver.backends.realtime.policy import ClientEventPolicy

__all__ = [
    "CLEAR",
    "AudioOut",
    "Clear",
    "End",
    "RealtimeConversation",
    "ToCaller",
    "ToServer",
]

AUDIO_DELTAS: Final = frozenset({"response.output_audio.delta", "response.audio.delta"})
AUDIO_DONE: Final = frozenset({"response.output_audio.done", "response.audio.done"})
SPEECH_STARTED: Final = "input_audio_buffer.speech_started"
CALLER_CLEAR: Final = "output_audio_buffer.clear"  # OpenAI's WebRTC-only client event
# Fields of the session the operator set that the caller is not shown (session.created/updated
# carry the whole session): instructions and tools are the operator's, often secret.
REDACTED_SESSION_FIELDS: Final = ("instructions", "tools", "prompt", "tracing")
MAX_CUT_ITEMS = 16  # items cut by a barge-in whose late deltas are still dropped
# ``InputAudioBufferAppendEvent``'s JSON (%s: the base64 audio), compact: building the model
# and dumping it (indented, the SDK's default) for every 20 ms frame was ~3 % of a realtime
# call's CPU.
APPEND_JSON: Final = '{"type":"input_audio_buffer.append","audio":"%s"}'


@dataclass(frozen=True)
class ToServer:
    """Send this client event to the model server: a typed event, a caller's checked dict, or
    the JSON of a typed event (``APPEND_JSON``: 50 a second per call, written without a model)."""

    event: Any


@dataclass(frozen=True)
class ToCaller:
    """Send this event to the caller's ``oai-events`` channel."""

    event: Mapping[str, Any]


@dataclass(frozen=True)
class AudioOut:
    """Queue these whole 20 ms PCM16 frames toward the caller."""

    pcm: bytes


@dataclass(frozen=True)
class Clear:
    """Drop the audio not yet played toward the caller, now."""


CLEAR: Final = Clear()


@dataclass(frozen=True)
class End:
    """End the call (the model server broke the protocol)."""

    reason: str


Action = ToServer | ToCaller | AudioOut | Clear | End


@dataclass
class ConversationCounts:
    """What one call's conversation did; the I/O layer turns these into metrics and logs."""

    appends: int = 0
    deltas: int = 0
    barge_ins: int = 0
    truncates: int = 0
    late_deltas_dropped: int = 0  # deltas of an item already cut
    caller_events_refused: int = 0
    caller_events_limited: int = 0
    server_errors: int = 0


@dataclass
class RealtimeConversation:
    """The state of one call: what plays, what was cut, whose turn it is."""

    sample_rate: int  # the session's PCM rate both ways (24 kHz for OpenAI's audio/pcm)
    policy: ClientEventPolicy = field(default_factory=ClientEventPolicy)
    frame_ms: int = 20

    def __post_init__(self) -> None:
        self.frame_samples = self.sample_rate * self.frame_ms // 1000
        self.frame_bytes = self.frame_samples * 2
        self.playout = Playout(self.sample_rate, self.frame_samples)
        self.budget = self.policy.limiter()
        self.counts = ConversationCounts()
        self._tail = b""  # the current item's bytes short of a whole frame
        self._tail_item: tuple[str, int] | None = None
        self._cut: deque[str] = deque(maxlen=MAX_CUT_ITEMS)
        self._response_id: str | None = None  # between response.created and response.done
        self._next_event = 0

    # -- the caller's audio ---------------------------------------------------------------------
    def caller_audio(self, pcm: bytes) -> ToServer:
        """One frame of the caller's audio (PCM16 at ``sample_rate``) for the model server."""
        self.counts.appends += 1
        return ToServer(APPEND_JSON % base64.b64encode(pcm).decode("ascii"))

    # -- what the model server sends ------------------------------------------------------------
    def server_event(self, event: Mapping[str, Any], queued: int) -> list[Action]:
        """An event from the model server (a JSON object); ``queued`` frames not yet sent."""
        kind = event.get("type")
        if kind in AUDIO_DELTAS:
            return self._delta(event)
        if kind in AUDIO_DONE:
            return [*self._flush_tail(), ToCaller(event)]
        if kind == SPEECH_STARTED:
            return [*self._barge_in(queued, cancel=False), ToCaller(event)]
        if kind == "response.created":
            self._response_id = _response_id(event)
        elif kind == "response.done":
            self._response_id = None
        elif kind in ("session.created", "session.updated"):
            event = _redacted(event)
        elif kind == "error":
            self.counts.server_errors += 1
            error = event.get("error")
            if isinstance(error, Mapping) and error.get("type") == "server_error":
                return [ToCaller(event), End(f"model server error: {_message(error)}")]
        if not isinstance(kind, str):
            return [End("model server sent an event without a type")]
        self.playout.forget_played(queued)
        return [ToCaller(event)]

    def _delta(self, event: Mapping[str, Any]) -> list[Action]:
        item_id = event.get("item_id")
        content_index = event.get("content_index", 0)
        if not isinstance(item_id, str) or not isinstance(content_index, int):
            return [End("model server sent an audio delta without item_id/content_index")]
        if item_id in self._cut:
            self.counts.late_deltas_dropped += 1
            return []
        try:
            pcm = base64.b64decode(event.get("delta", ""), validate=True)
        except (binascii.Error, TypeError, ValueError):
            return [End("model server sent an audio delta that is not base64")]
        self.counts.deltas += 1
        key = (item_id, content_index)
        actions: list[Action] = []
        if self._tail_item != key:
            actions.extend(self._flush_tail())
            self._tail_item = key
        data = self._tail + pcm
        whole = len(data) - len(data) % self.frame_bytes
        self._tail = data[whole:]
        if whole:
            self.playout.queued(item_id, content_index, whole // self.frame_bytes, whole // 2)
            actions.append(AudioOut(data[:whole]))
        return actions

    def _flush_tail(self) -> list[Action]:
        """The end of an item's audio: its last partial frame, padded with silence."""
        tail, self._tail = self._tail, b""
        key, self._tail_item = self._tail_item, None
        if not tail or key is None:
            return []
        samples = len(tail) // 2
        self.playout.queued(key[0], key[1], 1, samples)
        return [AudioOut(tail[: samples * 2].ljust(self.frame_bytes, b"\0"))]

    def _barge_in(self, queued: int, cancel: bool) -> list[Action]:
        """The caller speaks over the model: stop its audio, tell the server what was heard."""
        truncation = self.playout.cut(queued)
        if self._tail_item is not None:
            self._cut.append(self._tail_item[0])
        self._tail, self._tail_item = b"", None
        actions: list[Action] = []
        if cancel and self._response_id is not None:
            actions.append(ToServer(ResponseCancelEvent.model_construct(type="response.cancel")))
        if truncation is None:
            return actions
        self.counts.barge_ins += 1
        self.counts.truncates += 1
        self._cut.append(truncation.item_id)
        actions.append(CLEAR)
        actions.append(
            ToServer(
                ConversationItemTruncateEvent.model_construct(
                    type="conversation.item.truncate",
                    item_id=truncation.item_id,
                    content_index=truncation.content_index,
                    audio_end_ms=truncation.audio_end_ms,
                )
            )
        )
        actions.append(
            ToCaller(
                {
                    "type": "output_audio_buffer.cleared",
                    "event_id": self._event_id(),
                    "response_id": self._response_id or "",
                }
            )
        )
        return actions

    # -- what the caller sends ------------------------------------------------------------------
    def caller_event(self, event: Mapping[str, Any], queued: int, now: float) -> list[Action]:
        """A client event from the caller's ``oai-events`` channel."""
        if not self.budget.allow(now):
            self.counts.caller_events_limited += 1
            return [ToCaller(self.error_event(event, "rate_limited", "too many events"))]
        if event.get("type") == CALLER_CLEAR:
            return self._barge_in(queued, cancel=True)
        why = self.policy.refusal(dict(event))
        if why is not None:
            self.counts.caller_events_refused += 1
            return [ToCaller(self.error_event(event, "event_not_allowed", why))]
        return [ToServer(dict(event))]

    def error_event(self, cause: Mapping[str, Any], code: str, message: str) -> dict[str, Any]:
        """An ``error`` server event as OpenAI shapes it, about the caller's event ``cause``."""
        caused_by = cause.get("event_id")
        return {
            "type": "error",
            "event_id": self._event_id(),
            "error": {
                "type": "invalid_request_error",
                "code": code,
                "message": message,
                "param": None,
                "event_id": caused_by if isinstance(caused_by, str) else None,
            },
        }

    def _event_id(self) -> str:
        self._next_event += 1
        return f"event_rtcedge_{self._next_event}"


def _response_id(event: Mapping[str, Any]) -> str | None:
    response = event.get("response")
    if isinstance(response, Mapping) and isinstance(response.get("id"), str):
        return response["id"]
    return None


def _redacted(event: Mapping[str, Any]) -> Mapping[str, Any]:
    session = event.get("session")
    if not isinstance(session, Mapping) or not any(k in session for k in REDACTED_SESSION_FIELDS):
        return event
    kept = {k: v for k, v in session.items() if k not in REDACTED_SESSION_FIELDS}
    return {**event, "session": kept}


def _message(error: Mapping[str, Any]) -> str:
    message = error.get("message")
    return message[:200] if isinstance(message, str) else "no message"
