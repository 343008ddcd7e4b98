"""The benchmark's stand-in backends: their schedule with numbers, and each protocol's server on
a real socket: a beep answered after the caller's first audio, every audio message logged with
its session and peak, a wrong key refused at the upgrade (gRPC: UNAUTHENTICATED, the stream
opened as the transceiver opens it, with its own messages)."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from testbed.backend_standins import (
    CHUNK_MS,
    SPEED,
    BeepAnswers,
    EventLog,
    StandInConfig,
    StandInProcess,
    make_app,
    peak,
)
from testbed.callers import AUDIBLE_PEAK
from transceiver.backends.media_streams.g711 import pcm16_to_ulaw, ulaw_to_pcm16

SESSION = "3f2a9c0e5b7d4e1f8a6b2c3d4e5f6a7b"
LOUD = struct.pack("<160h", *([9000, -9000] * 80))  # 20 ms at 8 kHz


def test_answers_are_a_beep_then_silence_each_period_from_the_first_audio() -> None:
    answers = BeepAnswers(24000)
    assert answers.take(100.0) == [] and answers.due_at() is None  # no audio heard yet
    answers.start(100.0)
    answers.start(100.5)  # the first audio only
    first = answers.take(100.0)
    assert len(first) == 1 and peak(first[0]) >= AUDIBLE_PEAK and len(first[0]) == 4800
    rest = answers.take(100.0 + 8 * CHUNK_MS / 1000 / SPEED)  # 4 x ahead: all of it by 0.2 s
    assert len(rest) == 8 and all(peak(c) == 0 for c in rest)
    assert answers.due_at() == 101.0
    assert answers.take(100.99) == []


def test_a_stalled_timer_skips_to_the_current_answer() -> None:
    answers = BeepAnswers(8000)
    answers.start(0.0)
    answers.take(0.0)  # the first beep
    late = answers.take(3.05)  # 3 s of a stall: the rest of answer 0 and answers 1, 2 skipped
    assert peak(late[0]) >= AUDIBLE_PEAK and answers.sent == 3 * 9 + len(late)


def lines(path: Path) -> list[dict]:
    return [json.loads(raw) for raw in path.read_text().splitlines()]


async def exchange(
    url: str, headers: dict, protocols: tuple, first: list, take, until_s: float = 2.0
) -> list:
    """Connect, send ``first`` (text, or bytes), then gather what ``take`` keeps for a while."""
    got: list = []
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(url, headers=headers, protocols=protocols) as ws,
    ):
        for message in first:
            await (ws.send_bytes(message) if isinstance(message, bytes) else ws.send_str(message))
        try:
            async with asyncio.timeout(until_s):
                async for msg in ws:
                    kept = take(msg)
                    if kept is not None:
                        got.append(kept)
        except TimeoutError:
            pass
    return got


def test_the_websocket_stand_in_as_a_process_beeps_in_pcm16_at_its_rate(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    standin = StandInProcess(["--rate", "8000", "--log-events", str(log)], protocol="websocket")
    standin.start(timeout_s=30)
    try:
        url = f"{standin.url}call?session_id={SESSION}"
        start = json.dumps({"type": "session.start", "session_id": SESSION})
        auth = {"Authorization": f"Bearer {standin.key}"}

        def audio(msg: aiohttp.WSMessage) -> bytes | None:
            return msg.data if msg.type is aiohttp.WSMsgType.BINARY else None

        got = asyncio.run(exchange(url, auth, ("rtcedge.pcm16.8000",), [start, LOUD], audio, 1.5))
        assert got and peak(got[0]) >= AUDIBLE_PEAK and len(got[0]) == 1600  # 100 ms at 8 kHz
        assert any(peak(c) == 0 for c in got)
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            asyncio.run(exchange(url, {"Authorization": "Bearer wrong"}, (), [], audio, 0.5))
        assert refused.value.status == 401
    finally:
        standin.stop()
    events = lines(log)
    assert {e["call"] for e in events} == {SESSION}
    heard = [e for e in events if e["dir"] == "in"]
    assert len(heard) == 1 and heard[0]["audio_peak"] == 9000 and heard[0]["type"] == "audio"
    said = [e for e in events if e["dir"] == "out"]
    assert said[0]["audio_peak"] >= AUDIBLE_PEAK and len(said) >= len(got)


async def media_streams_call(log_file) -> list[bytes]:
    server = TestServer(make_app(StandInConfig("media-streams"), EventLog(log_file)))
    await server.start_server()
    try:
        url = str(server.make_url("/bot"))
        start = {"event": "start", "streamSid": "MZ1", "start": {"callSid": "CA" + SESSION}}
        media = {
            "event": "media",
            "media": {"payload": base64.b64encode(pcm16_to_ulaw(LOUD)).decode()},
        }
        first = [json.dumps({"event": "connected"}), json.dumps(start), json.dumps(media)]

        def audio(msg: aiohttp.WSMessage) -> bytes | None:
            event = json.loads(msg.data)
            assert event["event"] == "media" and event["streamSid"] == "MZ1"
            return ulaw_to_pcm16(base64.b64decode(event["media"]["payload"]))

        return await exchange(url, {}, (), first, audio, 1.5)
    finally:
        await server.close()


def test_the_media_streams_stand_in_beeps_in_mu_law_for_its_stream(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    with log.open("a", buffering=1) as file:
        got = asyncio.run(media_streams_call(file))
    assert got and peak(got[0]) >= AUDIBLE_PEAK and len(got[0]) == 1600  # 100 ms at 8 kHz
    events = lines(log)
    assert {e["call"] for e in events} == {SESSION}
    assert [e["dir"] for e in events][:2] == ["in", "out"] and events[0]["audio_peak"] > 8000


async def grpc_call(url: str, key: str, frames: list[bytes], until_s: float) -> list[bytes]:
    """One ``Call`` stream as the transceiver opens it (raw bytes, our start, then ``frames``);
    the pcm16 the stand-in sent back within ``until_s``, its accept first checked."""
    import grpc.aio

    from transceiver.backend import SessionInfo
    from transceiver.backends.grpc.protocol import METHOD, accepted_format, start_message
    from transceiver.backends.grpc.v1 import backend_pb2 as pb

    got: list[bytes] = []
    async with grpc.aio.insecure_channel(url.removeprefix("grpc://")) as channel:
        stream = channel.stream_stream(METHOD)(
            metadata=(("authorization", f"Bearer {key}"), ("rtcedge-session-id", SESSION))
        )
        await stream.write(start_message(SessionInfo(SESSION, 7, "127.0.0.1")))
        accepted = accepted_format(await stream.read())
        assert (accepted.audio_format, accepted.sample_rate) == ("pcm16", 24000)
        for pcm in frames:
            await stream.write(pb.ToBackend(pcm16=pb.Pcm16(pcm=pcm)).SerializeToString())
        try:
            async with asyncio.timeout(until_s):
                while (data := await stream.read()) is not grpc.aio.EOF:
                    message = pb.FromBackend.FromString(data)
                    if message.WhichOneof("kind") == "pcm16":
                        got.append(message.pcm16.pcm)
        except TimeoutError:
            pass
        stream.cancel()
    return got


async def grpc_refusal(url: str, key: str) -> Any:
    """The status a ``Call`` stream with ``key`` ends with, read without writing: a write racing
    the server's abort can turn its status into grpcio's own INTERNAL (grpc/grpc#36066)."""
    import grpc.aio

    from transceiver.backends.grpc.protocol import METHOD

    async with grpc.aio.insecure_channel(url.removeprefix("grpc://")) as channel:
        stream = channel.stream_stream(METHOD)(metadata=(("authorization", f"Bearer {key}"),))
        try:
            async with asyncio.timeout(5):
                await stream.read()
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        stream.cancel()
    return None


def test_the_grpc_stand_in_as_a_process_accepts_pcm16_24k_and_beeps(tmp_path: Path) -> None:
    grpc = pytest.importorskip("grpc", reason="the grpc extra: pip install -e '.[grpc]'")

    log = tmp_path / "events.jsonl"
    standin = StandInProcess(["--log-events", str(log)], protocol="grpc")
    standin.start(timeout_s=30)
    try:
        assert standin.url.startswith("grpc://127.0.0.1:")
        loud = struct.pack("<480h", *([9000, -9000] * 240))  # 20 ms at 24 kHz
        got = asyncio.run(grpc_call(standin.url, standin.key, [loud], 1.5))
        assert got and peak(got[0]) >= AUDIBLE_PEAK and len(got[0]) == 4800  # 100 ms, 24 kHz
        assert any(peak(c) == 0 for c in got)
        assert asyncio.run(grpc_refusal(standin.url, "wrong")) is grpc.StatusCode.UNAUTHENTICATED
    finally:
        standin.stop()
    events = lines(log)
    assert {e["call"] for e in events} == {SESSION}
    heard = [e for e in events if e["dir"] == "in"]
    assert len(heard) == 1 and heard[0]["audio_peak"] == 9000 and heard[0]["type"] == "audio"
    said = [e for e in events if e["dir"] == "out"]
    assert said[0]["audio_peak"] >= AUDIBLE_PEAK and len(said) >= len(got)
