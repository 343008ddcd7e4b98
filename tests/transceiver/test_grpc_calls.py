"""``--backend grpc`` end to end: a relay and a transceiver as processes, the example gRPC backend
(examples/grpc_backend/server.py, grpcio) in the test's process, and real aiortc callers
through the relay.

Five callers at once, the backend accepting each call in another format (pcm16 at 8, 16, 24
and 48 kHz, and Opus): each hears its own tone back, and the backend got the caller's audio in
that format; events go both ways. A backend that plays seconds of audio ahead and then clears
it: the caller hears it stop. A backend that fails mid-call ends that call only, with reason
``backend_error``; the other call goes on.
"""

from __future__ import annotations

import array
import asyncio
import itertools
import json
import math
import socket
import time
from collections import defaultdict

import aiohttp
import pytest

pytest.importorskip("grpc", reason="the grpc extra: pip install -e '.[grpc]'")

from common.sessionid import verify_session_id
from testbed.callers import goertzel_power
from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.grpc_stack import Caller, example, serving
from tests.support.tone_call import run_client
from tests.support.waits import run, wait_until
from transceiver.backends.grpc.v1 import backend_pb2 as pb

KEY = "grpc-backend-key-" + "k" * 16
ENDED = "rtcedge_transceiver_sessions_ended_total"
EchoBackend = example().EchoBackend
FORMATS = {  # each caller's tone: the format its call is accepted in
    440.0: (pb.ENCODING_PCM16, 8000),
    660.0: (pb.ENCODING_PCM16, 16000),
    880.0: (pb.ENCODING_PCM16, 24000),
    1100.0: (pb.ENCODING_PCM16, 48000),
    1320.0: (pb.ENCODING_OPUS, 48000),
}


@pytest.fixture(scope="module")
def stack():
    """A relay and a transceiver whose backend is grpc://127.0.0.1:PORT, with a bearer; each
    test serves its own backend there."""
    port = free_port(kind=socket.SOCK_STREAM)
    relay = RelayProcess({}, workers=1, pin=False)
    trx = TransceiverProcess(
        relay,
        extra_args=["--backend", "grpc", "--backend-url", f"grpc://127.0.0.1:{port}",
                    "--client-rate", "0"],
        extra_env={"RTCEDGE_BACKEND_KEY": KEY},  # the bearer: never on a command line
    )  # fmt: skip
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        yield relay, trx, port


class Recording(EchoBackend):
    """The example's echo, accepting each call in the format of the order it came in, and
    keeping what each call sent."""

    def __init__(self, formats: list[tuple[int, int]]) -> None:
        super().__init__(key=KEY)
        self.formats = formats
        self.accepted: dict[str, tuple[int, int]] = {}
        self.received: dict[str, list[pb.ToBackend]] = defaultdict(list)

    def accept(self, start: pb.SessionStart) -> pb.AudioFormat:
        encoding, rate = self.formats.pop(0)
        self.accepted[start.session_id] = (encoding, rate)
        return pb.AudioFormat(encoding=encoding, sample_rate=rate)

    def answer(self, start, message):
        self.received[start.session_id].append(message)
        return super().answer(start, message)


def call_id(relay: RelayProcess, location: str) -> str:
    return verify_session_id(relay.keyring, location.rsplit("/", 1)[1], time.time(), 600).call_id


def test_audio_goes_both_ways_in_every_format_and_events_come_back(stack):
    relay, trx, port = stack
    backend = Recording(list(FORMATS.values()))

    async def go():
        async with serving(backend, port):
            others = list(FORMATS)
            calls = []
            for hz in FORMATS:  # one at a time: each call's format is its place in the order
                calls.append(asyncio.ensure_future(run_client(trx.url, hz, 2.5, others)))
                count = len(calls)
                assert await wait_until(lambda n=count: len(backend.accepted) == n, 10)
            return await asyncio.gather(*calls)

    results = run(go(), 60)
    for result, (hz, audio) in zip(results, FORMATS.items(), strict=True):
        assert result.connected, result.error
        sid = call_id(relay, result.location)
        assert backend.accepted[sid] == audio
        assert result.frames_with_own_tone > 0.5 * result.frames_expected, (hz, result)
        assert result.frames_with_other_tone < 5, (hz, result)
        started = [e for e in result.events if e["type"] == "session.started"]
        assert started == [{"type": "session.started", "session_id": sid, "resumed": False}]
        echoed = [e for e in result.events if e["type"] == "echo"]
        assert echoed == [{"type": "echo", "event": {"type": "hello", "hz": hz}}]
        check_what_the_backend_got(backend.received[sid], hz, *audio)
    assert trx.metric(ENDED, reason="deleted") >= 5
    assert trx.metric("rtcedge_transceiver_backend_events_total", event="protocol_errors") == 0


