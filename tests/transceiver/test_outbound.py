"""Outbound RTP on the process's clock, and inbound SRTP straight from the socket: the packets
they make and take, byte for byte, and the aiortc objects they swap."""

from __future__ import annotations

import asyncio
import datetime
import time
from types import SimpleNamespace

import pylibsrtp
import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc import clock as aiortc_clock
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpparameters import (
    RTCRtpCodecParameters,
    RTCRtpHeaderExtensionParameters,
    RTCRtpParameters,
)
from aiortc.rtcrtpsender import RTCRtpSender
from aiortc.rtp import HeaderExtensionsMap, RtpPacket

from testbed.callers import opus_tone_packets
from transceiver.backend import OPUS, PCM16
from transceiver.call.inbound import UNPROTECT_FAILED, InboundAudio, direct_rtp
from transceiver.call.opus import SILENCE_FRAME
from transceiver.call.outbound import AudioClock, PhasedSenders, ntp_now
from transceiver.call.outbound_track import SLOT_GRACE_S, BackendAudioTrack
from transceiver.call.playout import LEAD_S
from transceiver.call.seam import DirectSender, InlineAudioReceiver, InlineAudioSender, latch_srtp
from transceiver.call.seam import install_receiver as install_inbound
from transceiver.call.seam import install_sender as install
from transceiver.call.ssrc import SsrcLatch

TONE = opus_tone_packets(440)
MID_URI = "urn:ietf:params:rtp-hdrext:sdes:mid"
PT = 111


def extensions() -> HeaderExtensionsMap:
    m = HeaderExtensionsMap()
    m.configure(RTCRtpParameters(headerExtensions=[RTCRtpHeaderExtensionParameters(1, MID_URI)]))
    return m


def fake_sender() -> SimpleNamespace:
    """The state of aiortc's sender a direct sender reads and keeps up to date."""
    return SimpleNamespace(
        _ssrc=0x11223344,
        _RTCRtpSender__mid="0",
        _RTCRtpSender__rtp_header_extensions_map=extensions(),
        _RTCRtpSender__packet_count=0,
        _RTCRtpSender__octet_count=0,
        _RTCRtpSender__rtp_timestamp=0,
        _RTCRtpSender__ntp_timestamp=0,
    )


def opus_track(packets: list[bytes], clock=time.monotonic) -> BackendAudioTrack:
    track = BackendAudioTrack(clock=clock)
    track.set_format(OPUS)
    for p in packets:
        track.push_opus(p)
    return track


def test_a_direct_sender_sends_each_due_packet_as_aiortc_would_serialize_it():
    sender, sent = fake_sender(), []
    direct = DirectSender(
        sender,
        PT,
        opus_track(TONE[:3]),
        protect=lambda: lambda data: data,  # SRTP left out: the plain packet is checked
        send=sent.append,
        sequence_number=0xFFFF,  # wraps
        timestamp_origin=0xFFFFFFFF - 959,  # wraps after the first packet
    )
    assert direct.send_due(now=100.0, ntp=12345) == 1  # the first call starts the track's clock
    assert direct.send_due(now=100.045, ntp=67890) == 2  # 20 and 40 ms are due by 45 ms
    parsed = [RtpPacket.parse(d, extensions()) for d in sent]
    assert [p.payload for p in parsed] == TONE[:3]
    assert [p.sequence_number for p in parsed] == [0xFFFF, 0, 1]
    assert [p.timestamp for p in parsed] == [0xFFFFFFFF - 959, 0, 960]
    assert {(p.payload_type, p.marker, p.ssrc, p.extensions.mid) for p in parsed} == {
        (PT, 1, 0x11223344, "0")
    }
    # What aiortc's Sender Reports carry, as its own loop would have left it.
    assert sender._RTCRtpSender__packet_count == 3
    assert sender._RTCRtpSender__octet_count == sum(map(len, TONE[:3]))
    assert sender._RTCRtpSender__rtp_timestamp == 960
    assert sender._RTCRtpSender__ntp_timestamp == 67890


