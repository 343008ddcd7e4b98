"""Control events from a backend: audio.clear discards buffered speech, session.hangup ends."""

from __future__ import annotations

import asyncio

from tests.support.inprocess import direct_config, running
from tests.support.tone_call import run_client
from tests.support.waits import run, wait_until
from transceiver.backend import FRAME_BYTES, Backend, BackendSession
from transceiver.call.outbound_track import BackendAudioTrack


class ScriptedSession(BackendSession):
    def __init__(self, emit_audio, emit_event) -> None:
        self.emit_audio = emit_audio
        self.emit_event = emit_event

    def audio_in(self, pcm: bytes) -> None:
        pass

    def event_in(self, event: dict) -> None:
        if event.get("type") == "hello":
            self.emit_audio(bytes(FRAME_BYTES) * 500)  # 10 s of speech at once
            self.emit_event({"type": "audio.clear"})
            self.emit_event({"type": "session.hangup"})

    async def close(self, reason: str) -> None:
        pass


class ScriptedBackend(Backend):
    name = "scripted"

    def __init__(self) -> None:
        self.sessions: list[ScriptedSession] = []

    async def open_session(self, info, emit_audio, emit_event, on_failure) -> BackendSession:
        session = ScriptedSession(emit_audio, emit_event)
        self.sessions.append(session)
        return session


def test_backend_can_clear_buffered_audio_and_hang_up(monkeypatch):
    # Record what clear() drops on every track from the start: the scripted backend acts as soon as
    # the data channel opens, which can be before a poll of server.sessions would see the session.
    cleared: list[int] = []
    original_clear = BackendAudioTrack.clear

    def recording_clear(track: BackendAudioTrack) -> int:
        cleared.append(original_clear(track))
        return cleared[-1]

    monkeypatch.setattr(BackendAudioTrack, "clear", recording_clear)

    async def go():
        async with running(direct_config(), ScriptedBackend()) as (server, url):
            call = asyncio.create_task(run_client(url, 440, seconds=3, delete=False))
            hung_up = server.metrics.sessions_ended.labels("backend_hangup")._value.get
            assert await wait_until(lambda: hung_up() > 0 and not server.sessions), (
                "the backend's hang-up ended the call"
            )
            assert hung_up() == 1
            assert cleared and cleared[0] >= 490, "the 10 s of queued speech were discarded"
            await call

    run(go())
