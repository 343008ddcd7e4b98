"""Inbound audio without aiortc's decoder thread: the path (packets in, frames out) and the hook."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import av
import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.rtcrtpreceiver import RTCRtpReceiver

from testbed.callers import opus_tone_packets
from transceiver.backend import OPUS, PCM16, OpusFrame
from transceiver.call.inbound import FOREIGN, UNDECODABLE, BackendInlet, InboundAudio
from transceiver.call.jitter import AudioJitterBuffer
from transceiver.call.opus import packet_samples
from transceiver.call.seam import InlineAudioReceiver
from transceiver.call.seam import install_receiver as install

TONE = opus_tone_packets(440)


@dataclass
class Packet:
    sequence_number: int
    timestamp: int
    payload: bytes


def packets(payloads, first_seq=65530, first_ts=2**32 - 960 * 3, samples=960):
    return [
        Packet((first_seq + i) & 0xFFFF, (first_ts + i * samples) & 0xFFFFFFFF, p)
        for i, p in enumerate(payloads)
    ]


def test_pcm16_gives_one_mono_frame_per_20_ms_packet_in_order():
    frames: list[bytes] = []
    path = InboundAudio(PCM16, on_pcm=frames.append)
    # A path with jitter: the buffer's depth of one frame (its adaptive depth on a clean path
    # is zero, where a reordered packet is late: test_jitter.py).
    path.jitter = AudioJitterBuffer(hole_wait=2)
    stream = packets(TONE[:10])
    stream[3], stream[4] = stream[4], stream[3]  # reordered by one: still played
    for p in stream:
        path.push(p)
    # The packet reordered leaves one waiting behind each release (the jitter buffer drains it
    # later): nine of ten are out, none lost.
    assert len(frames) == 9 and {len(f) for f in frames} == {1920}
    assert path.jitter.counts["lost"] == 0


def test_pcm16_reframes_40_ms_packets_into_20_ms_frames():
    enc = av.CodecContext.create("libopus", "w")
    enc.format, enc.layout, enc.sample_rate, enc.bit_rate = "s16", "mono", 48000, 32000
    enc.options = {"frame_duration": "40"}
    payloads = []
    for k in range(6):
        frame = av.AudioFrame(format="s16", layout="mono", samples=1920)
        frame.planes[0].update(bytes(3840))
        frame.sample_rate, frame.pts = 48000, k * 1920
        payloads += [bytes(p) for p in enc.encode(frame)]
    assert {packet_samples(p) for p in payloads} == {1920}
    frames: list[bytes] = []
    path = InboundAudio(PCM16, on_pcm=frames.append)
    for p in packets(payloads, samples=1920):
        path.push(p)
    assert len(frames) == 2 * len(payloads) and {len(f) for f in frames} == {1920}


def test_undecodable_packets_are_dropped_and_counted():
    events: list[tuple[str, int]] = []
    frames: list[bytes] = []
    path = InboundAudio(PCM16, on_pcm=frames.append, on_event=lambda e, n: events.append((e, n)))
    for p in packets([TONE[0], bytes([31 << 3 | 3]), TONE[2]]):
        path.push(p)
    assert len(frames) == 2
    assert path.dropped[UNDECODABLE] == 1 and (UNDECODABLE, 1) in events


def test_opus_passes_packets_untouched_with_their_timing():
    got: list[OpusFrame] = []
    path = InboundAudio(OPUS, on_opus=got.append)
    path.jitter = AudioJitterBuffer(hole_wait=2)  # a path with jitter: depth one frame
    stream = packets(TONE[:5])
    for p in [stream[0], stream[2], stream[1], stream[3], stream[4]]:
        path.push(p)
    assert [f.payload for f in got] == TONE[:4]  # the fifth waits (one behind after a reorder)
    assert [f.sequence for f in got] == [p.sequence_number for p in stream[:4]]
    assert [f.timestamp for f in got] == [p.timestamp for p in stream[:4]]


def test_opus_drops_what_is_not_opus():
    got: list[OpusFrame] = []
    path = InboundAudio(OPUS, on_opus=got.append)
    for p in packets([TONE[0], b"", TONE[2]]):
        path.push(p)
    assert len(got) == 2 and path.dropped[UNDECODABLE] == 1


def test_a_format_needs_its_callback():
    with pytest.raises(ValueError):
        InboundAudio(OPUS, on_pcm=lambda pcm: None)
    with pytest.raises(ValueError):
        InboundAudio("mp3", on_pcm=lambda pcm: None)


async def offered() -> tuple[RTCPeerConnection, RTCPeerConnection]:
    """A caller's audio offer applied to a callee: the callee's receiver exists, not started."""
    caller = RTCPeerConnection()
    caller.addTransceiver("audio")
    await caller.setLocalDescription(await caller.createOffer())
    callee = RTCPeerConnection()
    await callee.setRemoteDescription(RTCSessionDescription(caller.localDescription.sdp, "offer"))
    return caller, callee


def test_install_swaps_the_audio_receiver_alone_and_refuses_twice():
    async def go():
        caller, callee = await offered()
        try:
            path = InboundAudio(PCM16, on_pcm=lambda pcm: None)
            assert install(callee, path) == 1
            receiver = callee.getTransceivers()[0].receiver
            assert type(receiver) is InlineAudioReceiver and receiver.inbound is path
            assert type(RTCPeerConnection) is type  # nothing global changed:
            assert RTCRtpReceiver._handle_rtp_packet is not InlineAudioReceiver._handle_rtp_packet
            with pytest.raises(RuntimeError, match=r"not supported|expected aiortc"):
                install(callee, path)
        finally:
            await caller.close()
            await callee.close()

    asyncio.run(go())


def test_install_refuses_an_aiortc_whose_dtls_transport_moved_its_srtp_state():
    async def go():
        caller, callee = await offered()
        try:
            receiver = callee.getTransceivers()[0].receiver
            del receiver.transport._tx_srtp
            with pytest.raises(RuntimeError, match="RTCDtlsTransport has no _tx_srtp"):
                install(callee, InboundAudio(OPUS, on_opus=lambda f: None))
            assert type(receiver) is RTCRtpReceiver
        finally:
            receiver.transport._tx_srtp = None
            await caller.close()
            await callee.close()

    asyncio.run(go())


def test_install_refuses_an_aiortc_that_moved_its_state():
    async def go():
        caller, callee = await offered()
        try:
            receiver = callee.getTransceivers()[0].receiver
            del receiver._RTCRtpReceiver__remote_streams
            with pytest.raises(RuntimeError, match="not supported"):
                install(callee, InboundAudio(OPUS, on_opus=lambda f: None))
            assert type(receiver) is RTCRtpReceiver
        finally:
            await caller.close()
            await callee.close()

    asyncio.run(go())


def test_foreign_payload_type_constant_is_counted_apart():
    path = InboundAudio(OPUS, on_opus=lambda f: None)
    path.drop(FOREIGN)
    assert path.dropped[FOREIGN] == 1
    assert path.dropped[UNDECODABLE] == 0


class Backend:
    """A backend session's audio doors, remembering what came in; ``audio_in`` may raise."""

    def __init__(self, fail: bool = False) -> None:
        self.pcm: list[bytes] = []
        self.opus: list[OpusFrame] = []
        self.fail = fail

    def audio_in(self, pcm: bytes) -> None:
        if self.fail:
            raise RuntimeError("broken backend")
        self.pcm.append(pcm)

    def opus_in(self, frame: OpusFrame) -> None:
        self.opus.append(frame)