def test_a_direct_sender_sends_silence_when_the_backend_is_quiet_and_nothing_before_srtp():
    sent: list[bytes] = []
    srtp = None
    direct = DirectSender(fake_sender(), PT, opus_track([]), lambda: srtp, sent.append, 1, 0)
    assert direct.send_due(100.0, 0) == 0 and sent == []  # DTLS not up: nothing in clear
    srtp = lambda data: data  # noqa: E731
    assert direct.send_due(100.0, 0) == 0, "the slot is held open for the backend's audio"
    assert direct.send_due(100.0 + SLOT_GRACE_S, 0) == 1
    assert RtpPacket.parse(sent[0], extensions()).payload == SILENCE_FRAME  # before any audio


def test_a_late_tick_catches_up_a_bounded_number_of_packets():
    sent: list[bytes] = []
    direct = DirectSender(
        fake_sender(), PT, opus_track(TONE * 2), lambda: lambda d: d, sent.append, 1, 0
    )  # fmt: skip
    direct.send_due(100.0, 0)
    assert direct.send_due(101.0, 0) == 10  # a second late: 50 due, 10 now
    assert direct.send_due(101.0, 0) == 10  # the rest follows on the next ticks


def test_the_clock_ticks_every_sender_and_drops_one_that_raises():
    class Broken:
        def send_due(self, now: float, ntp: int, grid_at: float | None = None) -> int:
            raise RuntimeError("boom")

    async def go() -> tuple[int, int, int]:
        clock, sent = AudioClock(), []
        good = DirectSender(
            fake_sender(), PT, opus_track(TONE), lambda: lambda d: d, sent.append, 1, 0
        )  # fmt: skip
        clock.add(good)
        clock.add(Broken())  # type: ignore[arg-type]
        await asyncio.sleep(0.25)
        ticks, senders = clock.ticks, len(clock)
        clock.close()
        await asyncio.sleep(0.05)
        return ticks, senders, len(sent)

    ticks, senders, sent = asyncio.run(go())
    assert ticks >= 3 and senders == 1 and sent >= 3


def test_calls_are_spread_over_the_period_s_phases_least_filled_first():
    senders = PhasedSenders(5)
    calls = [object() for _ in range(12)]
    phases = [senders.add(c) for c in calls]  # type: ignore[arg-type]
    assert phases == [0, 1, 2, 3, 4] * 2 + [0, 1]
    assert senders.add(calls[0]) == 0 and len(senders) == 12  # added twice: still once
    for c in calls[:3]:  # phases 0, 1, 2 lose one each
        senders.discard(c)  # type: ignore[arg-type]
    # 2, 2, 1, 2, 2 left: the hole first, then the lowest of the equals
    assert [senders.add(object()) for _ in range(3)] == [2, 0, 1]  # type: ignore[arg-type]
    assert [len(senders.at(p)) for p in range(5)] == [3, 3, 2, 2, 2]
    assert senders.at(7) == senders.at(2)  # a grid step is its phase's


def test_the_next_tick_skips_empty_phases_and_the_steps_a_stall_missed():
    senders = PhasedSenders(5)
    assert senders.next_step(after=3, earliest=0) is None  # nobody: the clock stops
    a, b = object(), object()
    senders.add(a)  # type: ignore[arg-type]  # phase 0
    senders.add(b)  # type: ignore[arg-type]  # phase 1
    assert senders.next_step(after=0, earliest=1) == 1
    assert senders.next_step(after=1, earliest=2) == 5  # 2, 3, 4 are empty: next period
    assert senders.next_step(after=1, earliest=13) == 15  # a stall to step 13: on, not back
    with pytest.raises(ValueError, match="phases"):
        PhasedSenders(0)


