"""The sans-I/O cores of ICE over TCP: RFC 4571 framing (relay.framing) and the bounded
connection table (relay.tcpconns), with bytes and numbers."""

from __future__ import annotations

import pytest

from relay.framing import MAX_RFC4571_FRAME, FrameDecoder, FramingError, frame
from relay.tcpconns import (
    CONFIRMED,
    MIN_FRAME_BYTES,
    PENDING,
    TcpConn,
    TcpConnTable,
    TcpLimits,
)


def test_frames_split_anywhere_come_out_whole_and_in_order():
    payloads = [b"\x00\x01stun", bytes([22]) * 300, b"\x80" + bytes(1199)]
    stream = b"".join(frame(p) for p in payloads)
    for cut in range(1, len(stream)):
        d = FrameDecoder(2047)
        assert d.feed(stream[:cut]) + d.feed(stream[cut:]) == payloads
        assert d.buffered == 0
    d = FrameDecoder(2047)
    got = [f for i in range(len(stream)) for f in d.feed(stream[i : i + 1])]
    assert got == payloads


def test_zero_length_and_oversize_are_framing_errors():
    with pytest.raises(FramingError) as exc:
        FrameDecoder(2047).feed(frame(b"ok") + b"\x00\x00")
    assert exc.value.reason == "zero_length"
    assert exc.value.frames == [b"ok"], "the frames before the bad length, as if read earlier"
    d = FrameDecoder(2047)
    with pytest.raises(FramingError) as exc:
        d.feed(b"\x08\x00")  # 2048: refused at the length, before any payload is buffered
    assert exc.value.reason == "oversize"
    assert FrameDecoder(2048).feed(b"\x08\x00" + bytes(2048)) == [bytes(2048)]
    with pytest.raises(FramingError):
        frame(b"")
    with pytest.raises(FramingError):
        frame(bytes(MAX_RFC4571_FRAME + 1))


def test_a_half_frame_is_held_until_completed():
    d = FrameDecoder(2047)
    assert d.feed(b"\x00\x05ab") == []
    assert d.buffered == 4
    assert d.feed(b"cde\x00") == [b"abcde"]
    assert d.buffered == 1


def limits(**kw) -> TcpLimits:
    return TcpLimits(**{"max_connections": 8, "max_per_prefix": 3, "max_pending": 6, **kw})


def admit(t: TcpConnTable, conn: TcpConn, hint: str = "h", now: int = 0) -> list[TcpConn]:
    """Admitted with ``hint``; returns the connections evicted for it (never refused here)."""
    refused, evicted = t.admit(conn, object(), b"hdr", hint, now)
    assert refused is None
    return evicted


def confirmed(t: TcpConnTable, conn: TcpConn, hint: str = "h") -> TcpConn:
    admit(t, conn, hint)
    t.confirm(conn)
    return conn


def test_a_prefix_at_its_cap_evicts_its_oldest_pending_then_unconfirmed_then_refuses():
    t = TcpConnTable(limits())
    conns = [t.open(k, b"p", 0)[0] for k in (1, 2, 3)]
    new, evicted = t.open(4, b"p", 0)
    assert evicted == [conns[0]] and t.get(1) is None and t.get(4) is new
    admit(t, conns[1], "h1")
    confirmed(t, conns[2], "h2")
    confirmed(t, new, "h3")
    newer, evicted = t.open(5, b"p", 0)
    assert evicted == [conns[1]], "the unconfirmed one goes for the newcomer"
    confirmed(t, newer, "h4")
    assert t.open(6, b"p", 0) == ("prefix_limit", [])
    assert t.open(7, b"q", 0)[0].state == PENDING  # another prefix is not affected


def test_a_full_worker_evicts_the_oldest_pending_then_unconfirmed_and_refuses_only_then():
    t = TcpConnTable(limits(max_per_prefix=100, max_connections=3))
    a, b, c = (t.open(k, b"p", 0)[0] for k in (1, 2, 3))
    confirmed(t, b, "h1")
    _, evicted = t.open(4, b"p", 0)
    assert evicted == [a]
    admit(t, c, "h2")
    d = t.get(4)
    admit(t, d, "h3")
    _, evicted = t.open(5, b"p", 0)
    assert evicted == [c], "the oldest unconfirmed connection"
    confirmed(t, t.pending[5], "h4")
    t.confirm(d)
    assert t.open(6, b"p", 0) == ("full", [])
    assert len(t) == 3 and b.state == CONFIRMED and not t.unconfirmed


def test_a_hint_holds_at_most_its_cap_the_oldest_unconfirmed_evicted_then_refused():
    t = TcpConnTable(limits(max_per_prefix=100, max_connections=100, max_per_hint=3))
    conns = [t.open(k, b"p", 0)[0] for k in range(5)]
    confirmed(t, conns[0])
    admit(t, conns[1])
    admit(t, conns[2])
    assert admit(t, conns[3]) == [conns[1]] and t.get(1) is None
    assert t.count_of_hint("h") == 3
    t.confirm(conns[2])
    t.confirm(conns[3])
    assert t.admit(conns[4], object(), b"hdr", "h", 0) == ("hint_limit", [])
    assert conns[4].state == PENDING and t.count_of_hint("h") == 3
    assert admit(t, conns[4], "other") == []
    t.close(conns[0])
    assert t.count_of_hint("h") == 2


