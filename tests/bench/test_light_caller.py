"""A light benchmark caller against a real transceiver (in-process, loopback): its media takes
the direct paths (the tone on its own 20 ms clock, the echo's SRTP counted from the
socket's callback), and the echo it counts is its own."""

from __future__ import annotations

import asyncio

import aiohttp

from bench.sessions_callers import EchoCall
from bench.webrtc_client import DELAY_LEVELS, opus_tone_packets
from tests.support.inprocess import direct_config, running
from transceiver.certificate import SharedCertificate
from transceiver.outbound import AudioClock, InlineAudioSender

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