def test_the_clock_ticks_each_call_once_a_period_on_its_phase_s_grid_through_a_stall():
    """Ten calls over five phases: two per tick, each tick every 4 ms, each call every 20 ms;
    after the loop stalls 50 ms the missed ticks are not repeated and the grid holds."""

    class Recorder:
        def __init__(self, stall_once: bool = False) -> None:
            self.grid: list[float] = []
            self.stall_once = stall_once

        def send_due(self, now: float, ntp: int, grid_at: float | None = None) -> int:
            assert grid_at is not None and grid_at <= now
            self.grid.append(grid_at)
            if self.stall_once and len(self.grid) == 3:
                time.sleep(0.05)  # the loop is held: other work, a GC pause
            return 0

    async def go() -> tuple[AudioClock, list[Recorder]]:
        clock = AudioClock(period_s=0.02, phases=5)
        calls = [Recorder(stall_once=i == 0) for i in range(10)]
        for call in calls:
            clock.add(call)  # type: ignore[arg-type]
        await asyncio.sleep(0.3)
        clock.close()
        return clock, calls

    clock, calls = asyncio.run(go())
    origin = calls[0].grid[0]
    offsets = set()
    for call in calls:
        steps = [(t - origin) / 0.004 for t in call.grid]
        assert all(abs(s - round(s)) < 1e-6 for s in steps), "every tick on the 4 ms grid"
        phases = {round(s) % 5 for s in steps}
        assert len(phases) == 1, "a call keeps its phase"
        offsets |= phases
        gaps = [round((b - a) / 0.02) for a, b in zip(call.grid, call.grid[1:], strict=False)]
        assert min(gaps) >= 1, gaps  # once a period at most; a stall skips periods, none repeat
        assert len(call.grid) >= 3
    assert offsets == {0, 1, 2, 3, 4}
    assert clock.ticks <= 75  # 5 ticks a period over 300 ms, never more (a busy machine: fewer)


def test_a_track_started_on_its_tick_s_grid_sends_audio_on_the_next_tick_however_late():
    """The first tick ran 3 ms late: a track whose clock starts at the tick's place on the grid
    has its slots due on the ticks; one started at that late ``now`` would have each slot fall
    due just after a tick that ran on time, and paced audio (a backend ahead of real time)
    would wait a period more."""
    for grid_at, sent_on_the_next_tick in ((100.0, 1), (None, 0)):
        track = opus_track([])
        track.set_format(OPUS, ahead=True)
        for packet in TONE[:4]:
            track.push_opus(packet)
        assert len(track.take_due(100.003, grid_at=grid_at)) == 1  # slot 0
        assert len(track.take_due(100.0201, grid_at=100.02)) == sent_on_the_next_tick


async def answered() -> tuple[RTCPeerConnection, RTCPeerConnection, BackendAudioTrack]:
    caller = RTCPeerConnection()
    caller.addTransceiver("audio")
    await caller.setLocalDescription(await caller.createOffer())
    callee = RTCPeerConnection()
    await callee.setRemoteDescription(RTCSessionDescription(caller.localDescription.sdp, "offer"))
    track = BackendAudioTrack()
    callee.addTrack(track)
    return caller, callee, track


def test_install_swaps_the_track_s_sender_alone_and_refuses_twice():
    async def go() -> None:
        caller, callee, track = await answered()
        try:
            clock = AudioClock()
            assert install(callee, track, clock, lambda data: None) == 1
            sender = callee.getSenders()[0]
            assert type(sender) is InlineAudioSender and sender._clock is clock
            assert RTCRtpSender._run_rtp is not InlineAudioSender._run_rtp  # nothing global
            with pytest.raises(RuntimeError, match="expected aiortc"):
                install(callee, track, clock, lambda data: None)
        finally:
            await caller.close()
            await callee.close()

    asyncio.run(go())


def test_install_refuses_an_aiortc_that_moved_its_sender_state():
    async def go() -> None:
        caller, callee, track = await answered()
        try:
            sender = callee.getSenders()[0]
            del sender._RTCRtpSender__packet_count
            with pytest.raises(RuntimeError, match="not supported"):
                install(callee, track, AudioClock(), lambda data: None)
            assert type(sender) is RTCRtpSender
        finally:
            await caller.close()
            await callee.close()

    asyncio.run(go())


# -- inbound: SRTP straight from the socket -------------------------------------------------------
KEY = bytes(range(30))  # master key + salt of SRTP_AES128_CM_SHA1_80


