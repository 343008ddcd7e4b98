"""The low-latency audio jitter buffer: what it releases, when, and what it gives up on."""

from __future__ import annotations

import asyncio

import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket
from hypothesis import given
from hypothesis import strategies as st

from transceiver.call.jitter import AudioJitterBuffer
from transceiver.call.seam import StockReceiverBuffer
from transceiver.call.seam import install_jitter_buffer as install


def packet(seq: int) -> RtpPacket:
    p = RtpPacket(sequence_number=seq & 0xFFFF, timestamp=(960 * seq) & 0xFFFFFFFF)
    p._data = seq.to_bytes(4, "big", signed=True)  # type: ignore[attr-defined]
    return p


def feed(buffer, seqs) -> list[int | None]:
    """What each push released: the sequence number carried in the packet, or None."""
    out = []
    for seq in seqs:
        released = buffer.push(packet(seq))
        out.append(None if released is None else int.from_bytes(released._data, "big", signed=True))
    return out


def feed_stock(buffer: StockReceiverBuffer, seqs) -> list[int | None]:
    """``feed`` through aiortc's ``add``, as a stock receiver calls it."""
    out = []
    for seq in seqs:
        pli, frame = buffer.add(packet(seq))
        assert pli is False
        out.append(None if frame is None else int.from_bytes(frame.data, "big", signed=True))
    return out


def test_in_order_packets_are_released_at_once():
    assert feed(AudioJitterBuffer(), range(100)) == list(range(100))


def test_one_lost_packet_costs_two_packets_of_waiting_then_the_latency_drains():
    buffer = AudioJitterBuffer(hole_wait=2, drain_after=50)
    seqs = [*range(10), *range(11, 200)]
    out = feed(buffer, seqs)
    assert out[:10] == list(range(10))
    assert out[10] is None, "waits for 10 while only 11 stands behind the hole"
    assert out[11] == 11, "gives up on 10 once two packets wait behind it"
    assert buffer.counts["lost"] == 1
    # One frame (20 ms) waits behind each release for a while, then one is trimmed and every
    # packet is again released as it arrives: latency back to zero.
    assert out[12] == 12 and out[13] == 13  # one behind: the one just added waits
    tail = seqs[-20:]
    assert out[-20:] == tail
    assert buffer.counts["trimmed"] == 1
    assert not buffer._waiting


def test_stock_aiortc_keeps_the_latency_a_single_loss_adds():
    """Why the module exists (aiortc issue #543): this fails the day aiortc fixes it."""
    stock = JitterBuffer(capacity=16, prefetch=4)
    for seq in [*range(10), *range(11, 200)]:
        stock.add(packet(seq))
    assert sum(p is not None for p in stock._packets) >= 14


def test_reordered_by_one_is_still_played():
    out = feed(AudioJitterBuffer(), [0, 1, 3, 2, 4, 5])
    assert [x for x in out if x is not None] == [0, 1, 2, 3, 4]
    buffer = AudioJitterBuffer()
    feed(buffer, [0, 1, 3, 2, 4, 5])
    assert buffer.counts["lost"] == 0


def test_late_packet_is_dropped_and_counted():
    buffer = AudioJitterBuffer()
    out = feed(buffer, [0, 1, 3, 4, 2])
    assert out == [0, 1, None, 3, None]
    assert buffer.counts == {"lost": 1, "late": 1, "trimmed": 0, "resync": 0}


def test_sequence_wraps_around():
    seqs = list(range(65530, 65546))  # the frames carry the unwrapped number
    assert feed(AudioJitterBuffer(), seqs) == seqs


def test_a_burst_after_an_outage_keeps_at_most_max_backlog_waiting():
    buffer = AudioJitterBuffer(hole_wait=2, max_backlog=2)
    feed(buffer, range(10))
    feed(buffer, range(30, 40))  # 20 packets lost, then a burst
    assert len(buffer._waiting) <= 2
    assert buffer.counts["lost"] == 20


def test_sender_restart_resyncs():
    buffer = AudioJitterBuffer()
    feed(buffer, range(100, 110))
    assert feed(buffer, [5000, 5001]) == [5000, 5001]  # far ahead
    assert feed(buffer, [7, 8]) == [7, 8]  # far behind
    assert buffer.counts["resync"] == 2


