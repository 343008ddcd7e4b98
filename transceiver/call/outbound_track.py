"""The outbound track: the backend's audio paced in real time, handed to aiortc's sender as Opus.

``BackendAudioTrack`` takes what the backend emits, PCM16 mono 48 kHz (format ``pcm16``: encoded
to Opus here, 20 ms at a time) or Opus packets (format ``opus``: sent as they are, each paced by
its own duration), and returns encoded packets to aiortc's sender, which then only packetizes
them. That removes two per-frame costs of stock aiortc (docs/design.md) without patching it: the
pure-Python ``compute_audio_level_dbov`` over every frame, and a thread-pool round trip
(``run_in_executor``) for every encode. The price: no RFC 6464 audio-level header extension on
outbound packets, which a 1:1 voice session does not need. Inbound audio:
``transceiver.call.inbound``.
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

SAMPLES_PER_FRAME = AUDIO_SAMPLE_RATE // 50  # on the RTP clock (48 kHz), whatever the PCM rate
SLOT_S = 0.02  # one frame's slot
MAX_DUE_PER_TAKE = 10  # packets a late tick may catch up at once (200 ms of 20 ms frames)
# A slot whose audio has not come yet is held open this long past its time before silence
# fills it: audio that comes meanwhile leaves at once (``on_due``) in its own slot. Live audio
# (an echo, a streaming backend) arrives with a phase of its own against the 20 ms clock; a
# packet just late for its tick would otherwise meet silence in its slot and then wait a whole
# frame, and every such packet left the rest of the call one frame later for good.
SLOT_GRACE_S = 0.010
# A push that leaves at least this many frames queued (once what was due went) says the
# backend's audio comes ahead of its slots (a model server's deltas, 4x real time or more), not
# frame by frame in real time (an echo, a live stream, one frame early now and then):
# ``BackendAudioTrack._ahead``.
AHEAD_FRAMES = 3
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
    """An outbound audio track fed by ``push`` (PCM) or ``push_opus``; yields Opus packets paced
    in real time, silence when the backend has nothing.

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
        self._pts = 0
        self._start: float | None = None
        # The backend sends ahead of real time (its last push left AHEAD_FRAMES queued): a slot
        # with nothing is silence on its tick, not held open, since no audio of a live stream is
        # about to come for it; held open, its silence left a tick late, behind audio that left
        # on time, and the caller's jitter buffer grew by that frame (docs/realtime.md).
        self._ahead = False
        # The last slot went out as silence on its tick, the backend ahead: the audio that comes
        # next takes the next slot at once, as audio would have taken a slot held open.
        self._early = False
        # Sends what is due now, out of the clock's tick (set by transceiver.call.outbound): audio
        # that arrives for a slot held open goes at once.
        self.on_due: Callable[[], None] | None = None
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
            self._slot_filled()

    def push_opus(self, packet: bytes) -> None:
        """Queue one Opus packet from the backend; ValueError (``OpusError``) if it is not one."""
        samples = opus.packet_samples(packet)
        dtx = bytes((packet[0] & 0xFC,))  # code 0: one frame, of 0 bytes
        self._dtx = dtx if opus.packet_samples(dtx) == SAMPLES_PER_FRAME else b""
        self._silence_frame = opus.silence_frame(packet[0])
        if len(self._packets) == self._packets.maxlen:
            self.frames_dropped += 1
        self._packets.append((bytes(packet), samples))
        self._slot_filled()

    def _slot_filled(self) -> None:
        """Audio came: if its slot is already due (held open for it), or the next one may go
        early (``_early``), send it now; what stays queued says if the backend is ahead."""
        if self.on_due is not None:
            wait = self._slot_at() - self._clock()
            if wait <= 0 or (self._early and wait <= SLOT_S):
                self.on_due()
        self._ahead = self.queued_frames() >= AHEAD_FRAMES

    def _slot_at(self) -> float:
        """When the next slot is due (monotonic); infinity before the clock started."""
        if self._start is None:
            return float("inf")
        return self._start + self._pts / AUDIO_SAMPLE_RATE

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

    def _next(self) -> list[bytes]:
        """The next packet(s) to send (advances ``_pts`` by what they last)."""
        if self.audio_format == OPUS:
            if self._packets:
                payload, samples = self._packets.popleft()
                self._count_out()
                self._early = False
                self._quiet_frames = 0
            else:  # the stream's own DTX frame for a short gap, then silence; silence before any
                self._quiet_frames += 1
                concealed = self._dtx and self._quiet_frames <= CONCEALED_SLOTS
                payload = self._dtx if concealed else self._silence_frame
                samples = SAMPLES_PER_FRAME
            self._pts += samples
            return [payload]
        silence = self._silence
        pcm = self._frames.popleft() if self._frames else silence
        if self._encoder is None:
            self._encoder = opus.Encoder(self.sample_rate, self._encoder_settings)
        self._pts += SAMPLES_PER_FRAME
        if pcm is not silence:
            self._count_out()
            self._quiet_frames = 0
            self._early = False
        else:
            self._quiet_frames += 1
            if self._encoder.in_dtx:
                # DTX (--opus-dtx): the caller's decoder got the DTX frame that began the
                # silence and makes comfort noise; our own filler has nothing new to encode.
                return []
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
                return [self._own_silence]
        packets = self._encoder.encode(pcm)
        if pcm is silence and self._quiet_frames == ENCODED_SILENCE_FRAMES and packets:
            self._own_silence = packets[-1]
        return packets

    def _count_out(self) -> None:
        self.frames_out += 1
        if self._on_frame_out is not None:
            self._on_frame_out()

    def take_due(
        self, now: float, grid_at: float | None = None, limit: int = MAX_DUE_PER_TAKE
    ) -> list[tuple[bytes, int]]:
        """The packets due by ``now`` (``time.monotonic()``), as (payload, RTP timestamp offset
        in samples), at most ``limit``: what ``transceiver.call.outbound`` sends on a tick. The
        first call starts the clock, as a sound card's first read does: at ``grid_at``, the
        tick's place on its clock's grid, when given (its slots then fall due on its ticks; from
        ``now``, which the loop's delay makes late, each later tick on time would come just
        before its slot, and the slot's audio would wait a whole period for the next one). A slot
        with no audio yet is held open for ``SLOT_GRACE_S``, then silence fills it. A stalled
        loop catches up at most ``limit`` packets per call; the rest follow on the next ticks."""
        if self._start is None:
            self._start = now if grid_at is None else min(grid_at, now)
        due: list[tuple[bytes, int]] = []
        while len(due) < limit:
            slot_at = self._start + self._pts / AUDIO_SAMPLE_RATE
            queued = bool(self._frames or self._packets)
            if slot_at > now and not (self._early and queued and slot_at - now <= SLOT_S):
                break
            if not queued:
                if not self._ahead and now - slot_at < SLOT_GRACE_S:
                    break  # nothing yet: the slot stays open (``on_due`` sends it when audio comes)
                self._early = self._ahead  # silence on its tick: what comes next may go early
            # On the track's clock, not the encoder's pts: libopus shifts its pts by its
            # look-ahead, and quiet frames are not encoded at all.
            pts = self._pts
            for j, payload in enumerate(self._next()):
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
            wait = self._slot_at() - now
            if wait <= 0:  # a slot held open: silence fills it once its grace is over
                wait = wait + SLOT_GRACE_S
            await asyncio.sleep(max(wait, 0.001))
