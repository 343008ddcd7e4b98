"""pcm16 at 8, 16 and 24 kHz: a real aiortc call's tone reaches the backend at the session's rate
(libopus decoding to it natively) and the backend's PCM at that rate reaches the caller."""

from __future__ import annotations

import array
import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from testbed.callers import goertzel_power
from tests.support.inprocess import direct_config, running
from tests.support.tone_call import run_client
from tests.support.waits import run
from tests.transceiver.test_backend import Sinks, info
from transceiver.backend import frame_bytes
from transceiver.backends import create_backend
from transceiver.backends.echo import EchoBackend, EchoSession


class RecordingEcho(EchoBackend):
    """The echo, keeping every frame it was given."""

    def __init__(self, sample_rate: int) -> None:
        super().__init__("pcm16", sample_rate)
        self.frames: list[bytes] = []

    async def open_session(self, info, emit_audio, emit_event, on_failure) -> EchoSession:
        session = await super().open_session(info, emit_audio, emit_event, on_failure)
        record = session.audio_in

        def audio_in(pcm: bytes) -> None:
            self.frames.append(bytes(pcm))
            record(pcm)

        session.audio_in = audio_in  # type: ignore[method-assign]
        return session


@pytest.mark.parametrize("rate", [8000, 16000, 24000])
def test_a_call_at_each_rate_carries_the_tone_both_ways(rate: int) -> None:
    backend = RecordingEcho(rate)

    async def go():
        async with running(direct_config(), backend) as (_server, url):
            return await run_client(url, 440, seconds=2.0, other_hz=[1200])

    result = run(go())
    assert result.connected, result.error
    assert backend.frames and {len(f) for f in backend.frames} == {frame_bytes(rate)}
    voiced = [f for f in backend.frames[25:] if max(array.array("h", f)) > 1000]
    assert len(voiced) > 20, "the caller's tone reached the backend"
    for frame in voiced[:10]:
        samples = array.array("h", frame)
        assert goertzel_power(samples, 440, rate) > 20 * goertzel_power(samples, 1200, rate)
    # What the echo gave back at that rate was encoded and heard as the same tone.
    assert result.frames_with_own_tone > 0.5 * result.frames_expected, result


def test_the_websocket_backend_takes_the_rate_the_server_picks() -> None:
    seen: list[dict] = []

    async def call(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("rtcedge.pcm16.16000",))
        await ws.prepare(request)
        async for msg in ws:
            if msg.type is aiohttp.WSMsgType.TEXT:
                seen.append(json.loads(msg.data))
        return ws

    async def go() -> None:
        app = web.Application()
        app.router.add_get("/call", call)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"ws://127.0.0.1:{runner.addresses[0][1]}/call"
        backend = create_backend("websocket", url)
        session = await backend.open_session(info(), *Sinks().args())
        assert (session.audio_format, session.sample_rate) == ("pcm16", 16000)
        session.audio_in(bytes(640))
        with pytest.raises(ValueError, match="640-byte"):
            session.audio_in(bytes(1920))
        await session.close("hangup")
        await backend.close()
        await runner.cleanup()
        assert seen[0]["audio"]["sample_rate"] == 16000

    asyncio.run(go())


def test_a_rate_libopus_lacks_fails_at_start() -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        create_backend("echo", audio_format="pcm16", sample_rate=44100)
