"""One Realtime session of the voice agent, sans I/O: client events and audio in, server events
and work to do (recognize this audio, synthesize this text) out, time passed in.

Shaped like aioquic's ``QuicConnection``: feed it ``receive(text, now)``, the results of the work
it asked for (``recognized``, ``synthesized``), and ``handle_timer(now)`` when ``get_timer()``
says; read ``events_to_send()`` and ``jobs_to_run()``. It never touches a socket, a clock, a
process or a model: the WebSocket server in ``agent.py`` does, and tests drive it with numbers.

A turn: appended audio -> 20 ms frames -> voice activity -> ``speech_started`` ... ~500 ms of
silence -> ``speech_stopped``, ``committed``, the user item -> ``Recognize`` -> its transcript
-> a response ("you said ...") -> ``Synthesize`` -> audio deltas, paced at ``speed`` times real
time -> ``response.done`` with the turn's timings in its metadata. Speech that starts while an
answer is in progress cancels it (barge-in).
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pcm
import realtime_events as rt
from openai import BaseModel
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemTruncatedEvent,
    InputAudioBufferClearedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    RealtimeConversationItemAssistantMessage,
    RealtimeConversationItemUserMessage,
    RealtimeResponse,
    RealtimeSessionCreateRequest,
    ResponseAudioDeltaEvent,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)
from turns import FRAME_BYTES, FRAME_MS, INPUT_HZ, SpeechStarted, SpeechStopped, TurnDetector

MAX_APPEND_BYTES = 15 * 1024 * 1024  # the API's limit for one input_audio_buffer.append
MIN_COMMIT_MS = 100  # the API refuses to commit less audio than this
TONE_HZ, TONE_S = 440.0, 1.0  # the tone stand-in's answer
# The beep stand-in: from the caller's first audio on, a response every BEEP_PERIOD_S whatever
# the caller says, BEEP_MS of TONE_HZ then silence, BEEP_ANSWER_MS in all. Shorter than the
# period, so the caller's playout is idle for a moment before each beep (any audio still queued
# has left by then: the beep meets an empty queue); long enough that the transceiver encodes
# nearly as many frames as an echo of continuous audio would.
BEEP_PERIOD_S, BEEP_MS, BEEP_ANSWER_MS = 1.0, 100, 900
STAND_INS = ("tone", "beep")
KEPT_ITEMS = 32  # assistant items remembered for conversation.item.truncate
BYTES_PER_MS = INPUT_HZ // 1000 * pcm.SAMPLE_BYTES  # 48
PCM_24K = {"type": "audio/pcm", "rate": INPUT_HZ}


class SpeechDetector(Protocol):
    """Voice activity per 20 ms input frame (``turns.VoiceActivity``, or a test's stand-in)."""

    def __call__(self, frame_24k: bytes) -> bool: ...

    def set_threshold(self, threshold: float) -> None: ...


@dataclass(frozen=True)
class AgentConfig:
    """How the agent answers; one per process, from its command line."""

    # "tone": every turn answered at once with TONE_S of TONE_HZ; "beep": a response every
    # BEEP_PERIOD_S from the caller's first audio on, turns or no turns (none are detected)
    stand_in: str | None = None
    chunk_ms: int = 100  # audio per response.output_audio.delta
    speed: float = 4.0  # audio sent per second of wall time, as a real server runs ahead
    model: str = "rtcedge-voice-agent"
    voice: str = "en-us"  # espeak-ng's voice; the session reports it
    max_turn_ms: int = 30_000  # a turn (or a manually committed buffer) never grows past this


@dataclass(frozen=True)
class Recognize:
    """Work for the I/O layer: transcribe this user item's audio (PCM16, 24 kHz)."""

    item_id: str
    audio: bytes


@dataclass(frozen=True)
class Synthesize:
    """Work for the I/O layer: speak ``text`` for this response (PCM16, 24 kHz back)."""

    response_id: str
    text: str
    item_id: str | None = None  # the user item (turn) it answers; None for a response.create


@dataclass(frozen=True)
class SpeechEnd:
    """A turn's end as the voice activity detector declared it, for the I/O layer's event log
    (``turn.speech_stopped``): the benchmarks split a turn's latency at it. Times are on the
    clock ``now`` is on; ``*_ms`` on the audio clock (ms of input appended so far)."""

    item_id: str
    at: float  # the decision: the append that completed the silence was received
    speech_end_ms: int  # the speech end it judged: the end of the turn's last voiced frame
    detected_ms: int  # the end of the frame that completed the silence
    last_voiced_at: float  # when the append holding the last voiced frame was received


@dataclass(frozen=True)
class TurnSettings:
    """The session's ``audio.input.turn_detection``, as the agent applies it."""

    enabled: bool = True
    silence_ms: int = 500
    prefix_padding_ms: int = 300
    threshold: float = 0.5
    create_response: bool = True
    interrupt_response: bool = True


@dataclass
class _Answer:
    """The response in progress."""

    id: str
    item_id: str
    text: str  # what it says ("" for the tone)
    metadata: dict[str, str]
    turn_ended_at: float  # when the user's turn was committed (wall clock)
    audio: bytes | None = None  # None until synthesized
    sent_bytes: int = 0
    started_at: float = 0.0
    transcript_sent: str = ""


@dataclass
class _SpokenItem:
    """An assistant item the client may truncate to what it played."""

    text: str
    sent_ms: float
    total_ms: float
    transcript: str


@dataclass
class _Recording:
    """The input audio buffer: a turn's audio, or (without turn detection) all since a commit."""

    audio: bytearray = field(default_factory=bytearray)
    item_id: str | None = None  # the user item the turn will become
    preroll: deque[tuple[int, bytes]] = field(default_factory=deque)  # (start ms, frame)
    last_voiced_at: float = 0.0


def words_heard(text: str, heard_ms: float, total_ms: float) -> str:
    """The longest run of whole words of ``text`` spoken within ``heard_ms`` of ``total_ms``.

    Words are placed in time by their share of the characters: espeak-ng gives no word timings
    through a pipe, and the estimate errs by a word at most.
    """
    if total_ms <= 0 or heard_ms <= 0:
        return ""
    if heard_ms >= total_ms:
        return text
    heard_chars = len(text) * heard_ms / total_ms
    cut = 0
    for end in (i for i, c in enumerate(text + " ") if c == " "):
        if end > heard_chars:
            break
        cut = end
    return text[:cut]


def turn_settings(session: RealtimeSessionCreateRequest) -> TurnSettings:
    """What the agent does with a session's turn detection (``None``: the client commits).

    ``semantic_vad`` has no silence setting: its ``eagerness`` picks one (high: 250 ms, low:
    800 ms, otherwise 500 ms) and the same voice activity detector runs.
    """
    audio_input = session.audio.input if session.audio else None
    if audio_input is None or "turn_detection" not in audio_input.model_fields_set:
        return TurnSettings()
    detection = audio_input.turn_detection
    if detection is None:
        return TurnSettings(enabled=False)
    create = detection.create_response is not False
    interrupt = detection.interrupt_response is not False
    if detection.type == "semantic_vad":
        silence = {"high": 250, "low": 800}.get(detection.eagerness or "auto", 500)
        return TurnSettings(True, silence, 300, 0.5, create, interrupt)
    return TurnSettings(
        True,
        detection.silence_duration_ms if detection.silence_duration_ms is not None else 500,
        detection.prefix_padding_ms if detection.prefix_padding_ms is not None else 300,
        detection.threshold if detection.threshold is not None else 0.5,
        create,
        interrupt,
    )


def _merge(into: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update``'s fields over ``into``'s, objects merged field by field (session.update)."""
    merged = dict(into)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class Conversation:
    """One WebSocket's session; see the module's docstring for the protocol it speaks."""

    def __init__(
        self,
        config: AgentConfig,
        session_tag: str,
        vad: SpeechDetector,
    ) -> None:
        self.config = config
        self._events = rt.ServerEvents(session_tag)
        self._ids = rt.Ids(session_tag)
        self._vad = vad
        self._outbox: list[BaseModel] = []
        self._jobs: list[Recognize | Synthesize] = []
        self._speech_ends: list[SpeechEnd] = []
        self.session = RealtimeSessionCreateRequest(
            type="realtime",
            model=config.model,
            output_modalities=["audio"],
            audio={
                "input": {
                    "format": PCM_24K,
                    "turn_detection": {
                        "type": "server_vad",
                        "threshold": 0.5,
                        "prefix_padding_ms": 300,
                        "silence_duration_ms": 500,
                        "create_response": True,
                        "interrupt_response": True,
                    },
                },
                "output": {"format": PCM_24K, "voice": config.voice},
            },
        )
        self.turns = turn_settings(self.session)
        self._detector = TurnDetector(self.turns.silence_ms, max_turn_ms=config.max_turn_ms)
        self._pending = bytearray()  # appended bytes short of a whole frame
        self._audio_ms = 0  # the audio clock: ms of input framed so far
        self._recording = _Recording()
        self._last_item_id: str | None = None
        self._latest_user_item: str | None = None
        self._awaiting_transcript: dict[str, tuple[float, dict[str, str], float]] = {}
        self._last_transcript = ""
        self._answer: _Answer | None = None
        self._beeps_from: float | None = None  # the caller's first audio (the beep stand-in)
        self._beeps = 0  # beep responses started
        self._spoken: OrderedDict[str, _SpokenItem] = OrderedDict()
        self._handlers: dict[str, Callable[[Any, float], None]] = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit_request,
            "input_audio_buffer.clear": self._clear,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
            "conversation.item.truncate": self._truncate,
        }

    # -- what the I/O layer reads --

    def events_to_send(self) -> list[BaseModel]:
        """Server events produced since the last call, in order."""
        out, self._outbox = self._outbox, []
        return out

    def jobs_to_run(self) -> list[Recognize | Synthesize]:
        """Work asked for since the last call; answer with ``recognized``/``synthesized``."""
        out, self._jobs = self._jobs, []
        return out

    def speech_ends_to_log(self) -> list[SpeechEnd]:
        """The turn ends declared since the last call, in order (for ``--log-events``)."""
        out, self._speech_ends = self._speech_ends, []
        return out

    def get_timer(self) -> float | None:
        """When the next audio delta (or the next beep) is due (the clock ``now`` is on), None
        if none is."""
        beep = self._next_beep_at()
        answer = self._answer
        if answer is None or answer.audio is None:
            return beep
        sent_s = answer.sent_bytes / BYTES_PER_MS / 1000
        due = answer.started_at + sent_s / self.config.speed
        return due if beep is None else min(due, beep)

    def transcript_of(self, item_id: str) -> str | None:
        """An assistant item's transcript as the client heard it (after any truncation)."""
        item = self._spoken.get(item_id)
        return item.transcript if item else None

    # -- what the I/O layer feeds --

    def start(self, now: float) -> None:
        """The connection is open: the API's first server event."""
        self._emit(SessionCreatedEvent, session=self.session)

    def receive(self, text: str, now: float) -> None:
        """One client event (a WebSocket text message); a refused one gets an ``error``."""
        try:
            event = rt.parse_client_event(text)
            handler = self._handlers.get(event.type)
            if handler is None:
                raise rt.ClientEventError(
                    f"{event.type} is not supported by this example agent.",
                    "unsupported_event",
                    event.event_id,
                    "type",
                )
            try:
                handler(event, now)
            except rt.ClientEventError as refused:
                refused.event_id = refused.event_id or event.event_id
                raise
        except rt.ClientEventError as refused:
            self._outbox.append(self._events.error(refused))

    def receive_binary(self, now: float) -> None:
        """A binary WebSocket message: the protocol has none (audio travels as base64)."""
        refused = rt.ClientEventError(
            "Binary messages are not part of the protocol.", "invalid_type"
        )
        self._outbox.append(self._events.error(refused))

    def recognized(self, item_id: str, transcript: str, asr_ms: float, now: float) -> None:
        """The transcript a ``Recognize`` asked for; answers the turn if it is still current."""
        awaited = self._awaiting_transcript.pop(item_id, None)
        if awaited is None:
            return
        seconds, timings, turn_ended_at = awaited
        self._emit(
            ConversationItemInputAudioTranscriptionCompletedEvent,
            item_id=item_id,
            content_index=0,
            transcript=transcript,
            usage={"type": "duration", "seconds": seconds},
        )
        self._last_transcript = transcript
        # A newer turn (or one in progress) supersedes this one: the caller has moved on.
        if item_id != self._latest_user_item or self._detector.speaking:
            return
        if not self.turns.create_response:
            return
        timings["asr_ms"] = f"{asr_ms:.0f}"
        self._respond(self._answer_text(transcript), timings, turn_ended_at, now, item_id)

    def synthesized(self, response_id: str, audio: bytes, tts_ms: float, now: float) -> None:
        """The speech a ``Synthesize`` asked for: streaming starts (unless it was cancelled)."""
        answer = self._answer
        if answer is None or answer.id != response_id:
            return
        answer.metadata["tts_ms"] = f"{tts_ms:.0f}"
        self._start_audio(answer, audio, now)

    def handle_timer(self, now: float) -> None:
        """Start the beep due by ``now`` (the beep stand-in), send the audio deltas due by
        ``now``; a response is done after its last one."""
        self._beep_if_due(now)
        answer = self._answer
        chunk_bytes = self.config.chunk_ms * BYTES_PER_MS
        while answer is not None and answer.audio is not None:
            sent_s = answer.sent_bytes / BYTES_PER_MS / 1000
            if now < answer.started_at + sent_s / self.config.speed:
                return
            chunk = answer.audio[answer.sent_bytes : answer.sent_bytes + chunk_bytes]
            answer.sent_bytes += len(chunk)
            self._emit_part(ResponseAudioDeltaEvent, answer, delta=base64.b64encode(chunk).decode())
            self._send_transcript(answer)
            if answer.sent_bytes >= len(answer.audio):
                self._finish("completed", None)
                return

    # -- client events --

    def _session_update(self, event: Any, now: float) -> None:
        update = event.session
        if update.type != "realtime":
            raise rt.ClientEventError(
                "This agent runs realtime sessions only.", "invalid_value", param="session.type"
            )
        fields = update.model_dump(mode="json", exclude_unset=True)
        if fields.get("model", self.config.model) != self.config.model:
            raise rt.ClientEventError(
                "The model of a session cannot change.", "invalid_value", param="session.model"
            )
        audio = fields.get("audio") or {}
        for direction in ("input", "output"):
            wanted = (audio.get(direction) or {}).get("format")
            if wanted is not None and (
                wanted.get("type", "audio/pcm") != "audio/pcm"
                or wanted.get("rate", INPUT_HZ) != INPUT_HZ
            ):
                raise rt.ClientEventError(
                    "This agent speaks audio/pcm at 24000 Hz only.",
                    "invalid_value",
                    param=f"session.audio.{direction}.format",
                )
        current = self.session.model_dump(mode="json", exclude_unset=True)
        self.session = RealtimeSessionCreateRequest.model_validate(_merge(current, fields))
        self.turns = turn_settings(self.session)
        self._detector.silence_ms = self.turns.silence_ms
        self._vad.set_threshold(self.turns.threshold)
        if not self.turns.enabled:
            self._detector.reset()
        self._emit(SessionUpdatedEvent, session=self.session)

    def _append(self, event: Any, now: float) -> None:
        if len(event.audio) * 3 // 4 > MAX_APPEND_BYTES:
            raise rt.ClientEventError(
                f"The audio of one append is limited to {MAX_APPEND_BYTES} bytes.",
                "invalid_value",
                param="audio",
            )
        try:
            audio = base64.b64decode(event.audio, validate=True)
        except binascii.Error:
            raise rt.ClientEventError(
                "audio is not valid base64.", "invalid_value", param="audio"
            ) from None
        if self.config.stand_in == "beep":  # no turns: the audio is taken and dropped
            if self._beeps_from is None:
                self._beeps_from = now
                self._beep_if_due(now)
            return
        self._pending += audio
        whole = len(self._pending) - len(self._pending) % FRAME_BYTES
        frames = bytes(self._pending[:whole])
        del self._pending[:whole]
        for offset in range(0, whole, FRAME_BYTES):
            self._frame(frames[offset : offset + FRAME_BYTES], now)

    def _commit_request(self, event: Any, now: float) -> None:
        recording = self._recording
        audio = b"".join(frame for _, frame in recording.preroll) + recording.audio + self._pending
        if pcm.duration_ms(audio, INPUT_HZ) < MIN_COMMIT_MS:
            raise rt.ClientEventError(
                f"The buffer holds less than {MIN_COMMIT_MS} ms of audio.",
                "input_audio_buffer_commit_empty",
            )
        item_id = recording.item_id or self._ids.new("item")
        self._reset_recording()
        self._commit(item_id, audio, {"vad_wait_ms": "0"}, now)

    def _clear(self, event: Any, now: float) -> None:
        self._reset_recording()
        self._emit(InputAudioBufferClearedEvent)

    def _response_create(self, event: Any, now: float) -> None:
        if self._answer is not None:
            raise rt.ClientEventError(
                "Conversation already has an active response.",
                "conversation_already_has_active_response",
            )
        metadata = dict((event.response.metadata or {}) if event.response else {})
        self._respond(self._answer_text(self._last_transcript), metadata, now, now)

    def _response_cancel(self, event: Any, now: float) -> None:
        answer = self._answer
        if answer is None or event.response_id not in (None, answer.id):
            raise rt.ClientEventError(
                "There is no active response to cancel.",
                "response_cancel_not_active",
                param="response_id" if event.response_id else None,
            )
        self._finish("cancelled", "client_cancelled")

    def _truncate(self, event: Any, now: float) -> None:
        if self._answer is not None and self._answer.item_id == event.item_id:
            self._finish("cancelled", "client_cancelled")  # what was not heard is not sent
        item = self._spoken.get(event.item_id)
        if item is None:
            raise rt.ClientEventError(
                f"No assistant audio item {event.item_id!r}.", "invalid_value", param="item_id"
            )
        if event.content_index != 0:
            raise rt.ClientEventError(
                "The item has one content part, 0.", "invalid_value", param="content_index"
            )
        if not 0 <= event.audio_end_ms <= item.sent_ms:
            raise rt.ClientEventError(
                f"audio_end_ms must lie within the {item.sent_ms:.0f} ms of audio sent.",
                "invalid_value",
                param="audio_end_ms",
            )
        item.transcript = words_heard(item.text, event.audio_end_ms, item.total_ms)
        self._emit(
            ConversationItemTruncatedEvent,
            item_id=event.item_id,
            content_index=0,
            audio_end_ms=event.audio_end_ms,
        )

    # -- turns --

    def _frame(self, frame: bytes, now: float) -> None:
        """One 20 ms input frame, on the audio clock."""
        start_ms = self._audio_ms
        self._audio_ms += FRAME_MS
        recording = self._recording
        if not self.turns.enabled:
            recording.audio += frame
            del recording.audio[: max(0, len(recording.audio) - self._max_buffer_bytes())]
            return
        voiced = self._vad(frame)
        if self._detector.speaking:
            recording.audio += frame
        else:
            recording.preroll.append((start_ms, frame))
            keep = (self.turns.prefix_padding_ms + self._detector.start_ms) // FRAME_MS + 1
            while len(recording.preroll) > keep:
                recording.preroll.popleft()
        if voiced:
            recording.last_voiced_at = now
        change = self._detector.push(voiced, start_ms)
        if isinstance(change, SpeechStarted):
            self._speech_started(change, now)
        elif isinstance(change, SpeechStopped):
            self._speech_stopped(change, now)

    def _speech_started(self, change: SpeechStarted, now: float) -> None:
        recording = self._recording
        # The prefix padding, as far as the audio since the last turn holds it.
        wanted_ms = change.first_voiced_ms - self.turns.prefix_padding_ms
        kept = [(start, frame) for start, frame in recording.preroll if start >= wanted_ms]
        audio_start_ms = kept[0][0] if kept else change.first_voiced_ms
        recording.audio = bytearray(b"".join(frame for _, frame in kept))
        recording.preroll.clear()
        recording.item_id = self._ids.new("item")
        self._emit(
            InputAudioBufferSpeechStartedEvent,
            audio_start_ms=audio_start_ms,
            item_id=recording.item_id,
        )
        if self._answer is not None and self.turns.interrupt_response:
            self._finish("cancelled", "turn_detected")  # barge-in

    def _speech_stopped(self, change: SpeechStopped, now: float) -> None:
        recording = self._recording
        item_id = recording.item_id or self._ids.new("item")
        self._emit(
            InputAudioBufferSpeechStoppedEvent, audio_end_ms=change.detected_ms, item_id=item_id
        )
        timings = {
            "vad_wait_ms": f"{(now - recording.last_voiced_at) * 1000:.0f}",
            "vad_wait_audio_ms": str(change.detected_ms - change.last_voiced_end_ms),
        }
        voiced_at = recording.last_voiced_at
        end = SpeechEnd(item_id, now, change.last_voiced_end_ms, change.detected_ms, voiced_at)
        self._speech_ends.append(end)
        audio = bytes(recording.audio)
        self._reset_recording(drop_pending=False)
        self._commit(item_id, audio, timings, now)

    def _reset_recording(self, drop_pending: bool = True) -> None:
        """An empty buffer; ``drop_pending``: with the bytes short of a frame (a clear or a
        commit took them), not when a turn ends inside an append (they are the next audio)."""
        self._recording = _Recording(last_voiced_at=self._recording.last_voiced_at)
        if drop_pending:
            self._pending.clear()
        self._detector.reset()

    def _max_buffer_bytes(self) -> int:
        return self.config.max_turn_ms * BYTES_PER_MS

    def _commit(self, item_id: str, audio: bytes, timings: dict[str, str], now: float) -> None:
        """The buffer becomes a user item; its transcript (or the tone) is what comes next."""
        previous, self._last_item_id = self._last_item_id, item_id
        self._latest_user_item = item_id
        self._emit(InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous)
        item = RealtimeConversationItemUserMessage(
            id=item_id,
            object="realtime.item",
            type="message",
            role="user",
            status="completed",
            content=[{"type": "input_audio", "transcript": None}],
        )
        self._emit(ConversationItemAdded, item=item, previous_item_id=previous)
        self._emit(ConversationItemDone, item=item, previous_item_id=previous)
        if self.config.stand_in is not None:  # the beep answers on its own period
            if self.config.stand_in == "tone" and self.turns.create_response:
                timings.update(asr_ms="0", tts_ms="0", stand_in="tone")
                self._respond("", timings, now, now)
            return
        seconds = pcm.duration_ms(audio, INPUT_HZ) / 1000
        self._awaiting_transcript[item_id] = (seconds, timings, now)
        self._jobs.append(Recognize(item_id, audio))

    # -- the beep stand-in --

    def _next_beep_at(self) -> float | None:
        if self._beeps_from is None:
            return None
        return self._beeps_from + self._beeps * BEEP_PERIOD_S

    def _beep_if_due(self, now: float) -> None:
        """The beep due by ``now``, started at its own time, so that its deltas stay on the
        period's grid however late the timer came; a beep more than a period late is skipped,
        not caught up."""
        start, due = self._beeps_from, self._next_beep_at()
        if start is None or due is None or now < due:
            return
        self._beeps = int((now - start) // BEEP_PERIOD_S) + 1
        at = start + (self._beeps - 1) * BEEP_PERIOD_S
        self._respond("", {"stand_in": "beep", "asr_ms": "0", "tts_ms": "0"}, at, at)

    # -- responses --

    @staticmethod
    def _answer_text(transcript: str) -> str:
        return f"you said {transcript.strip()}" if transcript.strip() else "I did not catch that"

    def _respond(
        self,
        text: str,
        metadata: dict[str, str],
        turn_ended_at: float,
        now: float,
        turn_item_id: str | None = None,
    ) -> None:
        """A new response (to the user item ``turn_item_id``, if a turn asked for it): its item
        and audio part announced; then its audio (or the tone)."""
        if self._answer is not None:
            self._finish("cancelled", "turn_detected")
        answer = _Answer(
            self._ids.new("resp"), self._ids.new("item"), text, metadata, turn_ended_at
        )
        self._answer = answer
        self._emit(ResponseCreatedEvent, response=self._response_object(answer, "in_progress", []))
        item = self._assistant_item(answer, "in_progress", None)
        self._emit(ResponseOutputItemAddedEvent, item=item, output_index=0, response_id=answer.id)
        previous, self._last_item_id = self._last_item_id, answer.item_id
        self._emit(ConversationItemAdded, item=item, previous_item_id=previous)
        self._emit_part(
            ResponseContentPartAddedEvent, answer, part={"type": "audio", "transcript": ""}
        )
        if self.config.stand_in == "tone":
            self._start_audio(answer, pcm.tone(TONE_HZ, TONE_S, INPUT_HZ), now)
        elif self.config.stand_in == "beep":
            beep = pcm.tone(TONE_HZ, BEEP_MS / 1000, INPUT_HZ)
            self._start_audio(answer, beep.ljust(BEEP_ANSWER_MS * BYTES_PER_MS, b"\0"), now)
        else:
            self._jobs.append(Synthesize(answer.id, text, turn_item_id))

    def _start_audio(self, answer: _Answer, audio: bytes, now: float) -> None:
        answer.audio = audio[: len(audio) - len(audio) % pcm.SAMPLE_BYTES]
        answer.started_at = now
        answer.metadata["first_audio_ms"] = f"{(now - answer.turn_ended_at) * 1000:.0f}"
        if not answer.audio:
            self._finish("completed", None)
            return
        self.handle_timer(now)

    def _send_transcript(self, answer: _Answer) -> None:
        """The transcript follows the audio: the words sent so far, by their share of it."""
        assert answer.audio is not None
        heard = words_heard(
            answer.text, answer.sent_bytes / BYTES_PER_MS, len(answer.audio) / BYTES_PER_MS
        )
        if len(heard) > len(answer.transcript_sent):
            delta = heard[len(answer.transcript_sent) :]
            answer.transcript_sent = heard
            self._emit_part(ResponseAudioTranscriptDeltaEvent, answer, delta=delta)

    def _finish(self, status: str, reason: str | None) -> None:
        """The response ends: completed, or cancelled (barge-in, response.cancel, truncate)."""
        answer = self._answer
        assert answer is not None
        self._answer = None
        if status == "completed":
            if answer.text and answer.transcript_sent != answer.text:
                self._emit_part(
                    ResponseAudioTranscriptDeltaEvent,
                    answer,
                    delta=answer.text[len(answer.transcript_sent) :],
                )
            answer.transcript_sent = answer.text
        transcript = answer.transcript_sent
        self._emit_part(ResponseAudioDoneEvent, answer)
        self._emit_part(ResponseAudioTranscriptDoneEvent, answer, transcript=transcript)
        self._emit_part(
            ResponseContentPartDoneEvent, answer, part={"type": "audio", "transcript": transcript}
        )
        item = self._assistant_item(
            answer, "completed" if status == "completed" else "incomplete", transcript
        )
        self._emit(ResponseOutputItemDoneEvent, item=item, output_index=0, response_id=answer.id)
        self._emit(ConversationItemDone, item=item)
        response = self._response_object(answer, status, [item], reason)
        self._emit(ResponseDoneEvent, response=response)
        total_ms = pcm.duration_ms(answer.audio or b"", INPUT_HZ)
        sent_ms = answer.sent_bytes / BYTES_PER_MS
        self._spoken[answer.item_id] = _SpokenItem(answer.text, sent_ms, total_ms, transcript)
        while len(self._spoken) > KEPT_ITEMS:
            self._spoken.popitem(last=False)

    def _response_object(
        self, answer: _Answer, status: str, output: list, reason: str | None = None
    ) -> RealtimeResponse:
        details = None if status == "in_progress" else {"type": status, "reason": reason}
        return RealtimeResponse(
            id=answer.id,
            object="realtime.response",
            status=status,
            output=output,
            output_modalities=["audio"],
            audio={"output": {"format": PCM_24K, "voice": self.config.voice}},
            metadata=dict(answer.metadata),
            **({"status_details": details} if details else {}),
        )

    def _assistant_item(self, answer: _Answer, status: str, transcript: str | None) -> Any:
        return RealtimeConversationItemAssistantMessage(
            id=answer.item_id,
            object="realtime.item",
            type="message",
            role="assistant",
            status=status,
            content=[]
            if transcript is None
            else [{"type": "output_audio", "transcript": transcript}],
        )

    def _emit(self, model: type[BaseModel], **fields: Any) -> None:
        self._outbox.append(self._events.make(model, **fields))

    def _emit_part(self, model: type[BaseModel], answer: _Answer, **fields: Any) -> None:
        """An event about the answer's one audio content part."""
        self._emit(
            model,
            response_id=answer.id,
            item_id=answer.item_id,
            output_index=0,
            content_index=0,
            **fields,
        )
