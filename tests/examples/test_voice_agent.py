"""The example voice agent as a client meets it: a real process on loopback, a WebSocket from
aiohttp, a sentence spoken by espeak-ng. Every server event must validate against the pinned
``openai`` package's server-event union; the answer must be speech (energy, duration), cancelled
by speech over it, truncatable; bad events get ``error`` and the call goes on; a wrong bearer
is refused."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pydantic
import pytest
from openai import AsyncOpenAI
from openai.types.realtime import RealtimeServerEvent

from testbed.procfs import descendants
from tests.support.voice_agent import agent_module, running_agent, spoken
from tests.support.waits import run

KEY = "sk-test-agent-key"
RATE_HZ = 24_000
BYTES_PER_MS = RATE_HZ // 1000 * 2
FRAME_BYTES = 20 * BYTES_PER_MS
SENTENCE = "hello world, what time is it"
SERVER_EVENT = pydantic.TypeAdapter(RealtimeServerEvent)


def silence(ms: int) -> bytes:
    return b"\x00" * (ms * BYTES_PER_MS)


def duration_ms(audio: bytes) -> float:
    return len(audio) / BYTES_PER_MS


def rms(audio: bytes) -> float:
    return float(np.sqrt(np.mean(np.frombuffer(audio, "<i2").astype(np.float64) ** 2)))


@pytest.fixture(scope="module")
def speech() -> bytes:
    return spoken(SENTENCE)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("agent")
    (folder / "key").write_text(KEY + "\n")
    log = folder / "events.jsonl"
    with running_agent("--key-file", str(folder / "key"), "--log-events", str(log)) as running:
        running.log = log
        yield running


@pytest.fixture(scope="module")
def tone_agent() -> Any:
    # At real time, so that a response.cancel sent after the first delta is always in time.
    with running_agent("--stand-in", "tone", "--speed", "1") as running:
        yield running


class Client:
    """A Realtime client: every server event kept, in order, with its arrival time."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.arrived: list[float] = []

    async def read(self) -> None:
        async for message in self.ws:
            if message.type is aiohttp.WSMsgType.TEXT:
                self.events.append(json.loads(message.data))
                self.arrived.append(time.monotonic())

    async def send(self, **event: Any) -> None:
        await self.ws.send_json(event)

    async def append(self, audio: bytes, paced: bool = False) -> None:
        """``audio`` in 20 ms appends; ``paced``: 20 ms apart at least, as a caller speaks (a
        busy machine makes it slower, never a burst)."""
        for offset in range(0, len(audio), FRAME_BYTES):
            chunk = base64.b64encode(audio[offset : offset + FRAME_BYTES]).decode()
            await self.send(type="input_audio_buffer.append", audio=chunk)
            if paced:
                await asyncio.sleep(0.02)

    async def next(
        self, kind: str, after: int = 0, where: Callable[[dict], bool] = lambda e: True
    ) -> int:
        """The index of the first ``kind`` event at or after ``after`` (and ``where``)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for i in range(after, len(self.events)):
                if self.events[i]["type"] == kind and where(self.events[i]):
                    return i
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {kind} after #{after}: {[e['type'] for e in self.events]}")

    def all(self, kind: str, response_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["type"] == kind and response_id in (None, e.get("response_id"))
        ]

    def audio_of(self, response_id: str) -> bytes:
        deltas = self.all("response.output_audio.delta", response_id)
        return b"".join(base64.b64decode(e["delta"]) for e in deltas)

    def assert_all_validate(self) -> None:
        """Each event parses as the server event its ``type`` names in the openai package."""
        for event in self.events:
            parsed = SERVER_EVENT.validate_python(event)
            assert parsed.type == event["type"], event


@contextlib.asynccontextmanager
async def connect(url: str, key: str | None = KEY) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{url}?model=rtcedge-voice-agent", headers=headers) as ws,
    ):
        client = Client(ws)
        reader = asyncio.create_task(client.read())
        try:
            await client.next("session.created")
            yield client
        finally:
            await ws.close()
            await reader
    client.assert_all_validate()


def test_a_spoken_turn_is_transcribed_and_answered_in_speech(agent: Any, speech: bytes) -> None:
    async def body() -> dict[str, str]:
        async with connect(agent.url) as c:
            assert c.events[0]["session"]["audio"]["input"]["format"] == {
                "type": "audio/pcm",
                "rate": 24000,
            }
            turn_detection = {"type": "server_vad", "silence_duration_ms": 400}
            await c.send(
                type="session.update",
                session={
                    "type": "realtime",
                    "audio": {"input": {"turn_detection": turn_detection}},
                },
            )
            updated = c.events[await c.next("session.updated")]
            detection = updated["session"]["audio"]["input"]["turn_detection"]
            assert detection["silence_duration_ms"] == 400
            assert detection["prefix_padding_ms"] == 300, "the rest of the session is kept"

            await c.append(silence(500) + speech + silence(700), paced=True)
            done = await c.next("response.done")
            kinds = [e["type"] for e in c.events]
            order = [
                "input_audio_buffer.speech_started",
                "input_audio_buffer.speech_stopped",
                "input_audio_buffer.committed",
                "conversation.item.added",
                "conversation.item.done",
                "conversation.item.input_audio_transcription.completed",
                "response.created",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_audio.delta",
                "response.output_audio.done",
                "response.output_audio_transcript.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.done",
            ]
            positions = [kinds.index(kind) for kind in order]
            assert positions == sorted(positions), kinds

            started = c.all("input_audio_buffer.speech_started")[0]
            stopped = c.all("input_audio_buffer.speech_stopped")[0]
            assert started["item_id"] == stopped["item_id"]
            assert 100 <= started["audio_start_ms"] <= 500, "the 300 ms prefix padding"
            speech_end_ms = 500 + duration_ms(speech)
            assert speech_end_ms <= stopped["audio_end_ms"] <= speech_end_ms + 600

            heard = c.all("conversation.item.input_audio_transcription.completed")[0]
            assert heard["item_id"] == started["item_id"] and heard["transcript"].strip()

            response = c.events[done]["response"]
            assert response["status"] == "completed"
            audio = c.audio_of(response["id"])
            assert rms(audio) > 500, "the answer is speech, not silence"
            assert 600 <= duration_ms(audio) <= 6000
            deltas = c.all("response.output_audio.delta", response["id"])
            assert all(len(base64.b64decode(e["delta"])) <= 100 * BYTES_PER_MS for e in deltas)
            first, last = (c.arrived[c.events.index(e)] for e in (deltas[0], deltas[-1]))
            assert last - first < duration_ms(audio) / 1000 * 0.6, "sent faster than real time"
            said = c.all("response.output_audio_transcript.done")[0]["transcript"]
            assert said == f"you said {heard['transcript'].strip()}"
            streamed = "".join(e["delta"] for e in c.all("response.output_audio_transcript.delta"))
            assert streamed == said
            assert response["output"][0]["content"][0]["transcript"] == said

            metadata = response["metadata"]
            for key in ("vad_wait_ms", "asr_ms", "tts_ms", "first_audio_ms"):
                assert float(metadata[key]) >= 0, metadata
            assert float(metadata["vad_wait_ms"]) >= 300, "400 ms of silence, at real time"
            assert float(metadata["asr_ms"]) > 0 and float(metadata["tts_ms"]) > 0
            assert_turn_logged(agent.log, started["item_id"], response["id"])
            return metadata

    metadata = run(body())
    print("turn timings:", metadata)


def assert_turn_logged(log: Path, item_id: str, response_id: str) -> None:
    """``--log-events`` has the turn's moments inside the agent, in time order, then the
    answer's first delta: the end its detector judged, recognition, synthesis."""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    marks = [e for e in lines if e["dir"] == "turn" and e.get("item_id") == item_id]
    assert [e["type"] for e in marks] == list(agent_module("agent").TURN_MARKS), marks
    assert [e["t"] for e in marks] == sorted(e["t"] for e in marks)
    stopped = marks[0]
    assert stopped["last_voiced_t"] <= stopped["t"]
    assert stopped["detected_ms"] - stopped["speech_end_ms"] == 400, "the session's silence"
    assert {e.get("response_id") for e in marks[3:]} == {response_id}
    assert marks[2]["transcript"].strip() and marks[4]["audio_ms"] > 0
    first = next(
        e
        for e in lines
        if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id
    )
    assert first["dir"] == "out" and first["t"] >= marks[-1]["t"]


