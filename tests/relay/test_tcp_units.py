"""The sans-I/O cores of ICE over TCP: RFC 4571 framing (relay.framing) and the bounded
connection table (relay.tcpconns), with bytes and numbers."""

from __future__ import annotations

import pytest

from relay.framing import MAX_RFC4571_FRAME, FrameDecoder, FramingError, frame
from relay.tcpconns import ADMITTED, PENDING, TcpConnTable, TcpLimits


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


def test_a_prefix_at_its_cap_evicts_its_oldest_pending_then_refuses():
    t = TcpConnTable(limits())
    conns = [t.open(k, b"p", 0)[0] for k in (1, 2, 3)]
    new, evicted = t.open(4, b"p", 0)
    assert evicted == [conns[0]] and t.get(1) is None and t.get(4) is new
    for c in (conns[1], conns[2], new):
        t.admit(c, object(), b"h")
    assert t.open(5, b"p", 0) == ("prefix_limit", [])
    assert t.open(6, b"q", 0)[0].state == PENDING  # another prefix is not affected


def test_a_full_worker_evicts_the_oldest_pending_and_refuses_only_when_none_is():
    t = TcpConnTable(limits(max_per_prefix=100, max_connections=3))
    a, b, _ = (t.open(k, b"p", 0)[0] for k in (1, 2, 3))
    t.admit(b, object(), b"h")
    _, evicted = t.open(4, b"p", 0)
    assert evicted == [a]
    for conn in list(t.pending.values()):
        t.admit(conn, object(), b"h")
    assert t.open(5, b"p", 0) == ("full", [])
    assert len(t) == 3 and b.state == ADMITTED


def test_the_tick_closes_pending_stalled_and_idle_connections():
    t = TcpConnTable(limits(pending_timeout_s=2, idle_timeout_s=10))
    t.open(1, b"p", 0)  # stays pending
    stalled = t.open(2, b"p", 0)[0]
    t.admit(stalled, object(), b"h")
    stalled.partial_since = 1
    idle = t.open(3, b"q", 0)[0]
    t.admit(idle, object(), b"h")
    busy = t.open(4, b"q", 0)[0]
    t.admit(busy, object(), b"h")
    assert t.due(1) == []
    assert sorted((c.key, r) for c, r in t.due(3)) == [(1, "pending_timeout"), (2, "stalled")]
    busy.last_frame = 9
    assert [(c.key, r) for c, r in t.due(10)] == [(3, "idle")]
    assert list(t.conns) == [4] and t.count_of_prefix(b"p") == 0


def test_a_stream_that_keeps_completing_frames_is_not_stalled_however_reads_split_them():
    t = TcpConnTable(limits(pending_timeout_s=2))
    conn = t.open(1, b"p", 0)[0]
    t.admit(conn, object(), b"h")
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