def srtp(direction: int) -> pylibsrtp.Session:
    profile = pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80
    return pylibsrtp.Session(pylibsrtp.Policy(key=KEY, ssrc_type=direction, srtp_profile=profile))


def test_direct_rtp_unprotects_into_the_receiver_and_leaves_rtcp_to_aiortc():
    async def go() -> None:
        caller, callee, _ = await answered()
        try:
            got: list[bytes] = []
            path = InboundAudio(PCM16, on_pcm=got.append)
            install_inbound(callee, path)
            receiver = callee.getTransceivers()[0].receiver
            assert isinstance(receiver, InlineAudioReceiver)
            codec = RTCRtpCodecParameters("audio/opus", 48000, 2, payloadType=PT)
            receiver._RTCRtpReceiver__codecs[PT] = codec  # what receive() would have set
            receiver._opus_types = frozenset({PT})
            dtls = SimpleNamespace(
                _rx_srtp=srtp(pylibsrtp.Policy.SSRC_ANY_INBOUND),
                _rtp_header_extensions_map=HeaderExtensionsMap(),
            )
            sink = direct_rtp(receiver, latch_srtp(dtls, SsrcLatch(), lambda: None))
            protect = srtp(pylibsrtp.Policy.SSRC_ANY_OUTBOUND)
            for i, payload in enumerate(TONE[:8]):
                packet = RtpPacket(payload_type=PT, sequence_number=i, timestamp=i * 960, ssrc=5)
                packet.payload = payload
                assert sink(protect.protect(packet.serialize())) is True
            assert len(got) >= 6 and {len(f) for f in got} == {1920}
            # Tampered: authentication fails, counted, taken (never handed on to aiortc).
            packet = RtpPacket(payload_type=PT, sequence_number=9, timestamp=9 * 960, ssrc=5)
            packet.payload = TONE[9]
            forged = bytearray(protect.protect(packet.serialize()))
            forged[20] ^= 1
            assert sink(bytes(forged)) is True
            assert path.dropped[UNPROTECT_FAILED] == 1
            # RTCP (a receiver report) and runts go to aiortc's own path.
            assert sink(bytes([0x80, 201]) + bytes(30)) is False
            assert sink(b"\x80\x6f") is False
        finally:
            await caller.close()
            await callee.close()

    asyncio.run(go())


def test_a_quiet_pcm_backend_costs_no_encoding_and_its_timestamps_stay_on_the_clock():
    from transceiver.call.outbound_track import ENCODED_SILENCE_FRAMES

    track = BackendAudioTrack()  # pcm16
    encoded: list[list[bytes]] = []  # what the encoder returned, frame by frame
    track._encoder = None
    assert track.take_due(100.0, limit=1) == []  # the clock starts; the slot is held open
    due = track.take_due(100.0 + SLOT_GRACE_S, limit=1)  # then silence fills it
    encoder = track._encoder
    assert encoder is not None
    original = encoder.encode
    encoder.encode = lambda pcm: encoded.append(original(pcm)) or encoded[-1]  # type: ignore[method-assign]
    for i in range(1, 12):  # eleven more quiet frames
        due += track.take_due(100.0 + 0.02 * i + SLOT_GRACE_S, limit=1)
    assert len(encoded) == ENCODED_SILENCE_FRAMES - 1, "a few encoded to fade out, then none"
    # this encoder's own silent packet, repeated: never another encoder's spliced in (issue 25)
    assert [payload for payload, _ in due[-5:]] == [encoded[-1][-1]] * 5
    track.push(bytes(1920))  # speech (here: a frame of zeros the backend sent) resumes
    due += track.take_due(100.0 + 0.02 * 12, limit=1)
    assert len(encoded) == ENCODED_SILENCE_FRAMES
    assert [pts for _, pts in due] == [960 * i for i in range(13)], "one clock, no jumps"


