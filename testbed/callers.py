"""Real aiortc callers for the tests and the benchmarks: a tone, WHIP, the echo measured.

A caller sends a sine tone of its own frequency and measures, in what comes back, the power at
its own frequency (Goertzel), so "hears its own audio" is told from "hears someone else's".
``EchoCaller`` records when each audible echo frame arrives (the recovery benchmark's gaps), and
with ``migrate`` moves to another transceiver when its own asks (``session.migrate``). For
many callers per core (``bench/sessions.py``) there are cheaper parts: ``OpusToneTrack`` hands
aiortc a tone already encoded once at start-up, and ``EchoCounter`` counts the echo at the RTP
level and checks the tone only on a sample of frames. The tests' one-call client is
tests/support/tone_call.py.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import fractions
import itertools
import json
import math
import statistics
import struct
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import aioice.ice
import av
from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpReceiver, RTCSessionDescription
from aiortc.contrib.media import MediaRelay
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtp import RtpPacket

from transceiver.call import seam
from transceiver.migration import MIGRATE_EVENT
from transceiver.ownership import RESUME_HEADER

RATE = 48000
SAMPLES = 960  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)


def loopback_only() -> None:
    """Keep this *client's* ICE on loopback: tests and benchmarks never leave 127.0.0.0/8."""
    gather_on("127.0.0.1")


def gather_on(address: str) -> None:
    """This client's ICE gathers one host candidate, ``address``, from the next offer on: the
    loopback, or our end of a benchmark's private veth pair (``testbed.netns``) to a peer
    that will not use loopback."""
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: [address]  # type: ignore[assignment]


def prompt_ice(pc: RTCPeerConnection) -> None:
    """This caller's ICE connected as soon as its check list completes, as a browser's is,
    instead of at the next tick of aioice's 20 ms check timer (``transceiver.call.seam``).
    Call after ``setLocalDescription`` (its ICE transports exist) and before the answer."""
    seam.prompt_ice(pc)


class ToneTrack(MediaStreamTrack):
    """A paced mono sine tone, 20 ms frames."""

    kind = "audio"

    def __init__(self, hz: float, amplitude: float = 0.3) -> None:
        super().__init__()
        self.hz = hz
        self.amplitude = amplitude
        self._pts = 0
        self._start: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        wait = self._start + self._pts / RATE - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        w = 2 * math.pi * self.hz / RATE
        a = 32767 * self.amplitude
        pcm = struct.pack(
            f"<{SAMPLES}h", *(int(a * math.sin(w * (self._pts + i))) for i in range(SAMPLES))
        )
        frame = av.AudioFrame(format="s16", layout="mono", samples=SAMPLES)
        frame.planes[0].update(pcm)
        frame.sample_rate = RATE
        frame.time_base = TIME_BASE
        frame.pts = self._pts
        self._pts += SAMPLES
        return frame


async def heard_frames(track: MediaStreamTrack) -> AsyncIterator[tuple[int, ...]]:
    """What a caller hears: the samples of each frame it receives, 48 kHz mono, until the
    track ends."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        for f in resampler.resample(frame):
            yield struct.unpack(f"<{f.samples}h", bytes(f.planes[0])[: f.samples * 2])


def goertzel_power(samples: Sequence[int], hz: float, rate: int = RATE) -> float:
    w = 2 * math.pi * hz / rate
    coeff = 2 * math.cos(w)
    s1 = s2 = 0.0
    for x in samples:
        s0 = x + coeff * s1 - s2
        s2, s1 = s1, s0
    return s1 * s1 + s2 * s2 - coeff * s1 * s2


# Per-frame amplitude of the benchmark callers' tone over its one-second loop: two levels in a
# fixed pseudo-random order whose every circular shift differs from it in >= 18 of 50 frames, so
# that the level pattern a caller hears back, decoded and re-encoded or not, tells how many
# frames late its echo is (``EchoCounter.echo_delay_ms``). 6 dB apart, both far above silence.
TONE_AMPLITUDE = 0.3  # of full scale: the benchmark callers' tone (its loud frames)
DELAY_PATTERN = tuple((0x1F35A9C6E1B7 >> k) & 1 for k in range(50))
DELAY_LEVELS = tuple(1.0 if bit else 0.5 for bit in DELAY_PATTERN)
LEVEL_TAIL = 192  # samples (4 ms, a period of the lowest tone) at a frame's end: its level


def opus_encoder(bitrate: int = 32000) -> Any:
    """libopus for a caller's audio: 48 kHz mono PCM16, 20 ms frames, ``voip``."""
    enc = av.CodecContext.create("libopus", "w")
    enc.bit_rate = bitrate
    enc.format = "s16"
    enc.layout = "mono"
    enc.sample_rate = RATE
    enc.time_base = TIME_BASE
    enc.options = {"application": "voip"}
    return enc