def test_an_unconfirmed_connection_times_out_whatever_the_client_sends():
    t = TcpConnTable(limits(unconfirmed_timeout_s=4, idle_timeout_s=10))
    quiet = t.open(1, b"p", 0)[0]
    admit(t, quiet, now=1)
    chatty = t.open(2, b"p", 0)[0]
    admit(t, chatty, "h2", now=1)
    chatty.feed(frame(b"\x00" * 22) * 3, 4)  # the client's frames refresh nothing
    answered = t.open(3, b"p", 0)[0]
    confirmed(t, answered, "h3")
    assert t.due(4) == []
    assert sorted((c.key, r) for c, r in t.due(5)) == [
        (1, "unconfirmed_timeout"),
        (2, "unconfirmed_timeout"),
    ]
    assert list(t.conns) == [3] and not t.unconfirmed and t.count_of_hint("h") == 0


def test_the_tick_closes_pending_stalled_and_idle_connections():
    t = TcpConnTable(limits(pending_timeout_s=2, idle_timeout_s=10))
    t.open(1, b"p", 0)  # stays pending
    stalled = t.open(2, b"p", 0)[0]
    admit(t, stalled)
    stalled.partial_since = 1
    confirmed(t, t.open(3, b"q", 0)[0], "h2")
    busy = confirmed(t, t.open(4, b"q", 0)[0], "h3")
    assert t.due(1) == []
    assert sorted((c.key, r) for c, r in t.due(3)) == [(1, "pending_timeout"), (2, "stalled")]
    busy.last_frame = 9
    assert [(c.key, r) for c, r in t.due(10)] == [(3, "idle")]
    assert list(t.conns) == [4] and t.count_of_prefix(b"p") == 0


def test_a_stream_that_keeps_completing_frames_is_not_stalled_however_reads_split_them():
    t = TcpConnTable(limits(pending_timeout_s=2))
    conn = t.open(1, b"p", 0)[0]
    admit(t, conn)
    stream = frame(b"\x80" + bytes(99)) * 3
    assert conn.feed(stream[:50], 0) == [] and conn.partial_since == 0
    assert len(conn.feed(stream[50:150], 5)) == 1 and conn.partial_since == 5  # a new partial
    assert t.due(6) == []
    assert conn.feed(stream[150:160], 6) == [] and conn.partial_since == 5  # the same one
    assert [r for _, r in t.due(7)] == ["stalled"]
    whole = t.open(2, b"p", 0)[0]
    whole.feed(stream, 9)
    assert whole.partial_since is None


def test_a_closed_connection_is_forgotten_at_once():
    t = TcpConnTable(limits())
    c = t.open(1, b"p", 0)[0]
    t.close(c)
    assert t.get(1) is None and not t.pending and t.count_of_prefix(b"p") == 0
    t.close(c)  # twice is harmless


def test_take_stops_at_the_cap_right_after_the_last_frame_and_buffers_nothing():
    stream = b"".join(frame(bytes([0x80, i]) + bytes(10)) for i in range(5))
    d = FrameDecoder(2047)
    frames, taken = d.take(stream, 2)
    assert [f[1] for f in frames] == [0, 1] and taken == 2 * 14 and d.buffered == 0
    frames, taken = d.take(stream[taken:], 2)
    assert [f[1] for f in frames] == [2, 3] and taken == 2 * 14
    # Below the cap everything is taken, a half frame buffered as by feed.
    frames, taken = d.take(stream[56:] + b"\x00\x0c\x80", 2)
    assert [f[1] for f in frames] == [4] and taken == 14 + 3 and d.buffered == 3


def test_take_completes_a_buffered_half_frame_and_counts_only_the_new_bytes():
    d = FrameDecoder(2047)
    assert d.take(b"\x00\x04ab", 1) == ([], 4)
    frames, taken = d.take(b"cd" + frame(b"next") + frame(b"more"), 1)
    assert frames == [b"abcd"] and taken == 2 and d.buffered == 0
    assert d.feed(frame(b"next")) == [b"next"]


def test_the_floors_of_each_class():
    assert MIN_FRAME_BYTES[0x00] == 20 and MIN_FRAME_BYTES[0x03] == 20  # STUN
    assert MIN_FRAME_BYTES[0x16] == 13  # DTLS
    assert MIN_FRAME_BYTES[0x80] == 12 and MIN_FRAME_BYTES[0xBF] == 12  # RTP, RTCP


def test_a_connections_frame_bucket_bounds_the_frames_read_and_refills_with_time():
    lim = TcpLimits(frame_rate_per_s=100, byte_rate_per_s=100_000, max_frame_bytes=1000)
    conn = TcpConn(1, b"p", 0, lim.max_frame_bytes)
    assert conn.refill(10.0, lim) == 25  # a quarter second's worth
    conn.read_frames(25)
    assert conn.refill(10.0, lim) == 0
    assert conn.refill(10.05, lim) == 5  # 5 more in 50 ms
    conn.read_frames(5)
    assert conn.refill(20.0, lim) == 25, "never more than the burst"


def test_a_confirmed_connections_byte_bucket_bounds_the_bytes_forwarded():
    lim = TcpLimits(frame_rate_per_s=1000, byte_rate_per_s=10_000, max_frame_bytes=1000)
    conn = TcpConn(1, b"p", 0, lim.max_frame_bytes)
    conn.refill(0.0, lim)
    assert [conn.spend_bytes(1000) for _ in range(4)] == [True, True, False, False]  # 2,500 B
    assert conn.spend_bytes(500)
    conn.refill(0.1, lim)  # 1,000 more in 100 ms
    assert conn.spend_bytes(1000) and not conn.spend_bytes(1)