def test_recv_paces_the_track_for_aiortc_s_own_sender():
    """The track stays a MediaStreamTrack: aiortc's sender (no direct path) pulls it with
    ``recv``, which paces packets on the track's clock, silence filling in."""

    async def go():
        track = BackendAudioTrack()
        track.set_format(OPUS)
        for packet in TONE[:3]:
            track.push_opus(packet)
        started = time.monotonic()
        packets = [await track.recv() for _ in range(5)]
        took = time.monotonic() - started
        dtx = bytes((TONE[2][0] & 0xFC,))  # the stream's own DTX frame after its packets
        assert [bytes(p) for p in packets] == [*TONE[:3], dtx, dtx]
        assert [p.pts for p in packets] == [0, 960, 1920, 2880, 3840]
        assert took >= 0.079  # the fifth packet is due 80 ms after the first: never sooner
        track.stop()
        with pytest.raises(MediaStreamError):
            await track.recv()

    asyncio.run(go())


def test_live_audio_leaves_on_its_push_early_or_late_on_one_unbroken_clock():
    """Live audio (an echo) has a phase of its own against the clock's ticks: each packet
    leaves on the push that brings it, whether its slot is due or not yet (within the lead),
    never waiting for a tick; a slot whose audio does not come within the hold is silence, and
    the audio after it leaves at once too. Sequence numbers and timestamps run on without a
    jump."""
    now = [100.0]
    sent: list[bytes] = []
    track = opus_track([], clock=lambda: now[0])
    direct = DirectSender(
        fake_sender(), PT, track, lambda: lambda d: d, sent.append, 1, 0, clock=lambda: now[0]
    )

    def heard() -> list[tuple[int, bytes, int]]:
        packets = (RtpPacket.parse(d, extensions()) for d in sent)
        return [(p.sequence_number, p.payload, p.timestamp) for p in packets]

    assert direct.send_due(100.0, 0, 100.0) == 0  # slot 0 is due, nothing yet: held open
    now[0] = 100.003
    track.push_opus(TONE[0])  # 3 ms late: out at once, in slot 0
    assert heard() == [(1, TONE[0], 0)]
    now[0] = 100.015
    track.push_opus(TONE[1])  # 8 ms early for slot 1 (100.023: the grid follows the source)
    assert heard()[-1] == (2, TONE[1], 960)
    assert direct.send_due(100.020, 0, 100.020) == 0  # the tick has nothing left to send
    now[0] = 100.043
    track.push_opus(TONE[2])
    assert heard()[-1] == (3, TONE[2], 1920)
    # Nothing for slot 3 (due ~100.063): held open for the hold, then silence.
    assert direct.send_due(100.060, 0, 100.060) == 0
    dtx = bytes((TONE[2][0] & 0xFC,))  # silence in passthrough: the stream's own DTX frame
    assert direct.send_due(100.080, 0, 100.080) == 1 and heard()[-1] == (4, dtx, 2880)
    now[0] = 100.081
    track.push_opus(TONE[3])  # after the silence: at once, in the next slot
    assert heard()[-1] == (5, TONE[3], 3840)
    direct.detach()
    now[0] = 100.090
    track.push_opus(TONE[4])  # the call stopped sending: audio triggers nothing
    assert len(sent) == 5


def test_live_audio_faster_than_real_time_is_paced_past_the_lead():
    """A backend that pushes frame by frame but faster than real time (every 10 ms) leaves on
    its pushes only while it is within ``LEAD_S`` of the grid; past it, the clock paces it: it
    never gets more than the lead (and the grid's bounded creep) ahead of real time."""
    now = [100.0]
    track = opus_track([], clock=lambda: now[0])
    sent_at: list[float] = []
    track.on_due = lambda: sent_at.extend(now[0] for _ in track.take_due(now[0]))
    track.take_due(100.0, grid_at=100.0)  # the clock starts
    for i in range(100):  # one second of pushes, two seconds of audio
        now[0] = 100.0 + 0.010 * i
        track.push_opus(TONE[i % len(TONE)])
        sent_at.extend(now[0] for _ in track.take_due(now[0]))  # the ticks too
    lead = [0.02 * k - (t - 100.0) for k, t in enumerate(sent_at)]
    assert max(lead) <= LEAD_S + 0.025 * 1.0 + 1e-9, max(lead)
    assert len(sent_at) <= (1.0 + LEAD_S) / 0.02 * 1.025 + 1