def opus_tone_packets(
    hz: int,
    amplitude: float = TONE_AMPLITUDE,
    bitrate: int = 32000,
    levels: tuple[float, ...] | None = None,
) -> list[bytes]:
    """One second of a sine tone as 50 Opus packets (20 ms, mono), to be sent in a loop.

    ``hz`` is a whole number, so a second holds whole periods and the loop has no seam. Two
    seconds are encoded and the second one kept: its first packet was encoded with the state the
    encoder has after a full period, which is the state it would have after the loop wraps.
    ``levels``: a factor on ``amplitude`` per frame of the loop (50 of them), e.g. DELAY_LEVELS.
    """
    enc = opus_encoder(bitrate)
    w = 2 * math.pi * hz / RATE
    a = 32767 * amplitude
    period = array.array("h", (int(a * math.sin(w * i)) for i in range(RATE)))
    if levels is not None:
        if len(levels) != 50:
            raise ValueError(f"levels: one per 20 ms frame of the second, not {len(levels)}")
        for i in range(RATE):
            period[i] = int(period[i] * levels[i // SAMPLES])
    packets: list[bytes] = []
    for k in range(100):
        frame = av.AudioFrame(format="s16", layout="mono", samples=SAMPLES)
        start = (k % 50) * SAMPLES
        frame.planes[0].update(period[start : start + SAMPLES].tobytes())
        frame.sample_rate = RATE
        frame.time_base = TIME_BASE
        frame.pts = k * SAMPLES
        packets += [bytes(p) for p in enc.encode(frame)]
    if len(packets) < 100:
        raise RuntimeError(f"the Opus encoder returned {len(packets)} packets for 100 frames")
    return packets[-50:]


# The realtime benchmark's callers: a beep a second, BEEP_FRAMES of tone at the start of the
# loop then silence, so that the packet at loop index 0 is the first to carry sound after
# silence: a marker that can be told apart after any decoding (``OpusToneTrack.marks``).
BEEP_FRAMES = 5
BEEP_LEVELS = (1.0,) * BEEP_FRAMES + (0.0,) * (50 - BEEP_FRAMES)


def beep_packets(hz: int) -> list[bytes]:
    """One second of ``BEEP_LEVELS``: 100 ms of a tone at ``hz`` then 900 ms of silence, as 50
    Opus packets (``opus_tone_packets``)."""
    return opus_tone_packets(hz, levels=BEEP_LEVELS)


def speech_packets(pcm_48k: bytes, period_s: float) -> tuple[list[bytes], int]:
    """Speech (PCM16 mono, 48 kHz: ``testbed.voice_agent.spoken``) then silence, ``period_s``
    in all, as Opus packets of 20 ms to be sent in a loop (``OpusToneTrack``); and the index
    of the packet that ends the speech: the last whose audio, decoded as the far end decodes
    it, peaks at ``AUDIBLE_PEAK`` or more. Where the speech ends is told by that rule at both
    ends (``rtcedge bench turn``): the frames after it are silent, the codec's ringing
    included."""
    frame_bytes = SAMPLES * 2
    frames = max(1, round(period_s * RATE / SAMPLES))
    if len(pcm_48k) > (frames - 1) * frame_bytes:
        raise ValueError(f"the speech lasts {len(pcm_48k) / 2 / RATE:.2f} s: over the period")
    pcm = pcm_48k.ljust(frames * frame_bytes, b"\0")
    enc = opus_encoder()
    packets: list[bytes] = []
    for k in range(frames + 1):  # one more: the encoder's look-ahead holds the last frame
        frame = av.AudioFrame(format="s16", layout="mono", samples=SAMPLES)
        frame.planes[0].update(pcm[k * frame_bytes : (k + 1) * frame_bytes] or bytes(frame_bytes))
        frame.sample_rate, frame.time_base, frame.pts = RATE, TIME_BASE, k * SAMPLES
        packets += [bytes(p) for p in enc.encode(frame)]
    packets = packets[:frames]
    dec = av.CodecContext.create("libopus", "r")
    dec.format, dec.layout, dec.sample_rate = "s16", "mono", RATE
    loud = [
        i
        for i, payload in enumerate(packets)
        if any(peak(f) >= AUDIBLE_PEAK for f in dec.decode(av.Packet(payload)))
    ]
    if not loud:
        raise ValueError("the speech has no frame with sound")
    return packets, loud[-1]


class OpusToneTrack(MediaStreamTrack):
    """A paced tone as pre-encoded Opus packets (``opus_tone_packets``), 20 ms each.

    aiortc's sender only packetizes ``av.Packet``s: no per-sample math, no audio-level loop and
    no encode in a thread per frame, so a benchmark's callers cost little next to the server.
    ``mark_at``: each time the packet of that loop index is taken, ``marks`` gets (wall time,
    packets taken before it, how late its tick was in s): with a clocked sender, the moment it
    is sent.
    """

    kind = "audio"

    def __init__(self, packets: list[bytes], mark_at: int | None = None) -> None:
        super().__init__()
        self._packets = packets
        self._count = 0
        self._start: float | None = None
        self._mark_at = mark_at
        self.marks: collections.deque[tuple[float, int, float]] = collections.deque(maxlen=600)
        self.on_due: Callable[[], None] | None = None  # set by a clocked sender; a tone never late

    @property
    def frames_sent(self) -> int:
        """Packets handed to the sender so far (it falls behind when its event loop does)."""
        return self._count

    def take_due(
        self, now: float, grid_at: float | None = None, limit: int = 10
    ) -> list[tuple[bytes, int]]:
        """The packets due by ``now`` (``time.monotonic()``) as (payload, RTP timestamp offset),
        at most ``limit``: the transceiver's clocked sender (``transceiver.call.outbound``) sends
        them, for a light caller, without aiortc's sender loop. The first call starts the tone
        (at ``grid_at``, its clock's tick on the grid, when given)."""
        if self._start is None:
            self._start = now if grid_at is None else min(grid_at, now)
        due: list[tuple[bytes, int]] = []
        while len(due) < limit and self._next_at() <= now:
            index = self._count % len(self._packets)
            if index == self._mark_at:
                self.marks.append((time.time(), self._count, now - self._next_at()))
            due.append((self._packets[index], self._count * SAMPLES))
            self._count += 1
        return due

    def _next_at(self) -> float:
        """When the next packet is due (monotonic); the tone has started."""
        assert self._start is not None
        return self._start + self._count * SAMPLES / RATE

    async def recv(self) -> av.Packet:  # type: ignore[override]
        """aiortc's own sender's way: one packet of ``take_due`` at a time, on time."""
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is not None:
            wait = self._next_at() - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        ((payload, pts),) = self.take_due(time.monotonic(), limit=1)
        packet = av.Packet(payload)
        packet.pts = pts
        packet.time_base = TIME_BASE
        return packet


AUDIBLE_PEAK = 1000  # a decoded frame whose peak is below this is silence (the tone peaks ~9800)
OWN_TONE_SHARE = 0.2  # of the frame's power at the caller's frequency: "it is my own tone"
OTHER_TONE_LOW_HZ, OTHER_TONE_HIGH_HZ = 100, 4000  # where another caller's tone is looked for
# Of a frame's power at one other frequency: "it is another caller's tone". A steady tone on
# the 20 Hz scan grid gives ~1; a frame of our own tone with a discontinuity (a frame lost or
# trimmed upstream) spreads its power over +-100 Hz, where the neighbours' tones are, but no
# single frequency then holds more than about half of it.
FOREIGN_TONE_SHARE = 0.6


def peak(frame: av.AudioFrame) -> int:
    """The largest absolute sample of a decoded s16 frame (any channel count)."""
    count = frame.samples * len(frame.layout.channels)
    samples = struct.unpack(f"<{count}h", bytes(frame.planes[0])[: count * 2])
    return max(map(abs, samples), default=0)


class EchoTimes:
    """When each audible frame of a received track arrived: the raw data of an audio gap.

    ``listen`` on a peer connection's "track" event; ``after(t)`` counts frames since ``t``;
    ``gap_ms(start, end)`` is the longest silence in that window (a call that never came back
    is silent to its end) minus the 20 ms one frame lasts.
    """

    def __init__(self) -> None:
        self.times: list[float] = []
        self._tasks: set[asyncio.Future[None]] = set()

    def listen(
        self,
        track: MediaStreamTrack,
        also: Sequence[EchoTimes] = (),
        heard: Callable[[], bool] | None = None,
    ) -> None:
        """Record ``track``'s audible frames while ``heard()`` (a caller that moves hears one
        peer connection at a time), and into each of ``also`` always."""
        task = asyncio.ensure_future(self._record(track, also, heard))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record(
        self,
        track: MediaStreamTrack,
        also: Sequence[EchoTimes],
        heard: Callable[[], bool] | None,
    ) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            if peak(frame) > AUDIBLE_PEAK:
                now = time.monotonic()
                if heard is None or heard():
                    self.times.append(now)
                for other in also:
                    other.times.append(now)

    def after(self, moment: float) -> int:
        return sum(1 for t in self.times if t > moment)

    async def wait(self, moment: float, count: int, timeout_s: float) -> bool:
        """True once ``count`` audible frames arrived after ``moment``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.after(moment) >= count:
                return True
            await asyncio.sleep(0.02)
        return False

    def gap_ms(self, start: float, end: float) -> float:
        """The longest silence within [start, end], its edges included, less one frame."""
        times = [start, *(t for t in self.times if start <= t <= end), end]
        return max(0.0, max(b - a for a, b in itertools.pairwise(times)) * 1000 - 20)


SWITCH_AFTER_FRAMES = 5  # echo frames the new connection must carry before a caller switches
MAX_RESUME_ATTEMPTS = 20  # offers of one move (503s from draining pods retried), at most


@dataclass
class Move:
    """One ``session.migrate`` a caller acted on: how it went."""

    asked_at: float  # time.monotonic()
    statuses: list[int] = field(default_factory=list)  # of each resume offer, in order
    outcome: str = "under way"  # moved, refused, no_echo, deadline, error: ...
    location: str = ""  # the new session's resource
    switched_at: float | None = None


async def whip_call(pc: RTCPeerConnection, url: str) -> str:
    """Offer ``pc`` over WHIP to ``url`` (the transceiver's base URL) and apply the answer; the
    session's resource (its Location). A refusal raises with its status and reason."""
    await pc.setLocalDescription(await pc.createOffer())
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{url}/whip",
            data=pc.localDescription.sdp,
            headers={"Content-Type": "application/sdp"},
        ) as resp,
    ):
        body = await resp.text()
        if resp.status != 201:
            raise RuntimeError(f"WHIP {resp.status}: {body}")
        location = resp.headers["Location"]
    await pc.setRemoteDescription(RTCSessionDescription(body, "answer"))
    return location


class EchoCaller:
    """An aiortc caller that records when each audible echo frame arrives (``echo``).

    It uses the transceiver's low-latency jitter buffer unless ``stock_jitter_buffer``: stock
    aiortc stalls ~300 ms after any lost packet and keeps that latency (aiortc #543), which
    measures aiortc's receiver, not the fail-over; a browser conceals the loss and goes on.

    ``events`` opens the ``events`` data channel (its messages land in ``events``); ``migrate``
    also acts on ``session.migrate`` (docs/transceiver.md, "Moving calls on scale-down"): a new
    peer connection with the same tone, a WHIP offer with the resume token to the same URL
    (503: again after Retry-After, within the deadline), and once it carries
    ``SWITCH_AFTER_FRAMES`` echo frames the caller hears it instead (``pc``, ``location``),
    DELETEs its old resource and closes the old connection. ``moves`` says how each went.
    """

    def __init__(
        self,
        stock_jitter_buffer: bool = False,
        events: bool = False,
        migrate: bool = False,
        hz: float = 440,
    ) -> None:
        self._stock_jitter_buffer = stock_jitter_buffer
        self._events = events or migrate
        self.migrate = migrate
        self._tone = ToneTrack(hz)
        # A moving caller sends the same tone on two connections for a while, as a browser
        # sends one microphone track on both.
        self._relay = MediaRelay() if migrate else None
        self.echo = EchoTimes()
        self._heard: dict[RTCPeerConnection, EchoTimes] = {}  # each connection's own echo
        self.events: collections.deque[dict] = collections.deque(maxlen=100)
        self.moves: list[Move] = []
        self._moving: asyncio.Task[None] | None = None
        self._closed: list[RTCPeerConnection] = []
        self.whip_url = ""
        self.headers: dict[str, str] = {}
        self.location = ""
        self.pc = self._new_pc()

    def _new_pc(self) -> RTCPeerConnection:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(
            self._relay.subscribe(self._tone, buffered=False) if self._relay else self._tone
        )
        if not self._stock_jitter_buffer:
            seam.install_jitter_buffer(pc)
        own = self._heard[pc] = EchoTimes()
        pc.on("track", lambda track: self.echo.listen(track, (own,), lambda: self.pc is pc))
        if self._events:
            channel = pc.createDataChannel("events")
            channel.on("message", lambda message: self._on_event(message, pc))
        return pc

    async def connect(self, whip_url: str, headers: dict[str, str] | None = None) -> None:
        """Offer over WHIP (with extra request ``headers``, e.g. a region), apply the answer,
        and wait (up to 15 s) for the echo to come back."""
        self.whip_url, self.headers = whip_url, dict(headers or {})
        await self.pc.setLocalDescription(await self.pc.createOffer())
        status, answer, location, _ = await self._post(self.pc.localDescription.sdp, {})
        if status != 201:
            raise RuntimeError(f"WHIP {status}: {answer}")
        self.location = location  # the session's resource: DELETE ends it
        await self.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        await self.wait_for_echo(time.monotonic(), 15)

    async def _post(self, sdp: str, extra: dict[str, str]) -> tuple[int, str, str, float]:
        """(status, body, Location, Retry-After seconds) of one WHIP offer."""
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{self.whip_url}/whip",
                data=sdp,
                headers={"Content-Type": "application/sdp", **self.headers, **extra},
            ) as resp,
        ):
            retry = resp.headers.get("Retry-After", "1")
            retry_s = float(retry) if retry.isdigit() else 1.0
            return resp.status, await resp.text(), resp.headers.get("Location", ""), retry_s

    async def wait_for_echo(self, after: float, timeout_s: float) -> bool:
        return await self.echo.wait(after, 10, timeout_s)

    def _on_event(self, message: object, pc: RTCPeerConnection) -> None:
        try:
            event = json.loads(message) if isinstance(message, str) else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return
        self.events.append(event)
        if (
            event.get("type") == MIGRATE_EVENT
            and self.migrate
            and pc is self.pc
            and (self._moving is None or self._moving.done())
        ):
            token, deadline_ms = event.get("resume_token"), event.get("deadline_ms")
            if isinstance(token, str) and isinstance(deadline_ms, int):
                self._moving = asyncio.ensure_future(self._move(token, deadline_ms))

    async def _move(self, token: str, deadline_ms: int) -> None:
        move = Move(time.monotonic())
        self.moves.append(move)
        deadline = move.asked_at + deadline_ms / 1000
        pc = self._new_pc()
        try:
            await pc.setLocalDescription(await pc.createOffer())
            answer = await self._offer_resume(pc.localDescription.sdp, token, deadline, move)
            if answer is None:
                return
            await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
            if not await self._heard[pc].wait(
                move.asked_at, SWITCH_AFTER_FRAMES, deadline - time.monotonic()
            ):
                move.outcome = "no_echo"
                return
            old, old_location = self.pc, self.location
            self.pc, self.location = pc, move.location  # heard from now on
            move.switched_at = time.monotonic()
            move.outcome = "moved"
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with (
                    aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
                    http.delete(self.whip_url + old_location, headers=self.headers),
                ):
                    pass
            await self._close(old)
        except Exception as exc:  # a move that breaks leaves the caller on its old call
            move.outcome = f"error: {exc!r}"
        finally:
            if self.pc is not pc:
                await self._close(pc)

    async def _offer_resume(self, sdp: str, token: str, deadline: float, move: Move) -> str | None:
        """The answer to a resume offer, retried on 503 after its Retry-After while the
        deadline allows; None (``move.outcome`` says why) when refused or out of time."""
        for _ in range(MAX_RESUME_ATTEMPTS):
            status, body, location, retry_s = await self._post(sdp, {RESUME_HEADER: token})
            move.statuses.append(status)
            if status == 201:
                move.location = location
                return body
            if status != 503:
                move.outcome = f"refused: {status} {body.strip()}"
                return None
            if time.monotonic() + retry_s >= deadline:
                break
            await asyncio.sleep(retry_s)
        move.outcome = "deadline"
        return None

    async def _close(self, pc: RTCPeerConnection) -> None:
        if pc not in self._closed:
            self._closed.append(pc)
            self._heard.pop(pc, None)
            await pc.close()

    async def close(self) -> None:
        """Hang up every connection (the current one, and one a move left open)."""
        if self._moving is not None:
            self._moving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._moving
        await self._close(self.pc)


