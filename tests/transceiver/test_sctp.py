"""The data channel's bounds as plain objects (transceiver.call.sctp): TSN gaps, the receive window,
the outbound backlog; and the answer's max-message-size. The attacks with real processes are
in test_sctp_abuse.py."""

from __future__ import annotations

import random

import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.rtcsctptransport import DataChunk, RTCSctpTransport, SackChunk

from common.config import ConfigError
from tests.support.inprocess import direct_config
from tests.support.waits import run
from tests.support.whip import make_offer, sdp_value
from transceiver.call import sctp, seam
from transceiver.call.sctp import (
    ACCEPT,
    BEYOND_WINDOW,
    DUPLICATE,
    INVALID_STREAM,
    MAX_MESSAGE_BYTES,
    OVER_REASSEMBLY_BYTES,
    OVER_REASSEMBLY_CHUNKS,
    OVER_WINDOW_FLOOD,
    InboundWindow,
    OutboundBacklog,
    SctpLimits,
    TsnGaps,
    clip_gap_blocks,
)

TOP = (1 << 32) - 1


def test_gaps_fill_in_any_order_and_move_the_cumulative_tsn():
    gaps = TsnGaps()
    cumulative = 100
    for tsn in (103, 105, 104):
        cumulative = gaps.add(cumulative, tsn)
    assert cumulative == 100 and len(gaps) == 3
    assert gaps.gap_blocks() == [(3, 5)]
    assert 104 in gaps and 102 not in gaps
    cumulative = gaps.add(cumulative, 102)
    assert cumulative == 100 and gaps.gap_blocks() == [(2, 5)]
    cumulative = gaps.add(cumulative, 101)
    assert cumulative == 105 and len(gaps) == 0 and gaps.gap_blocks() == []


def test_gaps_across_the_tsn_wrap():
    gaps = TsnGaps()
    cumulative = TOP - 1
    for tsn in (2, 0, TOP + 0):  # TOP is cumulative + 1
        cumulative = gaps.add(cumulative, tsn % (1 << 32))
    assert cumulative == 0 and gaps.gap_blocks() == [(2, 2)]
    assert gaps.add(cumulative, 1) == 2


def test_gap_blocks_match_a_sort_of_the_whole_set():
    """The blocks of the incremental list are aiortc's (which sorted its set on every chunk)."""
    rng = random.Random(5)
    gaps, seen = TsnGaps(), set()
    cumulative = TOP - 50
    for _ in range(2000):
        tsn = (cumulative + rng.randint(1, 60)) % (1 << 32)
        if tsn in seen or tsn in gaps:
            continue
        cumulative = gaps.add(cumulative, tsn)
        seen = {t for t in seen | {tsn} if 0 < (t - cumulative) % (1 << 32) < 1 << 31}
        offsets = sorted((t - cumulative) % (1 << 32) for t in seen)
        expected: list[list[int]] = []
        for offset in offsets:
            if expected and expected[-1][1] + 1 == offset:
                expected[-1][1] = offset
            else:
                expected.append([offset, offset])
        assert gaps.gap_blocks() == [tuple(b) for b in expected]
        assert len(gaps) == len(seen)


def test_forward_tsn_forgets_what_it_passes():
    gaps = TsnGaps()
    cumulative = 10
    for tsn in (12, 15, 16, 20):
        cumulative = gaps.add(cumulative, tsn)
    cumulative = gaps.forward(14)
    assert cumulative == 16 and gaps.gap_blocks() == [(4, 4)]


def judge(window: InboundWindow, tsn: int, size: int = 16, held_bytes: int = 0, **kw) -> str:
    return window.judge(
        tsn,
        size,
        kw.get("stream", 0),
        16,
        kw.get("cum", 1000),
        kw.get("gaps", TsnGaps()),
        held_bytes,
    )


def test_the_window_drops_what_is_beyond_it_but_never_the_next_tsn():
    limits = SctpLimits(receive_window_bytes=64 * 1024, max_misordered_tsns=256)
    window = InboundWindow(limits)
    assert judge(window, 1001) == ACCEPT
    assert judge(window, 1002) == ACCEPT  # a gap: held, within the window
    assert judge(window, 1000 + 256) == ACCEPT
    assert judge(window, 1000 + 257) == BEYOND_WINDOW  # too many TSNs past the gap
    assert judge(window, 1002, size=1000, held_bytes=64 * 1024 - 999) == BEYOND_WINDOW
    assert judge(window, 1001, size=1000, held_bytes=64 * 1024) == ACCEPT  # fills the gap
    assert judge(window, 1000) == DUPLICATE and judge(window, 990) == DUPLICATE
    assert judge(window, 1001, stream=16) == INVALID_STREAM
    gaps = TsnGaps()
    gaps.add(1000, 1005)
    assert judge(window, 1005, gaps=gaps) == DUPLICATE