def test_a_backend_ahead_of_real_time_gets_silence_on_the_tick_and_its_audio_at_once():
    """A model server's audio comes in bursts ahead of its slots: an empty slot is silence on
    its tick (held open, it left a tick late, behind audio that left on time: a step the
    caller's jitter buffer grows by), and the next burst's first frame takes the next slot at
    once, the rest on their ticks."""
    now = [100.0]
    sent: list[bytes] = []
    track = opus_track([], clock=lambda: now[0])
    track.set_format(OPUS, ahead=True)
    direct = DirectSender(
        fake_sender(), PT, track, lambda: lambda d: d, sent.append, 1, 0, clock=lambda: now[0]
    )

    def heard() -> list[tuple[bytes, int]]:
        return [(p.payload, p.timestamp) for p in (RtpPacket.parse(d, extensions()) for d in sent)]

    assert direct.send_due(100.0, 0, 100.0) == 1  # nothing queued: silence now, not held
    assert heard() == [(SILENCE_FRAME, 0)]
    now[0] = 100.007
    for packet in TONE[:4]:  # a burst, 7 ms after the tick: the first goes at once, in slot 1
        track.push_opus(packet)
    assert heard()[-1] == (TONE[0], 960) and len(sent) == 2
    assert direct.send_due(100.020, 0, 100.020) == 0  # slot 1 went; slot 2 is due at 100.040
    assert direct.send_due(100.040, 0, 100.040) == 1 and heard()[-1] == (TONE[1], 1920)
    track.clear()  # a barge-in: the slot after it is silence on its tick, no step, and
    # silence itself, not a DTX frame: concealment would carry the cut speech on
    assert direct.send_due(100.060, 0, 100.060) == 1 and heard()[-1] == (SILENCE_FRAME, 2880)


def test_a_track_learns_from_its_pushes_whether_the_backend_is_ahead_or_live():
    now = [100.0]
    track = opus_track([], clock=lambda: now[0])
    track.take_due(100.0)  # the clock starts; slot 0 held open (a live backend, by default)
    assert track.take_due(100.001) == []
    for packet in TONE[:5]:  # 100 ms at once: ahead
        track.push_opus(packet)
    assert len(track.take_due(100.001)) == 1  # slot 0
    for t in (100.02, 100.04, 100.06, 100.08):
        assert len(track.take_due(t)) == 1
    assert len(track.take_due(100.1)) == 1  # empty and ahead: silence on the tick, not held
    now[0] = 100.105
    track.push_opus(TONE[0])  # one frame, just in time: live again (taken early, slot 6)
    assert len(track.take_due(100.105)) == 1
    assert track.take_due(100.14) == []  # slot 7, empty, live: held open for its audio


STALL_FROM = 30  # the frame at which the backend's input stalls


def stalled_stream_peaks(audio_format: str, rate: int, stall: int) -> list[float]:
    """A 440 Hz tone at 0.11 of full scale through the outbound track, the backend's input
    stalling for ``stall`` frames from ``STALL_FROM`` (pcm16: PCM at ``rate``; opus: packets
    of a backend's own encoder, fed PCM at ``rate``), every packet taken on its tick and
    decoded by a fresh libopus decoder, as the caller's would: each slot's peak, in full
    scale."""
    import array
    import math

    from transceiver.call import opus

    samples = rate // 50
    now = [100.0]
    track = BackendAudioTrack(clock=lambda: now[0])
    track.set_format(audio_format, rate if audio_format == PCM16 else 48000)
    backend = opus.Encoder(rate) if audio_format == OPUS else None
    w = 2 * math.pi * 440 / rate
    decoder, peaks, k = opus.Decoder(), [], 0
    for step in range(90):
        t = now[0] = 100.0 + 0.02 * step
        if not STALL_FROM <= step < STALL_FROM + stall:
            tone = (int(3604 * math.sin(w * (k * samples + i))) for i in range(samples))
            pcm = array.array("h", tone)
            if backend is None:
                track.push(pcm.tobytes())
            else:
                for packet in backend.encode(pcm.tobytes()):
                    track.push_opus(packet)
            k += 1
        # what the push sends (``on_due``), then the tick after an empty slot's longest hold
        for payload, _ in track.take_due(t, grid_at=t) + track.take_due(t + SLOT_GRACE_S):
            decoded = array.array("h", decoder.decode(payload))
            peaks.append(max(abs(x) for x in decoded) / 32767)
    return peaks