def check_what_the_backend_got(messages: list, hz: float, encoding: int, rate: int) -> None:
    """The caller's tone, at the call's rate (pcm16), or its Opus packets in order (opus)."""
    if encoding == pb.ENCODING_OPUS:
        packets = [m.opus for m in messages if m.HasField("opus")]
        assert len(packets) > 50 and not any(m.HasField("pcm16") for m in messages)
        pairs = list(itertools.pairwise(packets))
        steps = {(b.sequence - a.sequence) % 65536 for a, b in pairs}
        assert steps <= {1, 2}, steps  # in order; a packet lost on loopback at most
        assert {(b.timestamp - a.timestamp) % 2**32 for a, b in pairs} <= {960, 1920}
        return
    frames = [m.pcm16.pcm for m in messages if m.HasField("pcm16")]
    assert len(frames) > 50 and {len(f) for f in frames} == {rate // 50 * 2}
    voiced = [array.array("h", f) for f in frames[25:] if max(array.array("h", f)) > 1000]
    assert len(voiced) > 20, "the caller's tone reached the backend"
    for samples in voiced[:10]:
        assert goertzel_power(samples, hz, rate) > 10 * goertzel_power(samples, 2000, rate)


CUE_HZ, VOICE_HZ = 1500.0, 440.0


class Cue(EchoBackend):
    """On ``play``, 5 s of a tone toward the caller at once (as a speech synthesizer streams
    faster than real time); on ``interrupt``, clear it. The caller's own audio is not echoed."""

    def __init__(self) -> None:
        super().__init__(key=KEY)

    def answer(self, start, message):
        if message.WhichOneof("kind") != "event":
            return
        kind = json.loads(message.event.json)["type"]
        if kind == "play":
            yield pb.FromBackend(pcm16=pb.Pcm16(pcm=tone(CUE_HZ, 5.0)))
        elif kind == "interrupt":
            yield pb.FromBackend(clear=pb.AudioClear())


def tone(hz: float, seconds: float, rate: int = 48000) -> bytes:
    w = 2 * math.pi * hz / rate
    samples = (int(9000 * math.sin(w * i)) for i in range(int(rate * seconds)))
    return array.array("h", samples).tobytes()


def test_a_clear_stops_the_audio_the_backend_sent_ahead(stack):
    _relay, trx, port = stack

    async def go():
        async with serving(Cue(), port):
            caller = Caller(VOICE_HZ, (CUE_HZ, VOICE_HZ))
            try:
                await caller.connect(trx.url)
                assert await wait_until(lambda: caller.channel.readyState == "open", 10)
                caller.send({"type": "play"})
                assert await wait_until(lambda: caller.count(CUE_HZ) >= 25, 10), caller.heard
                caller.send({"type": "interrupt"})
                at_interrupt = caller.count(CUE_HZ)
                await asyncio.sleep(1.0)  # what the caller hears meanwhile: a frame or two
                after = caller.count(CUE_HZ)
                await asyncio.sleep(0.5)
                assert caller.count(CUE_HZ) == after, "nothing of the cue plays after the clear"
                return at_interrupt, after
            finally:
                await caller.close()

    at_interrupt, after = run(go(), 60)
    # 250 frames were sent ahead; the caller heard those before the interrupt and those in
    # flight while it reached the backend and the clear came back (loopback: a few).
    assert after - at_interrupt <= 15, (at_interrupt, after)
    assert after < 100
    assert trx.metric("rtcedge_transceiver_backend_events_total", event="clears") >= 1


class Failing(EchoBackend):
    """The echo, except that a call whose caller sends ``fail`` breaks (the handler raises)."""

    def __init__(self) -> None:
        super().__init__(key=KEY)

    def answer(self, start, message):
        if message.WhichOneof("kind") == "event" and "fail" in message.event.json:
            raise RuntimeError("the model crashed")
        return super().answer(start, message)


def test_a_backend_that_fails_mid_call_ends_only_that_call_with_backend_error(stack):
    _relay, trx, port = stack
    before = trx.metric(ENDED, reason="backend_error")

    async def go():
        async with serving(Failing(), port):
            doomed, other = Caller(440.0, (440.0, 880.0)), Caller(880.0, (440.0, 880.0))
            try:
                for caller in (doomed, other):
                    await caller.connect(trx.url)
                for caller, hz in ((doomed, 440.0), (other, 880.0)):
                    assert await wait_until(lambda c=caller, h=hz: c.count(h) >= 10, 10)
                assert await wait_until(lambda: doomed.channel.readyState == "open", 10)
                doomed.send({"type": "fail"})
                assert await wait_until(
                    lambda: doomed.pc.connectionState in ("closed", "failed"), 15
                ), doomed.pc.connectionState
                heard = other.count(880.0)
                assert await wait_until(lambda: other.count(880.0) >= heard + 25, 10)
                assert other.pc.connectionState == "connected"
                async with aiohttp.ClientSession() as http:
                    await (await http.delete(f"{trx.url}{other.location}")).release()
            finally:
                for caller in (doomed, other):
                    await caller.close()

    run(go(), 60)
    assert trx.metric(ENDED, reason="backend_error") == before + 1
