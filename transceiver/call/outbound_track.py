"""The outbound track: the backend's audio toward the caller, as Opus, on the call's playout.

``BackendAudioTrack`` takes what the backend emits, PCM16 mono 48 kHz (format ``pcm16``: encoded
to Opus here, 20 ms at a time) or Opus packets (format ``opus``: sent as they are, each slot as
long as its packet), and returns encoded packets to aiortc's sender, which then only packetizes
them. When each packet leaves, and with which RTP timestamp, is ``transceiver.call.playout``'s
decision (live audio at once, audio ahead of real time paced, silence in an empty slot); the
track holds what is queued and what fills a slot. That removes two per-frame costs of stock
aiortc (docs/design.md) without patching it: the pure-Python ``compute_audio_level_dbov`` over
every frame, and a thread-pool round trip (``run_in_executor``) for every encode. The price: no
RFC 6464 audio-level header extension on outbound packets, which a 1:1 voice session does not
need. Inbound audio: ``transceiver.call.inbound``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

import av
from aiortc import MediaStreamError, MediaStreamTrack

from transceiver.backend import (
    AUDIO_FORMATS,
    AUDIO_SAMPLE_RATE,
    OPUS,
    PCM16,
    SAMPLE_RATES,
    frame_bytes,
)
from transceiver.call import opus
from transceiver.call.libopus import DEFAULTS, EncoderSettings
from transceiver.call.playout import FILL, MAX_HOLD_S, SEND, WAIT, Playout

SAMPLES_PER_FRAME = AUDIO_SAMPLE_RATE // 50  # on the RTP clock (48 kHz), whatever the PCM rate
MAX_DUE_PER_TAKE = 10  # packets a late tick may catch up at once (200 ms of 20 ms frames)
# The longest an empty slot of live audio is held open before silence fills it (the hold adapts
# to the backend's jitter below it: ``transceiver.call.playout``); a tick this long after a slot
# finds it filled.
SLOT_GRACE_S = MAX_HOLD_S
# A push that leaves at least this many frames queued (once what was due went) says the
# backend's audio comes ahead of its slots (a model server's deltas, 4x real time or more), not
# frame by frame in real time (an echo, a live stream, one frame early now and then):
# ``BackendAudioTrack._ahead``.
AHEAD_FRAMES = 3
LIVE_PUSH_GAP_S = 0.010  # half a frame: pushes closer than this are one burst
# Silent frames still given to the encoder when the backend falls quiet, so that its state
# (and the caller's decoder's) fades out and the next speech starts from silence; after them
# the encoder's own last silent packet is repeated instead.
ENCODED_SILENCE_FRAMES = 3
# Opus passthrough: empty slots the caller's decoder conceals (a DTX frame of the backend's
# stream: concealed as a lost packet is, which carries a short gap smoothly) before silence
# (``opus.SILENCE_FRAME``) ends the sound. Concealment kept up for a whole stall extrapolated the
# last sound: a fresh libopus decoder played up to 1.6 x the input's peak 200 ms into a stall
# (a 24 kHz backend's tone), then noise at a third of its level for as long as the backend
# stayed quiet (issue 25; tests/transceiver/test_outbound.py).
CONCEALED_SLOTS = 2


class BackendAudioTrack(MediaStreamTrack):
    """An outbound audio track fed by ``push`` (PCM) or ``push_opus``; yields Opus packets when
    the call's ``Playout`` has them due, silence when the backend has nothing.

    The format is ``pcm16`` until ``set_format`` says otherwise (the session learns it once the
    backend opened, after the track was added); the encoder exists only if PCM ever comes.
    """

    kind = "audio"

    def __init__(
        self,
        max_buffered_frames: int = 1500,
        on_frame_out: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        encoder_settings: EncoderSettings = DEFAULTS,
    ) -> None:
        """``encoder_settings``: the ``--opus-*`` options, for PCM the backend gives."""
        super().__init__()
        self._clock = clock  # the time ``take_due`` is given: when audio comes, is its slot due?
        self._on_frame_out = on_frame_out
        self.audio_format = PCM16
        # PCM16 frames (pcm16) or (packet, samples) (opus), oldest first.
        self._frames: deque[bytes] = deque(maxlen=max_buffered_frames)
        self._packets: deque[tuple[bytes, int]] = deque(maxlen=max_buffered_frames)
        self._pending = b""
        self.sample_rate = AUDIO_SAMPLE_RATE  # of the backend's PCM (``set_format``)
        self._frame_bytes = frame_bytes(AUDIO_SAMPLE_RATE)
        self._silence = bytes(self._frame_bytes)
        self._encoder: opus.Encoder | None = None
        self._encoder_settings = encoder_settings
        self._quiet_frames = 0  # consecutive slots of silence sent
        self._own_silence = b""  # pcm16: the encoder's packet for its last encoded silent frame
        # opus: the backend's last TOC as a frame of 0 bytes, what fills the first slots it left
        # empty (``CONCEALED_SLOTS``): RFC 6716 3.2.1's DTX, which the caller's decoder conceals
        # in the stream's own mode; then silence, in the stream's channels.
        self._dtx = b""
        self._silence_frame = opus.SILENCE_FRAME
        self.playout = Playout()
        # The backend sends ahead of real time (its last push left AHEAD_FRAMES queued): its
        # audio is paced, a slot with nothing is silence on its tick, not held open, since no
        # audio of a live stream is about to come for it; held open, its silence left a tick
        # late, behind audio that left on time, and the caller's jitter buffer grew by that
        # frame (docs/realtime.md).
        self._ahead = False
        # Sends what is due now, out of the clock's tick (set by transceiver.call.outbound): live
        # audio leaves on the push that brings it.
        self.on_due: Callable[[], None] | None = None
        self._pushing = False  # on_due runs: send what is due, fill no silence
        self.frames_out = 0
        self.frames_dropped = 0

    def set_format(
        self, audio_format: str, sample_rate: int = AUDIO_SAMPLE_RATE, ahead: bool = False
    ) -> None:
        """The backend's audio: its format, its PCM rate, and whether it comes ahead of real
        time (``BackendSession.audio_ahead``; until its pushes say otherwise)."""
        if audio_format not in AUDIO_FORMATS:
            raise ValueError(f"unknown audio format {audio_format!r}")
        if sample_rate not in SAMPLE_RATES:
            raise ValueError(f"sample rate {sample_rate} is not one of {SAMPLE_RATES}")
        self.audio_format = audio_format
        self.sample_rate = sample_rate
        self._ahead = ahead
        self._frame_bytes = frame_bytes(sample_rate)
        self._silence = bytes(self._frame_bytes)

    def push(self, pcm: bytes) -> None:
        """Queue PCM from the backend (any length; split into whole frames, rest kept)."""
        data = self._pending + pcm
        size = self._frame_bytes
        whole = len(data) - len(data) % size
        for i in range(0, whole, size):
            if len(self._frames) == self._frames.maxlen:
                self.frames_dropped += 1
            self._frames.append(data[i : i + size])
        self._pending = data[whole:]
        if whole:
            self._slot_filled(whole // size * SAMPLES_PER_FRAME, whole // size)

    def push_opus(self, packet: bytes) -> None:
        """Queue one Opus packet from the backend; ValueError (``OpusError``) if it is not one."""
        samples = opus.packet_samples(packet)
        dtx = bytes((packet[0] & 0xFC,))  # code 0: one frame, of 0 bytes
        self._dtx = dtx if opus.packet_samples(dtx) == SAMPLES_PER_FRAME else b""
        self._silence_frame = opus.silence_frame(packet[0])
        if len(self._packets) == self._packets.maxlen:
            self.frames_dropped += 1
        self._packets.append((bytes(packet), samples))
        self._slot_filled(samples, 1)

    def _slot_filled(self, samples: int, added: int) -> None:
        """Audio came: if the playout has it due (live audio: at once), send it now. Whether the
        backend is ahead is learnt from its pushes: ahead once one leaves ``AHEAD_FRAMES``
        queued, live again when one, half a frame or more after the last, finds fewer queued
        before it (the pushes of a burst come together: its second finds the queue its first
        left, and is still ahead; a live source's next packet, in its rhythm, is live)."""
        now = self._clock()
        last = self.playout.pushed_at
        if (
            self._ahead
            and last is not None
            and now - last >= LIVE_PUSH_GAP_S
            and self.queued_frames() - added < AHEAD_FRAMES
        ):
            self._ahead = False
        self.playout.pushed(now, samples)
        if self.on_due is not None and self.playout.decide(now, True, self._ahead) == SEND:
            self._pushing = True
            try:
                self.on_due()
            finally:
                self._pushing = False
        if self.queued_frames() >= AHEAD_FRAMES:
            self._ahead = True

    def queued_frames(self) -> int:
        """Frames (pcm16) or packets (opus) the backend gave that are not sent yet."""
        return len(self._frames) + len(self._packets)

    def clear(self) -> int:
        """Forget audio not yet played (barge-in); returns how many frames were dropped."""
        dropped = len(self._frames) + len(self._packets)
        self._frames.clear()
        self._packets.clear()
        self._pending = b""
        if self.audio_format == OPUS:  # silence at once: no concealment carries the cut sound on
            self._quiet_frames = max(self._quiet_frames, CONCEALED_SLOTS)
        return dropped

    def _next(self) -> tuple[list[bytes], int]:
        """The next packet(s) to send, and the samples they last."""
        if self.audio_format == OPUS:
            if self._packets:
                payload, samples = self._packets.popleft()
                self._count_out()
                self._quiet_frames = 0
            else:  # the stream's own DTX frame for a short gap, then silence; silence before any
                self._quiet_frames += 1
                concealed = self._dtx and self._quiet_frames <= CONCEALED_SLOTS
                payload = self._dtx if concealed else self._silence_frame
                samples = SAMPLES_PER_FRAME
            return [payload], samples
        silence = self._silence
        pcm = self._frames.popleft() if self._frames else silence
        if self._encoder is None:
            self._encoder = opus.Encoder(self.sample_rate, self._encoder_settings)
        if pcm is not silence:
            self._count_out()
            self._quiet_frames = 0
        else:
            self._quiet_frames += 1
            if self._encoder.in_dtx:
                # DTX (--opus-dtx): the caller's decoder got the DTX frame that began the
                # silence and makes comfort noise; our own filler has nothing new to encode.
                return [], SAMPLES_PER_FRAME
            if (
                self._quiet_frames > ENCODED_SILENCE_FRAMES
                and self._own_silence
                and not self._encoder_settings.dtx  # with DTX, encode until libopus goes quiet
            ):
                # The backend is quiet (a voice agent listening): repeat this encoder's own last
                # silent packet. libopus spends more on silence than on speech (~0.24 against
                # ~0.13 ms a frame). Never another encoder's: its packet (hybrid, full band)
                # spliced into this stream (CELT or hybrid at this call's bandwidth) made the
                # caller's decoder play a 40 ms full-scale burst (issue 25).
                return [self._own_silence], SAMPLES_PER_FRAME
        packets = self._encoder.encode(pcm)
        if pcm is silence and self._quiet_frames == ENCODED_SILENCE_FRAMES and packets:
            self._own_silence = packets[-1]
        return packets, SAMPLES_PER_FRAME

    def _count_out(self) -> None:
        self.frames_out += 1
        if self._on_frame_out is not None:
            self._on_frame_out()

    def take_due(
        self, now: float, grid_at: float | None = None, limit: int = MAX_DUE_PER_TAKE
    ) -> list[tuple[bytes, int]]:
        """The packets due by ``now`` (``time.monotonic()``), as (payload, RTP timestamp offset
        in samples), at most ``limit``: what ``transceiver.call.outbound`` sends on a tick and on
        a push (``on_due``). The first call starts the playout's grid, as a sound card's first
        read does: at ``grid_at``, the tick's place on its clock's grid, when given (its slots
        then fall due on its ticks; from ``now``, which the loop's delay makes late, each later
        tick on time would come just before its slot). What is due, and when silence fills a
        slot: ``transceiver.call.playout``. A stalled loop catches up at most ``limit`` packets
        per call; the rest follow on the next ticks."""
        playout = self.playout
        playout.start(now, grid_at)
        due: list[tuple[bytes, int]] = []
        while len(due) < limit:
            queued = bool(self._frames or self._packets)
            action = playout.decide(now, queued, self._ahead)
            if action == WAIT or (action == FILL and self._pushing):
                break  # a push sends audio; silence is the ticks' (more audio may be coming)
            payloads, samples = self._next()
            more = bool(self._frames or self._packets)
            # On the playout's clock, not the encoder's pts: libopus shifts its pts by its
            # look-ahead, and quiet frames are not encoded at all.
            pts = playout.advance(now, samples, queued, self._ahead, more)
            for j, payload in enumerate(payloads):
                due.append((payload, pts + j * SAMPLES_PER_FRAME))
        return due

    async def recv(self) -> av.Packet:  # type: ignore[override]
        """aiortc's way to pull a packet (its own sender's loop): one ``take_due`` at a time,
        paced like a sound card. ``transceiver.call.outbound`` sends without it."""
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            now = time.monotonic()
            due = self.take_due(now, limit=1)
            if due:
                payload, pts = due[0]
                packet = av.Packet(payload)
                packet.pts = pts
                packet.time_base = opus.TIME_BASE
                return packet
            wait = self.playout.slot_at - now
            if wait <= 0:  # a slot held open: silence fills it once its hold is over
                wait = wait + self.playout.hold_s
            await asyncio.sleep(max(wait, 0.001))