def test_events_reach_the_callback():
    seen: list[tuple[str, int]] = []
    buffer = AudioJitterBuffer(on_event=lambda event, n: seen.append((event, n)))
    feed(buffer, [0, 1, 5, 6, 2])
    assert seen == [("lost", 3), ("late", 1)]


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        AudioJitterBuffer(hole_wait=0)
    with pytest.raises(ValueError):
        AudioJitterBuffer(max_backlog=64, capacity=64)


@given(st.lists(st.integers(0, 0xFFFF), max_size=300))
def test_arbitrary_sequences_stay_bounded_and_never_repeat_a_recent_frame(seqs):
    buffer = AudioJitterBuffer()
    recent: list[int] = []
    for seq in seqs:
        out = buffer.push(packet(seq))
        assert len(buffer._waiting) <= max(buffer.hole_wait, buffer.max_backlog + 1)
        if out is not None:
            released = int.from_bytes(out._data, "big", signed=True) & 0xFFFF
            assert released not in recent[-50:] or buffer.counts["resync"]
            recent.append(released)


def test_install_replaces_the_audio_receivers_buffer():
    async def go():
        caller = RTCPeerConnection()
        caller.addTransceiver("audio")
        await caller.setLocalDescription(await caller.createOffer())
        callee = RTCPeerConnection()
        await callee.setRemoteDescription(
            RTCSessionDescription(caller.localDescription.sdp, "offer")
        )
        try:
            assert install(callee) == 1
            receiver = callee.getTransceivers()[0].receiver
            buffer = receiver._RTCRtpReceiver__jitter_buffer
            assert isinstance(buffer, AudioJitterBuffer)
            # In aiortc's interface: (picture loss, a frame of the released packet's _data).
            assert feed_stock(buffer, [7, 8]) == [7, 8]
            with pytest.raises(RuntimeError, match="not supported"):
                install(callee)  # what it would find on an aiortc that moved the attribute
        finally:
            await caller.close()
            await callee.close()

    asyncio.run(go())


def adaptive_feed(buffer: AudioJitterBuffer, seqs, arrivals) -> list[int | None]:
    out = []
    for seq, at in zip(seqs, arrivals, strict=True):
        released = buffer.push(packet(seq), at)
        out.append(None if released is None else int.from_bytes(released._data, "big"))
    return out


def test_an_adaptive_buffer_on_a_clean_path_has_no_depth_a_loss_costs_no_wait():
    buffer = AudioJitterBuffer(adaptive=True)
    seqs = [*range(0, 50), *range(51, 60)]  # packet 50 lost
    arrivals = [100.0 + 0.02 * s + 0.0005 * (s % 2) for s in seqs]  # 0.5 ms of jitter
    out = adaptive_feed(buffer, seqs, arrivals)
    assert buffer.hole_wait == 1
    assert out == seqs, "every packet released as it came, the one after the hole too"
    assert buffer.counts["lost"] == 1


def test_an_adaptive_buffer_s_depth_follows_the_jitter_and_is_bounded():
    """Arrivals 0 or 14 ms late, alternately (RFC 3550 jitter ~14 ms): a hole waits one
    packet, so a packet reordered by one is played; a wild path stays within the bound."""
    from transceiver.call.jitter import MAX_DEPTH_FRAMES, depth_frames

    buffer = AudioJitterBuffer(adaptive=True)
    seqs = list(range(100))
    out = adaptive_feed(buffer, seqs, [100.0 + 0.02 * s + 0.014 * (s % 2) for s in seqs])
    assert out == seqs
    assert 0.010 < buffer.jitter.jitter_s < 0.015 and buffer.hole_wait == 2
    later = adaptive_feed(buffer, [101, 100, 102], [102.02, 102.021, 102.04])
    assert later == [None, 100, 101], "reordered by one: still played"
    assert depth_frames(10.0) == MAX_DEPTH_FRAMES and depth_frames(0.0) == 0


def test_a_fixed_buffer_ignores_arrival_times():
    buffer = AudioJitterBuffer()
    adaptive_feed(buffer, range(20), [100.0 + 0.05 * (s % 2) for s in range(20)])
    assert buffer.hole_wait == 2