def inlet(backend: Backend, audio_format: str, seen: dict[str, list]) -> BackendInlet:
    return BackendInlet(
        "call-1",
        backend,  # type: ignore[arg-type]
        audio_format,
        count=lambda: seen["counted"].append(1),
        heard=seen["heard"].append,
        on_first=lambda: seen["first"].append(1),
        on_failure=seen["failed"].append,
        clock=lambda: 42.0,
    )


def test_decoded_frames_go_straight_to_the_backend_counted_and_heard():
    backend, seen = Backend(), {"counted": [], "heard": [], "first": [], "failed": []}
    end = inlet(backend, PCM16, seen)
    path = InboundAudio(PCM16, on_pcm=end.frame, on_opus=end.frame)
    for p in packets(TONE[:5]):
        path.push(p)
    assert len(backend.pcm) == 5 == end.frames and {len(f) for f in backend.pcm} == {1920}
    assert len(seen["counted"]) == 5 and seen["heard"] == [42.0] * 5
    assert seen["first"] == [1], "the first frame only"
    assert not seen["failed"] and not backend.opus


def test_opus_packets_go_to_the_backend_s_opus_door():
    backend, seen = Backend(), {"counted": [], "heard": [], "first": [], "failed": []}
    end = inlet(backend, OPUS, seen)
    path = InboundAudio(OPUS, on_pcm=end.frame, on_opus=end.frame)
    for p in packets(TONE[:3]):
        path.push(p)
    assert [f.payload for f in backend.opus] == TONE[:3] and not backend.pcm


def test_a_backend_that_raises_is_reported_and_the_path_goes_on(caplog):
    backend, seen = Backend(fail=True), {"counted": [], "heard": [], "first": [], "failed": []}
    end = inlet(backend, PCM16, seen)
    end.frame(bytes(1920))
    end.frame(bytes(1920))
    assert seen["failed"] == ["audio_in raised"] * 2 and end.frames == 2
    assert "session call-1: the backend's audio_in failed" in caplog.text
