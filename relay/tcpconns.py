"""The relay's TCP connections (ICE over TCP, RFC 6544): a bounded table, sans-I/O.

A TCP connection is its own flow: the kernel's handshake proved the client's address, the first
frame (a hinted Binding request judged by relay.admission, exactly as a UDP first packet) binds it
to one transceiver, and the connection's end is the flow's end. So there is no pending/confirmed
pair of tables here, only connections keyed by the client's (IP, port) (relay.addrkey keys, as
the encapsulation header names the client) and three states:

- *pending*: accepted, no valid first frame yet;
- *admitted*: bound to a target and a hint; until the target first sent to it, every frame is
  judged as a pending UDP flow's packet is (relay.admission ``rechecks``: only STUN, under the
  prefix's first-packet budget, the same hint, the transceiver's check budget);
- *confirmed*: the target answered on it; frames pass under the connection's own budgets.

Only traffic toward the client (the target's) refreshes a connection, as only a transceiver's
packets refresh a UDP flow: a client's own frames never keep one alive.

Every bound, with its attacker (per worker; the worker closes what this table gives back):

- ``max_connections``: everyone's connections together, i.e. the table's memory and file
  descriptors. Attacker: many sources opening connections. At the cap the oldest pending
  connection is evicted for the newcomer (a real client sends its first frame at once, an idle
  one never does), else the oldest admitted-but-unconfirmed one (a real call is confirmed within
  a round trip of its transceiver); with neither, the newcomer is refused (``full``).
- ``max_per_prefix``: connections of one source /24 (IPv4) or /64 (IPv6). Attacker: one network
  opening connections (the flood the issue names: 2,000 idle connections from one source). At
  the cap the prefix's oldest pending connection is evicted, else its oldest unconfirmed one;
  with neither, the newcomer is refused (``prefix_limit``).
- ``max_per_hint``: connections admitted with one hint (a call has one or two). Attacker: the
  holder of one harvested hint opening connections from many sources. At the cap the hint's
  oldest unconfirmed connection is evicted; with none, the newcomer is closed (``hint_limit``).
- ``unconfirmed_timeout_s`` (--pending-ttl, as a pending UDP flow's TTL): an admitted connection
  its target never answered. Attacker: a hint of a call already ended, refreshed by the client.
  Closed after the timeout whatever the client sends (``unconfirmed_timeout``).
- ``max_pending`` and ``pending_timeout_s``: connections without a valid first frame. Attacker:
  idle connections holding slots and descriptors. The oldest is evicted beyond the count, and
  each is closed after the timeout (``pending_timeout``; checked on the once-a-second tick, so
  after between the timeout and a second more).
- ``stall_timeout_s``: a frame begun and not finished (a stalled half frame, slowloris).
  Attacker: an admitted client holding a buffer. Closed after the timeout (``stalled``).
- ``idle_timeout_s``: a confirmed connection its target sent nothing to. Closed (``idle``).
- ``max_frame_bytes`` (relay.framing): the decoder holds at most one frame.
- ``max_write_bytes``: bytes queued toward a client that does not read (a slow reader, or one
  that shrank its window on purpose). Attacker: a client making the relay buffer a transceiver's
  media forever. Beyond the cap the connection is closed (``slow_reader``), never buffered.
- Per admitted or confirmed connection, ``frame_rate_per_s``: frames *read* (a token bucket of
  ``BURST_S`` worth, ``TcpConn.refill``), whatever becomes of them. Attacker: a client streaming
  tiny frames, each of which costs the worker a parse, or a datagram (~7.6 us) if forwarded.
  A connection whose bucket is empty is not read until the next tick; what it sent meanwhile
  waits in the kernel, whose window then throttles the sender (counted: reads paused).
- Per confirmed connection, ``byte_rate_per_s`` (a bucket of ``BURST_S`` worth, ``TcpConn.
  spend_bytes``): payload bytes forwarded. Frames beyond are dropped (``byte_rate``).
- A floor per class (``MIN_FRAME_BYTES``) for every frame after the first: below it a frame is
  no STUN, DTLS or RTP datagram at all, and is dropped (``frame_too_short``).
- ``max_frames_per_read``: frames taken from one connection per round (``TcpConn.take``); the
  rest stays in the kernel for a later round, so one connection cannot hold the worker's turn.

Memory per connection is therefore bounded by max_frame_bytes + max_write_bytes (plus the
kernel's socket buffers, which the I/O side fixes), and connections by max_connections.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from common.packet_class import CLASS_BY_FIRST_BYTE, PacketClass
from relay.framing import FrameDecoder

# Why a connection was closed: the label values of the closed-connections counter (bounded).
CLOSE_REASONS = (
    "client_closed",  # the client closed (or reset) it
    "error",  # a socket error on read or write
    "zero_length",  # a frame of length 0 (relay.framing)
    "oversize",  # a frame longer than --tcp-max-frame (relay.framing)
    "first_frame",  # the first frame was no admitted Binding request (the drop reason is counted)
    "routed_hint",  # the first frame's hint is for another cluster: not routed over TCP yet
    "pending_timeout",  # no valid first frame within --tcp-pending-timeout
    "stalled",  # a frame begun and not completed within --tcp-pending-timeout
    "idle",  # no frame either way within --idle-ttl
    "slow_reader",  # more than --tcp-write-buffer bytes waiting for the client to read
    "prefix_limit",  # refused at accept: the source prefix holds --tcp-max-per-prefix
    "full",  # refused at accept: the worker holds --tcp-max-connections, none of them pending
    "evicted",  # a pending connection evicted for a newcomer (per prefix, per worker)
    "denied_address",  # refused at accept: the client address is denied (--deny-network)
    "target_gone",  # its transceiver left the allowlist
    "unconfirmed_timeout",  # admitted, and its target never answered within --pending-ttl
    "hint_limit",  # admitted with a hint holding --tcp-max-per-hint confirmed connections
)
CLOSE_INDEX = {reason: i for i, reason in enumerate(CLOSE_REASONS)}

PENDING, ADMITTED, CONFIRMED = 0, 1, 2

# The smallest frame of each class a peer can send (RFC 7983 classes): a STUN header is 20
# bytes, a DTLS record header 13, an RTP or RTCP header 12; other first bytes, which no
# transceiver takes, as RTP. A frame below its floor is dropped (``frame_too_short``).
_FLOOR_OF_CLASS = {int(PacketClass.STUN): 20, int(PacketClass.DTLS): 13}
MIN_FRAME_BYTES = bytes(_FLOOR_OF_CLASS.get(c, 12) for c in CLASS_BY_FIRST_BYTE)

BURST_S = 0.25  # a confirmed connection's buckets hold this many seconds of its rates


@dataclass(frozen=True, slots=True)
class TcpLimits:
    max_connections: int = 4096
    max_per_prefix: int = 64
    max_pending: int = 1024
    pending_timeout_s: int = 2
    idle_timeout_s: int = 45
    max_frame_bytes: int = 2047  # as a UDP datagram: one less than the receive slot
    max_write_bytes: int = 65536
    unconfirmed_timeout_s: int = 10  # --pending-ttl
    max_per_hint: int = 8
    # A confirmed connection's budgets: an audio call sends ~50 frames/s, a video one a few
    # hundred; 8 Mbit/s is beyond any single WebRTC call this relay carries.
    frame_rate_per_s: int = 1000
    byte_rate_per_s: int = 1_000_000
    max_frames_per_read: int = 64

    @property
    def frame_burst(self) -> float:
        return max(1.0, self.frame_rate_per_s * BURST_S)

    @property
    def byte_burst(self) -> float:
        return max(float(self.max_frame_bytes), self.byte_rate_per_s * BURST_S)


class TcpConn:
    """One connection. ``handle`` is the I/O side's (its socket); ``header`` the encapsulation
    header its frames go to the target with; ``out`` what waits to be written to the client."""

    __slots__ = (
        "admitted_at",
        "budget_at",
        "byte_tokens",
        "decoder",
        "frame_tokens",
        "handle",
        "header",
        "key",
        "last_frame",
        "opened_at",
        "out",
        "partial_since",
        "prefix",
        "state",
        "target",
        "ufrag",
    )

    def __init__(self, key: Hashable, prefix: bytes, now: int, max_frame_bytes: int) -> None:
        self.key = key
        self.prefix = prefix
        self.opened_at = now
        self.last_frame = now
        self.partial_since: int | None = None
        self.state = PENDING
        self.decoder = FrameDecoder(max_frame_bytes)
        self.target: Any = None
        self.ufrag = ""  # the hint it was admitted with
        self.admitted_at = now
        self.header = b""
        self.out = bytearray()
        self.handle: Any = None
        self.budget_at = -1.0  # no frame spent yet: both buckets full
        self.frame_tokens = 0.0
        self.byte_tokens = 0.0

    def feed(self, data: bytes | bytearray | memoryview, now: int) -> list[bytes]:
        """The frames ``data`` completes (relay.framing's errors pass through, with the frames
        before the bad length), remembering
        since when the frame now incomplete has been so: a stream that keeps completing frames
        is never stalled, however its reads split them."""
        return self.take(data, now, len(data) + 1)[0]

    def take(
        self, data: bytes | bytearray | memoryview, now: int, max_frames: int
    ) -> tuple[list[bytes], int]:
        """``feed`` for at most ``max_frames`` frames, and the bytes of ``data`` taken
        (relay.framing ``FrameDecoder.take``: the rest is to be fed again)."""
        frames, taken = self.decoder.take(data, max_frames)
        if not self.decoder.buffered:
            self.partial_since = None
        elif frames or self.partial_since is None:
            self.partial_since = now
        return frames, taken

    def refill(self, now_s: float, limits: TcpLimits) -> int:
        """Refill both token buckets up to ``now_s`` (any monotonic clock in seconds, finer than
        the tick: they hold a quarter second); returns the whole frames the frame bucket holds,
        i.e. how many frames may be read now (the reader takes them with ``read_frames``)."""
        if self.budget_at < 0:
            self.frame_tokens, self.byte_tokens = limits.frame_burst, limits.byte_burst
        else:
            elapsed = max(0.0, now_s - self.budget_at)
            self.frame_tokens = min(
                limits.frame_burst, self.frame_tokens + elapsed * limits.frame_rate_per_s
            )
            self.byte_tokens = min(
                limits.byte_burst, self.byte_tokens + elapsed * limits.byte_rate_per_s
            )
        self.budget_at = now_s
        return int(self.frame_tokens)

    def read_frames(self, count: int) -> None:
        self.frame_tokens -= count

    def spend_bytes(self, nbytes: int) -> bool:
        """Take a frame's payload from the byte bucket (as refilled by the last ``refill``);
        False, taking nothing, when it holds less."""
        if self.byte_tokens < nbytes:
            return False
        self.byte_tokens -= nbytes
        return True


class TcpConnTable:
    """Connections by client key, with the bounds of the module docstring."""

    def __init__(self, limits: TcpLimits) -> None:
        self.limits = limits
        self.conns: dict[Hashable, TcpConn] = {}
        self.pending: dict[Hashable, TcpConn] = {}  # oldest first
        self.unconfirmed: dict[Hashable, TcpConn] = {}  # admitted, not confirmed; oldest first
        self._of_prefix: dict[bytes, dict[Hashable, TcpConn]] = {}
        self._of_hint: dict[str, dict[Hashable, TcpConn]] = {}  # admitted ones, oldest first

    def __len__(self) -> int:
        return len(self.conns)

    def get(self, key: Hashable) -> TcpConn | None:
        return self.conns.get(key)

    def open(self, key: Hashable, prefix: bytes, now: int) -> tuple[TcpConn | str, list[TcpConn]]:
        """A connection just accepted: (the new entry, or the reason it is refused), and the
        pending connections evicted to make room (the caller closes them as ``evicted``)."""
        lim = self.limits
        evicted: list[TcpConn] = []
        old = self.conns.get(key)
        if old is not None:  # the client's previous connection from that port is gone
            self.close(old)
            evicted.append(old)
        same = self._of_prefix.get(prefix)
        if same is not None and len(same) >= lim.max_per_prefix:
            victim = next((c for c in same.values() if c.state == PENDING), None)
            if victim is None:
                victim = next((c for c in same.values() if c.state == ADMITTED), None)
            if victim is None:
                return "prefix_limit", evicted
            self.close(victim)
            evicted.append(victim)
        if len(self.pending) >= lim.max_pending or len(self.conns) >= lim.max_connections:
            if self.pending:
                victim = next(iter(self.pending.values()))
            elif self.unconfirmed:
                victim = next(iter(self.unconfirmed.values()))
            else:
                return "full", evicted
            self.close(victim)
            evicted.append(victim)
        conn = TcpConn(key, prefix, now, lim.max_frame_bytes)
        self.conns[key] = conn
        self.pending[key] = conn
        self._of_prefix.setdefault(prefix, {})[key] = conn
        return conn, evicted

    def admit(
        self, conn: TcpConn, target: Any, header: bytes, ufrag: str, now: int
    ) -> tuple[str | None, list[TcpConn]]:
        """Its first frame was admitted with hint ``ufrag``: bound to ``target`` for good.
        Returns (``hint_limit`` when the hint holds ``max_per_hint`` confirmed connections
        already: the caller closes this one, else None) and the unconfirmed connection of the
        hint evicted to make room (the caller closes it as ``evicted``)."""
        evicted: list[TcpConn] = []
        same = self._of_hint.get(ufrag)
        if same is not None and len(same) >= self.limits.max_per_hint:
            victim = next((c for c in same.values() if c.state == ADMITTED), None)
            if victim is None:
                return "hint_limit", evicted
            self.close(victim)
            evicted.append(victim)
        self.pending.pop(conn.key, None)
        conn.state = ADMITTED
        conn.target = target
        conn.header = header
        conn.ufrag = ufrag
        conn.admitted_at = now
        self.unconfirmed[conn.key] = conn
        self._of_hint.setdefault(ufrag, {})[conn.key] = conn
        return None, evicted

    def confirm(self, conn: TcpConn) -> None:
        """Its target sent to it: every frame passes now, under the connection's budgets."""
        if conn.state == ADMITTED:
            conn.state = CONFIRMED
            self.unconfirmed.pop(conn.key, None)

    def close(self, conn: TcpConn) -> None:
        """Forget the connection at once: its key reaches nothing from now on."""
        if self.conns.get(conn.key) is not conn:
            return
        del self.conns[conn.key]
        self.pending.pop(conn.key, None)
        self.unconfirmed.pop(conn.key, None)
        same = self._of_prefix[conn.prefix]
        del same[conn.key]
        if not same:
            del self._of_prefix[conn.prefix]
        if conn.state != PENDING:
            of_hint = self._of_hint[conn.ufrag]
            del of_hint[conn.key]
            if not of_hint:
                del self._of_hint[conn.ufrag]

    def count_of_prefix(self, prefix: bytes) -> int:
        return len(self._of_prefix.get(prefix, ()))

    def count_of_hint(self, ufrag: str) -> int:
        return len(self._of_hint.get(ufrag, ()))

    def due(self, now: int) -> list[tuple[TcpConn, str]]:
        """The connections a tick closes, with their reasons (pending or stalled too long,
        admitted and never answered, idle); they are removed from the table already."""
        lim = self.limits
        closing: list[tuple[TcpConn, str]] = []
        for conn in self.conns.values():
            partial = conn.partial_since
            if partial is not None and now - partial >= lim.pending_timeout_s:
                closing.append((conn, "stalled"))
            elif conn.state == PENDING:
                if now - conn.opened_at >= lim.pending_timeout_s:
                    closing.append((conn, "pending_timeout"))
            elif conn.state == ADMITTED:
                if now - conn.admitted_at >= lim.unconfirmed_timeout_s:
                    closing.append((conn, "unconfirmed_timeout"))
            elif now - conn.last_frame >= lim.idle_timeout_s:
                closing.append((conn, "idle"))
        for conn, _ in closing:
            self.close(conn)
        return closing