@pytest.mark.parametrize(
    ("audio_format", "rate"),
    [(PCM16, 24000), (PCM16, 48000), (OPUS, 16000), (OPUS, 24000), (OPUS, 48000)],
)
def test_silence_across_a_stalled_input_never_bursts_in_the_caller_s_decoder(
    audio_format: str, rate: int
) -> None:
    """Whatever the stall (1 frame: a slot of silence; 4: the encoder's own silence repeated,
    or in opus two frames concealed then silence; 10 and 40: a long pause), what the caller
    decodes stays within the input's peak (0.11) plus the codec's own overshoot, and a long
    stall is silence by its end. The cached packet of another encoder (hybrid, full band)
    spliced into the call's stream decoded to full scale (1.0) from 4 frames on; in opus,
    concealment all through a stall rose to 0.18 (a 24 kHz backend's stream, 10 frames in)
    and stayed at a third of the tone's level (issue 25)."""
    for stall in (1, 4, 10, 40):
        peaks = stalled_stream_peaks(audio_format, rate, stall)
        assert max(peaks) <= 0.11 * 1.25, (stall, max(peaks))
        if stall >= 4:
            assert peaks[STALL_FROM + stall - 1] < 0.003, (stall, "silence by the stall's end")


def test_a_failure_between_ticks_is_the_sender_s_not_the_backend_s():
    now = [100.0]
    track = opus_track([], clock=lambda: now[0])

    def broken(data: bytes) -> None:
        raise OSError("socket closed")

    direct = DirectSender(
        fake_sender(), PT, track, lambda: lambda d: d, broken, 1, 0, clock=lambda: now[0]
    )
    direct.send_due(100.0, 0)
    track.push_opus(TONE[0])  # the send raises inside send_now: counted, not raised to the push
    assert direct.send_errors == 1


def test_ntp_now_is_aiortc_s_ntp_time_without_the_datetimes():
    """The Sender Reports' NTP time: same epoch and fixed point as aiortc's, within its clock's
    microsecond (the wall clock is injected: 2026-12-02 07:45:00.25 UTC)."""
    wall = 1_796_197_500.25
    expected = aiortc_clock.datetime_to_ntp(datetime.datetime.fromtimestamp(wall, datetime.UTC))
    assert ntp_now(lambda: wall) >> 32 == int(wall) + 2_208_988_800
    assert ntp_now(lambda: wall) & 0xFFFFFFFF == 2**30  # a quarter second
    assert abs(ntp_now(lambda: wall) - expected) < 2**32 // 1_000_000
    assert abs(ntp_now() - aiortc_clock.current_ntp_time()) < 2**32 // 100  # 10 ms, two reads


def test_live_audio_held_up_by_a_stalled_loop_leaves_at_once_and_stays_live():
    """The event loop stalled 100 ms (no tick, no packet): the five packets that waited in the
    socket come together; all leave at once (the grid stays where the stall left it), none
    stands in the queue, and the backend is still taken as live."""
    now = [100.0]
    track = opus_track([], clock=lambda: now[0])
    sent: list[int] = []
    track.on_due = lambda: sent.extend(pts for _, pts in track.take_due(now[0]))
    for i in range(10):
        now[0] = 100.0 + 0.02 * i
        track.take_due(now[0], grid_at=now[0])
        track.push_opus(TONE[i])
    now[0] = 100.3
    for i in range(10, 15):
        track.push_opus(TONE[i])
    assert sent == [960 * i for i in range(15)] and track.queued_frames() == 0
    assert track._ahead is False