class EchoCounter:
    """Counts a caller's echo as it arrives, cheaply enough for dozens of callers per core.

    It takes the place of the receiver's RTP handler (``attach``): no jitter buffer, NACKs or
    decoder thread. Every packet is counted by sequence number (RTP loss as in RFC 3550 A.3),
    decoded inline with one Opus decoder and classified by its peak as audio or silence (the
    far end sends silence when it has nothing to send, so only audible frames are echo). The
    tone is checked with Goertzel on audible frames until one is the caller's own (that one is
    the first echo), then on one audible frame in ``check_every``: enough to prove that what
    comes back is the caller's own audio and nobody else's. Only a steady frame is checked
    after the first echo: one that follows an audible frame of the previous sequence number.
    The frame after a gap (the far end ran short and sent silence, or a packet was lost) is an
    onset, whose spectrum the encoder spreads: its share at the tone's frequency can fall under
    ``OWN_TONE_SHARE`` although it is the caller's own audio. Each onset of a decoded stream is
    kept in ``onsets``: [wall time its packet was handed over, its sequence number, wall time
    the next packet was] (the last None until it comes).
    """

    def __init__(
        self,
        hz: float,
        check_every: int = 50,
        own_packets: Sequence[bytes] = (),
        sent_clock: Callable[[], tuple[float | None, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        check_tone: bool = True,
    ) -> None:
        """``own_packets``: the Opus packets this caller sends. An echo that passes them through
        untouched (an Opus-passthrough backend) is recognised byte for byte, with no decoding:
        such a packet is the caller's own audio, proven more strictly than by its tone, and the
        caller stays cheap enough for hundreds of calls per core. Any other packet (a re-encoded
        echo, silence, someone else's) is decoded and judged as below.

        ``sent_clock``: (start, frames sent) of the caller's tone track, whose loop carries
        ``DELAY_LEVELS``: then the echo's delay is measured (``echo_delay_ms``), on ``clock``
        (the track's: ``time.monotonic``).

        ``check_tone`` False: what comes back is no tone of the caller's (a voice agent's
        speech): audible frames are counted and their onsets kept, none is checked (a frame
        that is not the caller's tone would be scanned for another's, ~200 Goertzels each)."""
        self.hz = hz
        self.check_tone = check_tone
        self.check_every = check_every
        self._own_packets = {p: i for i, p in enumerate(own_packets)}
        self._sent_clock = sent_clock
        self._clock = clock
        # The last 10 s of echo frames: (arrival, frame index the caller was at, the frame's
        # level (peak of its end) or the exact index of a passed-through packet, -1 for the
        # other); ``echo_delay_ms`` reads them.
        self._heard: collections.deque[tuple[float, int, int, int]] = collections.deque(maxlen=500)
        self.packets_received = 0
        self.audio_frames = 0
        self.decode_errors = 0
        self.tone_checks = 0  # from the first echo on
        self.tone_checks_own = 0
        self.tone_checks_unclear = 0  # frames that were neither our tone nor another's
        self.foreign_tones: list[tuple[int, float]] = []  # (Hz, share) of the first ones
        self.onsets: collections.deque[list[Any]] = collections.deque(maxlen=600)
        self.ssrc: int | None = None  # of the stream heard (the far end's)
        self.first_echo_at: float | None = None  # time.monotonic()
        self._jitter_units = 0.0  # RFC 3550 interarrival jitter, RTP timestamp units
        self._last_transit: int | None = None
        self._base_seq: int | None = None
        self._max_seq = 0  # extended (wrap-counted) highest sequence number
        self._last_audible_seq: int | None = None  # of the latest audible frame
        self._decoder = av.CodecContext.create("libopus", "r")
        self._decoder.format = "s16"
        self._decoder.layout = "mono"
        self._decoder.sample_rate = RATE

    def attach(self, receiver: RTCRtpReceiver) -> None:
        # An instance attribute shadows the method: aiortc's DTLS transport calls
        # ``receiver._handle_rtp_packet(packet, arrival_time_ms=...)`` for every RTP packet.
        receiver._handle_rtp_packet = self._handle_rtp_packet  # type: ignore[method-assign]

    @property
    def packets_expected(self) -> int:
        """Sequence numbers from the first to the highest seen (RFC 3550 A.3)."""
        return 0 if self._base_seq is None else self._max_seq - self._base_seq + 1

    @property
    def packets_lost(self) -> int:
        return self.packets_expected - self.packets_received

    @property
    def jitter_s(self) -> float:
        """Interarrival jitter of the echo stream (RFC 3550 6.4.1), arrival clock in whole ms."""
        return self._jitter_units / RATE

    async def _handle_rtp_packet(self, packet: RtpPacket, arrival_time_ms: int) -> None:
        """aiortc's entry (its DTLS transport's receive task)."""
        self.count(packet)

    def count(self, packet: Any) -> None:
        """One RTP packet of the echo (``sequence_number``, ``timestamp``, ``payload``), now."""
        arrived = time.time()
        arrival_time_ms = int(self._clock() * 1000)
        seq = packet.sequence_number
        self.ssrc = getattr(packet, "ssrc", None)  # RTP packets have it; tests' stand-ins may not
        if self._base_seq is None:
            self._base_seq = self._max_seq = seq
        else:
            delta = (seq - self._max_seq) & 0xFFFF
            if 0 < delta < 0x8000:  # newer; older or duplicate packets do not move it
                self._max_seq += delta
        self.packets_received += 1
        if self.onsets and self.onsets[-1][2] is None:
            self._after_onset(seq, arrived)
        transit = arrival_time_ms * (RATE // 1000) - packet.timestamp
        if self._last_transit is not None:
            d = abs(transit - self._last_transit)
            self._jitter_units += (d - self._jitter_units) / 16
        self._last_transit = transit
        index = self._own_packets.get(packet.payload)
        if index is not None:  # passed through untouched: our own audio
            self._remember(-1, index)
            self._last_audible_seq = seq
            self.audio_frames += 1
            if self.first_echo_at is None:
                self.first_echo_at = time.monotonic()
            if self.audio_frames % self.check_every == 0 or self.tone_checks == 0:
                self.tone_checks += 1
                self.tone_checks_own += 1
            return
        self._decode(packet.payload, seq, arrived)

    def _after_onset(self, seq: int, arrived: float) -> None:
        """The packet after an onset: when it came (``onsets``' last field)."""
        if self.onsets[-1][1] == (seq - 1) & 0xFFFF:
            self.onsets[-1][2] = arrived

    def _decode(self, payload: bytes, seq: int, arrived: float) -> None:
        """A packet that is not the caller's own, decoded: audible frames counted, an onset
        kept, the tone checked on a sample of them."""
        try:
            frames = self._decoder.decode(av.Packet(payload))
        except av.FFmpegError:
            self.decode_errors += 1
            return
        steady = self._last_audible_seq == (seq - 1) & 0xFFFF
        for frame in frames:
            samples = memoryview(bytes(frame.planes[0])[: frame.samples * 2]).cast("h")
            if max(samples) < AUDIBLE_PEAK:
                continue
            if self._last_audible_seq != (seq - 1) & 0xFFFF and self._last_audible_seq != seq:
                self.onsets.append([arrived, seq, None])  # sound after silence: its first frame
            self._last_audible_seq = seq
            # The level of the frame this one echoes, from its last 4 ms: a re-encoded echo is
            # shifted by the codecs' look-ahead, so the frame starts with the previous frame.
            self._remember(max(samples[-LEVEL_TAIL:]), -1)
            self.audio_frames += 1
            if not self.check_tone:
                self.first_echo_at = self.first_echo_at or time.monotonic()
            elif self.first_echo_at is None or (
                steady and self.audio_frames % self.check_every == 0
            ):
                self._check_tone(samples)

    def _remember(self, level: int, index: int) -> None:
        if self._sent_clock is None:
            return
        start, sent = self._sent_clock()
        if start is not None and sent:
            self._heard.append((self._clock(), sent - 1, level, index))

    def echo_delay_ms(self, since: float = 0.0) -> float | None:
        """How late the echo is, in ms, over the frames heard since ``since`` (monotonic time).

        Each frame heard is matched with the frame of the caller's one-second loop it echoes:
        a passed-through packet by its bytes (exact); a re-encoded one by the loop's level
        pattern, choosing, for each second heard, the lag in whole frames that explains most of
        its levels (seconds where none explains 80 % are left out; None if all are). The delay
        is then arrival - when that frame was due to be sent, the median over the frames
        matched: the echo's real delay, path and queues included, unlike the lag (sent - heard),
        which also counts every frame lost.
        """
        if self._sent_clock is None:
            return None
        start, _ = self._sent_clock()
        heard = [h for h in self._heard if h[0] >= since]
        if start is None or not heard:
            return None
        frame_s = SAMPLES / RATE
        exact = [h for h in heard if h[3] >= 0]
        if exact:
            delays = [
                at - (start + (last - (last - index) % 50) * frame_s)
                for at, last, _, index in exact
            ]
            return 1000 * statistics.median(delays)
        delays = _delays_by_pattern(heard, start, frame_s)
        return 1000 * statistics.median(delays) if delays else None

    def _check_tone(self, samples: memoryview) -> None:
        total = sum(x * x for x in samples) * len(samples) / 2 + 1.0
        own_power = goertzel_power(samples, self.hz)
        own = own_power > OWN_TONE_SHARE * total
        if self.first_echo_at is None:
            if not own:  # an onset frame; a caller that never hears itself has no first echo
                return
            self.first_echo_at = time.monotonic()
        if not own and not self._another_tone(samples, own_power, total):
            # Neither our tone nor anyone else's: a frame the codec smeared (a discontinuity
            # where the far end lost or concealed a frame). Loss is measured elsewhere.
            self.tone_checks_unclear += 1
            return
        self.tone_checks += 1
        self.tone_checks_own += own

    def _another_tone(self, samples: memoryview, own_power: float, total: float) -> bool:
        """Does a tone other than ours dominate the frame (cross-talk)? Scans the voice band in
        20 Hz steps, ours excluded; only run on a frame that failed the own-tone check."""
        for hz in range(OTHER_TONE_LOW_HZ, OTHER_TONE_HIGH_HZ, 20):
            if abs(hz - self.hz) < 40:
                continue
            power = goertzel_power(samples, hz)
            if power > FOREIGN_TONE_SHARE * total and power > own_power:
                if len(self.foreign_tones) < 5:  # what was heard, for the report
                    self.foreign_tones.append((hz, round(power / total, 2)))
                return True
        return False


def _delays_by_pattern(
    heard: list[tuple[float, int, int, int]], start: float, frame_s: float
) -> list[float]:
    """``EchoCounter.echo_delay_ms`` for re-encoded echoes: each frame's delay, over the
    seconds in which one lag of the loop's level pattern explains 80 % of the levels heard."""
    # Loud or quiet: split halfway between the levels heard (the codecs' gain on a tone
    # depends on its frequency, so no absolute threshold fits every caller).
    levels = sorted(level for _, _, level, _ in heard)
    split = (levels[len(levels) // 5] + levels[len(levels) * 4 // 5]) / 2
    # The lag changes when a frame is lost or trimmed: find it second by second (one loop
    # of the pattern each), and keep the seconds where one lag explains 80 % of the levels.
    delays: list[float] = []
    for i in range(0, len(heard) - 49, 50):
        chunk = heard[i : i + 50]
        bits = [(last, int(level >= split)) for _, last, level, _ in chunk]
        hits, lag = max(
            (sum(bit == DELAY_PATTERN[(last - lag) % 50] for last, bit in bits), lag)
            for lag in range(50)
        )
        if hits >= 0.8 * len(chunk):
            delays += [at - (start + (last - lag) * frame_s) for at, last, _, _ in chunk]
    return delays