def test_speech_over_the_answer_cancels_it_and_a_truncate_is_acknowledged(
    agent: Any, speech: bytes
) -> None:
    async def body() -> None:
        async with connect(agent.url) as c:
            await c.append(speech + silence(700))
            first_delta = await c.next("response.output_audio.delta")
            answer = c.events[first_delta]
            await c.append(speech + silence(700))  # the caller speaks over the answer

            barge_in = await c.next("input_audio_buffer.speech_started", first_delta)
            done = await c.next("response.done", first_delta)
            response = c.events[done]["response"]
            assert response["id"] == answer["response_id"]
            assert response["status"] == "cancelled"
            assert response["status_details"]["reason"] == "turn_detected"
            later = c.events[barge_in:]
            assert not [e for e in later if e.get("response_id") == answer["response_id"]
                        and e["type"] == "response.output_audio.delta"], "deltas stop"  # fmt: skip
            received = c.audio_of(answer["response_id"])
            full_text = (
                "you said "
                + c.all("conversation.item.input_audio_transcription.completed")[0][
                    "transcript"
                ].strip()
            )
            full = agent_module("speech").Synthesizer().speak(full_text)
            assert duration_ms(received) < duration_ms(full) - 200, "cut short"
            said = c.all("response.output_audio_transcript.done")[0]["transcript"]
            assert full_text.startswith(said) and len(said) < len(full_text)

            heard_ms = int(duration_ms(received) // 2)
            await c.send(
                type="conversation.item.truncate",
                event_id="ev_truncate",
                item_id=answer["item_id"],
                content_index=0,
                audio_end_ms=heard_ms,
            )
            truncated = c.events[await c.next("conversation.item.truncated")]
            assert (truncated["item_id"], truncated["audio_end_ms"]) == (
                answer["item_id"],
                heard_ms,
            )

            # The turn spoken over the answer is answered in full.
            second = await c.next("response.done", done + 1)
            assert c.events[second]["response"]["status"] == "completed"
            await c.send(
                type="conversation.item.truncate",
                event_id="ev_beyond",
                item_id=answer["item_id"],
                content_index=0,
                audio_end_ms=int(duration_ms(received)) + 1000,
            )
            error = c.events[await c.next("error")]["error"]
            assert (error["event_id"], error["param"]) == ("ev_beyond", "audio_end_ms")

        lines = [json.loads(line) for line in Path(agent.log).read_text().splitlines()]
        got = [x for x in lines if x["dir"] == "in" and x.get("event_id") == "ev_truncate"]
        assert got and got[0]["audio_end_ms"] == heard_ms, "the agent logs the truncate"
        cut = [x for x in lines if x["type"] == "conversation.item.truncated"][-1]["transcript"]
        assert said.startswith(cut) and len(cut) <= len(said), "cut to the audio heard"

    run(body())


def test_bad_events_get_an_error_and_the_call_goes_on(agent: Any) -> None:
    async def body() -> None:
        async with connect(agent.url) as c:
            await c.ws.send_str("{not json")
            await c.send(type="no.such.event", event_id="ev_unknown")
            await c.send(type="input_audio_buffer.append", event_id="ev_missing")
            await c.send(type="input_audio_buffer.append", event_id="ev_b64", audio="***")
            await c.send(type="response.cancel", event_id="ev_nothing")
            await c.send(
                type="session.update",
                event_id="ev_pcmu",
                session={
                    "type": "realtime",
                    "audio": {"input": {"format": {"type": "audio/pcmu"}}},
                },
            )
            oversized = base64.b64encode(b"\x00" * (15 * 1024 * 1024 + 2)).decode()
            await c.send(type="input_audio_buffer.append", event_id="ev_big", audio=oversized)
            expected = ["ev_unknown", "ev_missing", "ev_b64", "ev_nothing", "ev_pcmu", "ev_big"]
            last = await c.next("error", where=lambda e: e["error"]["event_id"] == "ev_big")
            errors = [e["error"] for e in c.events[: last + 1] if e["type"] == "error"]
            assert [e["event_id"] for e in errors] == [None, *expected]
            assert {e["type"] for e in errors} == {"invalid_request_error"}
            assert errors[1]["param"] == "type" and errors[2]["param"] == "audio"
            await c.send(type="session.update", session={"type": "realtime"})
            await c.next("session.updated")  # still served

    run(body())


def test_a_wrong_or_missing_bearer_is_refused_with_401(agent: Any) -> None:
    async def body() -> None:
        for key in ("sk-wrong", None):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                async with connect(agent.url, key):
                    pass
            assert refused.value.status == 401

    run(body())


def test_the_tone_stand_in_answers_each_turn_at_once_and_can_be_cancelled(
    tone_agent: Any, speech: bytes
) -> None:
    async def body() -> None:
        async with connect(tone_agent.url, key=None) as c:
            await c.append(speech + silence(700))
            done = await c.next("response.done")
            response = c.events[done]["response"]
            assert response["status"] == "completed"
            audio = c.audio_of(response["id"])
            assert duration_ms(audio) == 1000
            spectrum = np.abs(np.fft.rfft(np.frombuffer(audio, "<i2")))
            assert abs(np.argmax(spectrum) * RATE_HZ / (len(audio) // 2) - 440) <= 2
            assert not c.all("conversation.item.input_audio_transcription.completed")
            assert response["metadata"]["stand_in"] == "tone"
            assert float(response["metadata"]["first_audio_ms"]) < 50, "answered at once"

            await c.append(speech + silence(700))
            first_delta = await c.next("response.output_audio.delta", done)
            await c.send(type="response.cancel")
            cancelled = await c.next("response.done", first_delta)
            status = c.events[cancelled]["response"]["status_details"]
            assert status == {"type": "cancelled", "reason": "client_cancelled"}

    run(body())


def test_the_official_openai_client_talks_to_it(agent: Any, speech: bytes) -> None:
    """openai's own Realtime client, pointed at the agent by ``websocket_base_url`` only."""

    async def body() -> tuple[str, str]:
        client = AsyncOpenAI(api_key=KEY, websocket_base_url=agent.url.removesuffix("/realtime"))
        async with client.realtime.connect(model="rtcedge-voice-agent") as connection:
            audio = speech + silence(700)
            for offset in range(0, len(audio), FRAME_BYTES):
                chunk = base64.b64encode(audio[offset : offset + FRAME_BYTES]).decode()
                await connection.input_audio_buffer.append(audio=chunk)
            heard = said = ""
            async for event in connection:
                if event.type == "conversation.item.input_audio_transcription.completed":
                    heard = event.transcript
                elif event.type == "response.output_audio_transcript.done":
                    said = event.transcript
                elif event.type == "response.done":
                    assert event.response.status == "completed"
                    return heard, said
        raise AssertionError("the connection ended before response.done")

    heard, said = run(body())
    assert heard and said == f"you said {heard.strip()}"


def test_its_recognition_process_ends_with_it_even_when_it_is_killed() -> None:
    with running_agent() as running:
        children = descendants(running.process.pid)
        assert children, "the recognition process (and multiprocessing's resource tracker)"
        os.kill(running.process.pid, signal.SIGKILL)
        running.process.wait(timeout=5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(pid) for pid in children):
            time.sleep(0.05)
        assert not any(alive(pid) for pid in children), [c for c in children if alive(c)]


def alive(pid: int) -> bool:
    """A process that runs (a zombie, exited but not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
