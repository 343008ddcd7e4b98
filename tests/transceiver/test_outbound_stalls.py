"""A real transceiver's outbound stream across stalls of its input, as the caller's decoder hears
it: never louder than what went in, no burst, and silence while the input is stalled (issue 25).

A real aiortc caller sends a tone through the relay to the echo backend (``pcm16`` at 48 and 24
kHz: decoded and re-encoded by the call's encoder; ``opus``: passed through) and stops sending
for 1, 2, 4, 10 and 50 frames, so that the transceiver's input path carries nothing and its
outbound track fills the slots itself. After two more stalls the held packets follow at once,
as a stalled input path delivers its socket's backlog. The caller keeps the transceiver's RTP
packets as they arrive (its receiver's RTP handler: before any jitter buffer or decoder of its
own) and decodes them in sequence with a fresh libopus decoder.

A burst is measured as energy, not as a step between samples: the largest 5 ms window's RMS
against the tone's own. A step is no burst: where the echo drops frames of a backlog (it keeps
the caller within 100 ms) the tone itself jumps in phase. The old outbound track, which spliced
the cached silent packet of another encoder into the call's stream, fails the pcm16 calls here
(a full-scale peak from a 0.1 tone) and the opus call's check of what it sent (that packet, in
this caller's stream, decodes without a burst); concealing a whole stall in opus fails the
silence check.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import math
import time

import av
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtp import RtpPacket

from testbed.callers import RATE, SAMPLES, TIME_BASE, opus_tone_packets, whip_call
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.waits import run, wait_until
from transceiver.call.libopus import LibopusDecoder
from transceiver.call.opus import SILENCE_FRAME, silence_frame

TONE_HZ = 440
TONE_AMPLITUDE = 0.1  # of full scale: a quiet voice, far from clipping
LEAD_IN_FRAMES = 20  # tone before the first stall: the echo is steady by then
BETWEEN_FRAMES = 12  # tone after each stall
TAIL_FRAMES = 10  # tone after the last, for the echo to come back before the caller hangs up
# (frames, the held packets sent at once when it ends): every stall once as a pause, and two
# as the backlog of a stalled input path.
STALLS = ((1, False), (2, False), (4, False), (10, False), (50, False), (4, True), (10, True))
LONG_STALL_FRAMES = 10  # a stall this long is silence for at least SILENT_RUN_FRAMES
SILENT_RUN_FRAMES = 5
WINDOW_SAMPLES = 240  # 5 ms at 48 kHz: the span a burst is measured over
# What the stream may reach beyond the input: the codec's own ringing at the hard edges of the
# echo's audio, a tone cut by a stall (measured in pcm16: up to 1.22 x the peak, at a stall of
# one frame in hybrid mode, and 1.04 x the 5 ms RMS). The spliced packet of another encoder
# reached 9.9 x the peak and 11.7 x the RMS.
PEAK_MARGIN = 1.5  # on the largest sample
ENERGY_MARGIN = 1.25  # on the largest 5 ms window's RMS
SILENT_PEAK = 100  # a 20 ms frame below this peak is silence (the tone peaks ~3300)
FORMATS = {  # the echo's options, per call
    "pcm16-48k": ["--audio-format", "pcm16"],
    "pcm16-24k": ["--audio-format", "pcm16", "--audio-rate", "24000"],
    "opus": ["--audio-format", "opus"],
}


class StallingTone(MediaStreamTrack):
    """A paced tone (pre-encoded Opus packets, 20 ms each, looped) that stops for each of
    ``STALLS``, then goes on until the caller hangs up."""

    kind = "audio"

    def __init__(self, packets: list[bytes]) -> None:
        super().__init__()
        self._packets = packets
        self._count = 0
        self._start: float | None = None
        self._stalls: dict[int, tuple[int, bool]] = {}  # packet index -> the stall before it
        index = LEAD_IN_FRAMES
        for stall in STALLS:
            self._stalls[index] = stall
            index += BETWEEN_FRAMES
        self.frames = index + TAIL_FRAMES  # the schedule's, then the caller hangs up
        self._paused_s = 0.0  # the pauses so far, on the track's clock
        self._release_at = 0.0  # a backlog's packets go at once, none before this

    async def recv(self) -> av.Packet:  # type: ignore[override]
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        stall = self._stalls.pop(self._count, None)
        if stall is not None:
            frames, backlog = stall
            if backlog:  # the next packets keep their times but are held till the stall ends
                self._release_at = self._due(self._count + frames)
            else:
                self._paused_s += frames * SAMPLES / RATE
        wait = max(self._due(self._count), self._release_at) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        packet = av.Packet(self._packets[self._count % len(self._packets)])
        packet.pts = self._count * SAMPLES
        packet.time_base = TIME_BASE
        self._count += 1
        return packet

    def _due(self, index: int) -> float:
        assert self._start is not None
        return self._start + index * SAMPLES / RATE + self._paused_s

    @property
    def done(self) -> bool:
        return self._count >= self.frames


class Heard:
    """The transceiver's RTP packets as the caller's receiver got them, in arrival order."""

    def __init__(self) -> None:
        self.packets: list[tuple[int, bytes]] = []  # (sequence number, payload)

    async def handle(self, packet: RtpPacket, arrival_time_ms: int) -> None:
        self.packets.append((packet.sequence_number, packet.payload))

    def in_order(self) -> list[tuple[int, bytes]]:
        """By sequence number, unwrapped (RFC 3550 A.1: within 2^15 of the one before)."""
        out: list[tuple[int, bytes]] = []
        for seq, payload in self.packets:
            if out:
                last = out[-1][0]
                seq = last + ((seq - last + 0x8000) & 0xFFFF) - 0x8000
            out.append((seq, payload))
        return sorted(out)

    def decode(self) -> tuple[array.array, int]:
        """The stream as a fresh libopus decoder at 48 kHz plays it, a missing packet concealed
        as a receiver would; and how many were missing."""
        decoder = LibopusDecoder(RATE)
        pcm, missing, expected = array.array("h"), 0, None
        for seq, payload in self.in_order():
            while expected is not None and expected < seq:
                pcm.frombytes(decoder.conceal(SAMPLES))
                missing += 1
                expected += 1
            pcm.frombytes(decoder.decode(payload))
            expected = seq + 1
        decoder.close()
        return pcm, missing


def window_rms(pcm: array.array) -> list[float]:
    """RMS of every ``WINDOW_SAMPLES`` window, half-overlapped."""
    size = WINDOW_SAMPLES
    return [
        math.sqrt(sum(x * x for x in pcm[i : i + size]) / size)
        for i in range(0, len(pcm) - size + 1, size // 2)
    ]


def frame_peaks(pcm: array.array) -> list[int]:
    return [max(map(abs, pcm[i : i + SAMPLES]), default=0) for i in range(0, len(pcm), SAMPLES)]


def silent_runs(peaks: list[int], at_least: int) -> int:
    """How many runs of at least ``at_least`` silent frames ``peaks`` holds."""
    runs = length = 0
    for p in [*peaks, SILENT_PEAK]:
        if p < SILENT_PEAK:
            length += 1
        else:
            runs += length >= at_least
            length = 0
    return runs


def input_reference(packets: list[bytes]) -> tuple[int, float]:
    """The caller's tone as the transceiver's decoder gets it: its peak and its largest 5 ms
    RMS (the loop twice: the first one is a fresh decoder's start-up)."""
    decoder = LibopusDecoder(RATE)
    pcm = array.array("h")
    for payload in packets * 2:
        pcm.frombytes(decoder.decode(payload))
    decoder.close()
    steady = pcm[len(pcm) // 2 :]
    return max(map(abs, steady)), max(window_rms(steady))


async def stalled_call(url: str, packets: list[bytes]) -> tuple[Heard, StallingTone]:
    """One call to ``url``: the stalling tone out, the transceiver's packets kept."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    tone = StallingTone(packets)
    pc.addTrack(tone)
    heard = Heard()
    # An instance attribute shadows the method aiortc's DTLS transport calls for every RTP
    # packet of the receiver (as testbed.callers.EchoCounter.attach does).
    pc.getTransceivers()[0].receiver._handle_rtp_packet = heard.handle  # type: ignore[method-assign]
    try:
        await whip_call(pc, url)
        budget_s = 10 + tone.frames * SAMPLES / RATE + sum(f for f, _ in STALLS) * SAMPLES / RATE
        assert await wait_until(lambda: tone.done, budget_s), "the tone's schedule did not end"
    finally:
        await pc.close()
    return heard, tone


@pytest.fixture(scope="module")
def packets() -> list[bytes]:
    return opus_tone_packets(TONE_HZ, TONE_AMPLITUDE)


@pytest.fixture(scope="module")
def calls(packets):
    """One relay, a transceiver per echo format behind it, and a stalled call to each, all at
    once (a few seconds in all): what each caller received."""
    relay = RelayProcess({}, workers=1, die_with_parent=True)
    transceivers = {
        name: TransceiverProcess(relay, tid=i, extra_args=args, die_with_parent=True)
        for i, (name, args) in enumerate(FORMATS.items())
    }
    relay.transceivers = {t.tid: t.media_address for t in transceivers.values()}

    async def all_calls() -> list[tuple[Heard, StallingTone]]:
        return await asyncio.gather(*(stalled_call(t.url, packets) for t in transceivers.values()))

    with contextlib.ExitStack() as started:
        for process in (relay, *transceivers.values()):
            started.enter_context(process)
        results = run(all_calls(), 60)
    return dict(zip(transceivers, results, strict=True))


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_stalled_input_never_bursts_and_is_silence_in_the_caller_s_decoder(calls, packets, name):
    """Decoded as the caller's decoder plays it: the echo came back, no sample beyond 1.5 x
    the input's peak, no 5 ms window beyond 1.25 x the tone's RMS, and silence in each long
    stall."""
    heard, tone = calls[name]
    peak_in, rms_in = input_reference(packets)
    pcm, missing = heard.decode()
    peaks = frame_peaks(pcm)
    figures = (
        f"{name}: out peak {max(peaks)} / in {peak_in}, 5 ms RMS {max(window_rms(pcm)):.0f} / "
        f"{rms_in:.0f}; {len(heard.packets)} packets, {missing} missing"
    )
    # The tone came back after the stalls: the test heard the echo, not only silence.
    assert sum(p >= SILENT_PEAK for p in peaks) >= 0.75 * tone.frames, figures
    assert max(peaks) <= PEAK_MARGIN * peak_in, figures
    assert max(window_rms(pcm)) <= ENERGY_MARGIN * rms_in, figures
    # A long stall is silence, not the last sound concealed on and on.
    long_stalls = sum(frames >= LONG_STALL_FRAMES for frames, _ in STALLS)
    assert silent_runs(peaks, SILENT_RUN_FRAMES) >= long_stalls, (figures, peaks)


def test_opus_passthrough_sends_the_caller_s_own_packets_and_no_other_encoder_s(calls, packets):
    """Passthrough's stream is the backend's packets (here the caller's own, echoed), the DTX
    frame of that stream (its TOC byte alone) and the silence frame: nothing another encoder
    coded."""
    heard, _ = calls["opus"]
    own = set(packets)
    fillers = {bytes((p[0] & 0xFC,)) for p in packets} | {silence_frame(p[0]) for p in packets}
    payloads = [payload for _, payload in heard.in_order()]
    assert {p for p in payloads if p not in own} <= fillers
    assert SILENCE_FRAME in payloads and own & set(payloads)
