"""A light benchmark caller against a real transceiver (in-process, loopback): its media takes
the direct paths (the tone on its own 20 ms clock, the echo's SRTP counted from the
socket's callback), and the echo it counts is its own."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from testbed.caller_workers import EchoCall
from testbed.callers import DELAY_LEVELS, OpusToneTrack, opus_tone_packets
from tests.support.inprocess import direct_config, running
from transceiver.call.certificate import SharedCertificate
from transceiver.call.outbound import AudioClock, InlineAudioSender

HZ = 440


async def _one_light_call() -> EchoCall:
    packets = opus_tone_packets(HZ, levels=DELAY_LEVELS)
    call = EchoCall(1, HZ, packets, SharedCertificate.generateCertificate())
    async with (
        running(direct_config(audio_format="opus")) as (_server, url),
        aiohttp.ClientSession() as http,
    ):
        await call.connect(http, url, timeout_s=10, echo_s=5)
        assert not call.error, call.error
        await asyncio.sleep(1.0)  # 50 packets each way
        await call.hang_up(http, url, timeout_s=5)
    return call


def test_a_light_caller_sends_on_the_clock_and_counts_its_echo_from_the_socket() -> None:
    call = asyncio.run(_one_light_call())
    (sender,) = call.pc.getSenders()
    assert isinstance(sender, InlineAudioSender)  # aiortc's loop per call replaced
    assert sender.direct is not None and sender.direct.packets_sent >= 40
    assert isinstance(call.audio_clock, AudioClock) and call.audio_clock.ticks >= 40
    assert not len(call.audio_clock)  # hung up: its sender left the clock, which stopped
    assert call.direct_echo is not None
    assert call.direct_echo.packets >= 30  # the echo came by the direct path...
    assert not call.direct_echo.dropped
    echo = call.echo
    assert echo.first_echo_at is not None
    assert echo.tone_checks_own == echo.tone_checks > 0  # ...and is the caller's own audio
    assert echo.packets_received >= call.direct_echo.packets


def test_the_tone_is_due_every_20_ms_for_the_clock_and_for_aiortc_s_sender() -> None:
    packets = [b"a", b"b", b"c"]
    tone = OpusToneTrack(packets)
    t0 = time.monotonic() - 10.0  # in the past: recv below finds its packet due, no wait
    assert tone.take_due(t0) == [(b"a", 0)]  # the first take starts the tone
    assert tone.take_due(t0 + 0.019) == []
    assert tone.take_due(t0 + 0.05) == [(b"b", 960), (b"c", 1920)]
    assert tone.take_due(t0 + 0.2, limit=2) == [(b"a", 2880), (b"b", 3840)]  # late, bounded

    async def pulled() -> tuple[bytes, int]:
        packet = await tone.recv()  # already late: no wait, the next packet in line
        return bytes(packet), packet.pts

    assert asyncio.run(pulled()) == (b"c", 4800)
    assert tone.frames_sent == 6