def test_a_sender_ignoring_the_window_is_over_the_cap():
    limits = SctpLimits(receive_window_bytes=64 * 1024)
    window = InboundWindow(limits)
    budget = limits.receive_window_bytes + MAX_MESSAGE_BYTES
    verdicts = [judge(window, 5000, size=1000) for _ in range(budget // 1000 + 1)]
    assert verdicts[:-1] == [BEYOND_WINDOW] * (budget // 1000) and verdicts[-1] == OVER_WINDOW_FLOOD
    window.moved()  # the gap filled: a new round
    assert judge(window, 5000, size=1000) == BEYOND_WINDOW


def test_reassembly_over_the_window_or_too_many_chunks_is_over_the_cap():
    window = InboundWindow(SctpLimits(receive_window_bytes=64 * 1024, max_misordered_tsns=256))
    assert window.over(64 * 1024, 320) is None
    assert window.over(64 * 1024 + 1, 1) == OVER_REASSEMBLY_BYTES
    assert window.over(10, 321) == OVER_REASSEMBLY_CHUNKS


def test_the_backlog_drops_its_oldest_beyond_the_cap():
    backlog = OutboundBacklog(max_bytes=100)
    assert backlog.take(unacked=0) == []
    for i in range(5):
        assert backlog.push(30, i, unacked=0) == (1 if i >= 3 else 0)
    assert backlog.dropped == 2 and backlog.bytes == 90
    assert backlog.take(unacked=50) == [2]  # only what fits beside the unacknowledged bytes
    assert backlog.take(unacked=95) == []
    assert backlog.take(unacked=0) == [3, 4]
    assert backlog.push(500, "big", unacked=0) == 0 and backlog.take(unacked=0) == ["big"]


def test_the_backlog_keeps_the_newest_event_when_sctp_is_full():
    backlog = OutboundBacklog(max_bytes=100)
    backlog.push(30, "a", unacked=100)
    assert backlog.push(30, "b", unacked=100) == 1  # "a" dropped: oldest first
    assert backlog.take(unacked=100) == [] and len(backlog) == 1


def test_sack_gap_blocks_are_clipped_to_what_is_outstanding():
    assert clip_gap_blocks([(1, 65535)] * 280, outstanding=10) == [(1, 10)]
    blocks = [(5, 7), (2, 3), (3, 5), (0, 0), (9, 8), (20, 30)]  # overlapping, empty, too far
    assert clip_gap_blocks(blocks, outstanding=12) == [(2, 7)]
    assert clip_gap_blocks([(2, 3), (5, 6)], 100) == [(2, 3), (5, 6)]
    assert clip_gap_blocks([(4, 9)], 0) == []


def test_the_answer_advertises_the_message_size_we_accept():
    async def go() -> str:
        pc = RTCPeerConnection()
        await pc.setRemoteDescription(RTCSessionDescription(await make_offer(), "offer"))
        seam.install_sctp(pc.sctp, SctpLimits(), lambda why: None, lambda reason, n: None)
        assert isinstance(pc.sctp, seam.BoundedSctpTransport)
        assert pc.sctp._advertised_rwnd == SctpLimits().receive_window_bytes
        await pc.setLocalDescription(await pc.createAnswer())
        answer = pc.localDescription.sdp
        await pc.close()
        return answer

    assert sdp_value(run(go()), "max-message-size") == str(MAX_MESSAGE_BYTES) == "16384"


def test_install_refuses_a_transport_it_does_not_know():
    class Other(RTCSctpTransport):
        pass

    with pytest.raises(RuntimeError, match="expected aiortc's RTCSctpTransport"):
        seam.install_sctp(Other.__new__(Other), SctpLimits(), print, print)
    seam.check()  # this aiortc has what the seam uses


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("sctp_receive_window_bytes", 1000, "--sctp-receive-window"),
        ("sctp_max_misordered_tsns", 0, "--sctp-max-misordered-tsns"),
        ("sctp_max_unacked_bytes", 10, "--sctp-max-unacked"),
    ],
)
def test_bad_limits_fail_at_start_naming_the_option(field, value, option):
    with pytest.raises(ConfigError, match=option):
        direct_config(**{field: value}).validate()


# -- BoundedSctpTransport fed chunks directly (no socket, no association) ----------------------
class _Dtls:
    state = "new"


def transport():  # type: ignore[no-untyped-def]
    """An installed transport as if its association were up, remembering what it would send,
    end and count."""
    t = RTCSctpTransport(_Dtls())  # type: ignore[arg-type]
    ended: list[str] = []
    drops: dict[str, int] = {}
    seam.install_sctp(
        t, SctpLimits(), ended.append, lambda r, n: drops.__setitem__(r, drops.get(r, 0) + n)
    )
    t._last_received_tsn = 999
    t._inbound_streams_count = 16
    sent: list = []

    async def send_chunk(chunk) -> None:  # type: ignore[no-untyped-def]
        sent.append(chunk)

    t._send_chunk = send_chunk  # type: ignore[method-assign]
    return t, ended, drops, sent


def data(tsn: int, ssn: int, size: int = 16, flags: int = 3):  # type: ignore[no-untyped-def]
    chunk = DataChunk(flags=flags)
    chunk.tsn, chunk.stream_id, chunk.stream_seq, chunk.protocol = tsn, 1, ssn, 51
    chunk.user_data = b"x" * size
    return chunk


def test_in_order_messages_and_fragments_leave_nothing_held():
    async def go():  # type: ignore[no-untyped-def]
        t, ended, drops, _ = transport()
        await t._receive_data_chunk(data(1000, 0))
        for i, flags in enumerate((2, 0, 1)):  # first, middle, last fragment of message 1
            await t._receive_data_chunk(data(1001 + i, 1, size=1000, flags=flags))
            assert t.held_chunks == (0 if flags == 1 else i + 1)
        return t, ended, drops

    t, ended, drops = run(go())
    assert t._last_received_tsn == 1003 and t.held_chunks == 0 and t.misordered_tsns == 0
    assert t._advertised_rwnd == SctpLimits().receive_window_bytes
    assert not ended and not drops


def test_a_skipped_tsn_holds_256_and_drops_the_rest_counted():
    async def go():  # type: ignore[no-untyped-def]
        t, ended, drops, sent = transport()
        for i in range(300):  # TSN 1000 never comes
            await t._receive_data_chunk(data(1001 + i, 1 + i))
        await t._send_sack()
        return t, ended, drops, sent

    t, ended, drops, sent = run(go())
    assert t.misordered_tsns == 255 and t.held_chunks == 255  # 1001..1255: within 256 of 999
    assert drops == {BEYOND_WINDOW: 45} and not ended
    assert sent[-1].cumulative_tsn == 999 and sent[-1].gaps == [(2, 256)]


def test_messages_parked_behind_a_missing_ssn_end_the_call_once():
    async def go():  # type: ignore[no-untyped-def]
        t, ended, _, _ = transport()
        for i in range(200):  # in-order TSNs, SSN 0 never comes
            await t._receive_data_chunk(data(1000 + i, 1 + i, size=1100))
        return t, ended

    t, ended = run(go())
    assert ended == [sctp.OVER_REASSEMBLY_BYTES]
    assert t.held_chunks <= 64 * 1024 // 1100 + 1  # nothing stored once over


def test_a_message_over_max_message_size_ends_the_call():
    async def go():  # type: ignore[no-untyped-def]
        t, ended, _, _ = transport()
        for i in range(15):  # 15 x 1100 B = 16,500 B > 16,384
            flags = 2 if i == 0 else (1 if i == 14 else 0)
            await t._receive_data_chunk(data(1000 + i, 0, size=1100, flags=flags))
        return ended

    assert run(go()) == [sctp.OVER_MESSAGE]


def test_a_sack_of_made_up_gap_blocks_is_reduced_to_nothing():
    async def go():  # type: ignore[no-untyped-def]
        t, _, _, _ = transport()

        async def nothing() -> None:
            pass

        t._data_channel_flush = nothing  # type: ignore[method-assign]
        t._transmit = nothing  # type: ignore[method-assign]
        sack = SackChunk()
        sack.cumulative_tsn = t._last_sacked_tsn
        sack.gaps = [(1, 65535)] * 280
        await t._receive_sack_chunk(sack)
        return sack.gaps

    assert run(go()) == []


def test_an_aiortc_without_what_is_used_fails_at_start(monkeypatch):
    monkeypatch.delattr(RTCSctpTransport, "_send_sack")
    with pytest.raises(RuntimeError, match="_send_sack"):
        seam.check()
