"""A real call through the relay into a transceiver started with non-default ``--opus-*``
options: what the caller receives shows them (the bit rate cap in the packet sizes, CELT only
for restricted-lowdelay in the TOCs, DTX as 1-byte frames and no packets in silence), against
a transceiver with the defaults in the same run, and the transceiver says them at start."""

from __future__ import annotations

import asyncio
import itertools
import statistics
from dataclasses import dataclass
from typing import Any

import aiohttp

from testbed.caller_workers import BEEPS, EchoCall
from testbed.callers import beep_packets
from testbed.processes import RelayProcess, TransceiverProcess

CAPPED = [
    "--opus-application", "restricted-lowdelay", "--opus-bitrate", "8000",
    "--opus-complexity", "2", "--opus-dtx",
]  # fmt: skip
SAID = "opus encoder toward callers: restricted-lowdelay, 8000 bit/s, complexity 2, FEC off, DTX on"
SECONDS = 3.0
FRAME = 960


@dataclass(frozen=True)
class Heard:
    payload: bytes
    seq: int
    timestamp: int


async def call(url: str) -> list[Heard]:
    """A caller beeping (100 ms of tone a second) for SECONDS: the echo's RTP packets, from
    its first echo on."""
    caller = EchoCall(1, 440, beep_packets(440), audio=BEEPS)
    heard: list[Heard] = []
    counted = caller.echo.count

    def count(packet: Any) -> None:  # what the caller's RTP receiver hands over, then counted
        heard.append(Heard(packet.payload, packet.sequence_number, packet.timestamp))
        counted(packet)

    caller.echo.count = count  # type: ignore[method-assign]
    async with aiohttp.ClientSession() as http:
        try:
            await caller.connect(http, url, timeout_s=15, echo_s=10)
            assert caller.error == "" and caller.echo.first_echo_at is not None, caller.error
            heard.clear()
            await asyncio.sleep(SECONDS)
        finally:
            await caller.hang_up(http, url, 5)
            await caller.pc.close()
    return heard


def calls_through(options: list[str]) -> tuple[list[Heard], list[Heard], str]:
    """One call to a transceiver with the defaults, one to a transceiver with ``options``
    (behind the same relay); and what the second logged."""
    relay = RelayProcess({}, workers=1)
    default = TransceiverProcess(relay, tid=0)
    other = TransceiverProcess(relay, tid=1, extra_args=[*options, "--log-level", "info"])
    relay.transceivers = {0: default.media_address, 1: other.media_address}
    with relay, default, other:
        plain, heard = asyncio.run(call(default.url)), asyncio.run(call(other.url))
    assert other.proc is not None and other.proc.stderr is not None
    return plain, heard, other.proc.stderr.read().decode()  # it exited: its whole log


def clock_steps(heard: list[Heard]) -> list[int]:
    """How far the RTP clock moved from each packet to the next one sent (consecutive
    sequence numbers: a packet lost on a busy machine says nothing)."""
    return [
        b.timestamp - a.timestamp
        for a, b in itertools.pairwise(heard)
        if b.seq == (a.seq + 1) & 0xFFFF
    ]


def test_the_callers_audio_shows_the_transceivers_settings():
    plain, low, log = calls_through(CAPPED)
    assert SAID in log and "(libopus " in log, log[-2000:]
    # Defaults: a packet every 20 ms, never a DTX frame, SILK or hybrid among the modes.
    assert len(plain) > 0.8 * SECONDS * 50
    assert set(clock_steps(plain)) == {FRAME}
    assert min(len(h.payload) for h in plain) > 2
    assert min(h.payload[0] >> 3 for h in plain) < 16
    # restricted-lowdelay: CELT only (TOC configs 16-31, RFC 6716 3.1).
    assert min(h.payload[0] >> 3 for h in low) >= 16
    # 8 kbit/s: the beeps' packets are a fraction of the default's.
    loud_plain = sorted(len(h.payload) for h in plain)[-10:]
    loud_low = sorted(len(h.payload) for h in low)[-10:]
    assert statistics.median(loud_low) <= 8000 / 400 * 1.6 < statistics.median(loud_plain)
    # DTX: 1-byte frames, and silence as gaps on the RTP clock instead of packets.
    assert any(len(h.payload) == 1 for h in low)
    gaps = clock_steps(low)
    assert max(gaps) >= 10 * FRAME and all(g % FRAME == 0 and g > 0 for g in gaps)
    assert len(low) < 0.7 * len(plain)
