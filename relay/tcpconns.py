"""The relay's TCP connections (ICE over TCP, RFC 6544): a bounded table, sans-I/O.

A TCP connection is its own flow: the kernel's handshake proved the client's address, the first
frame (a hinted Binding request judged by relay.admission, exactly as a UDP first packet) binds it
to one transceiver, and the connection's end is the flow's end. So there is no pending/confirmed
pair of tables here, only connections keyed by the client's (IP, port) (relay.peerkey keys, as
the encapsulation header names the client) and three states:

- *pending*: accepted, no valid first frame yet;
- *admitted*: bound to a target; only STUN passes until the target first sent to it;
- *confirmed*: the target answered on it; every frame passes.

Every bound, with its attacker (per worker; the worker closes what this table gives back):

- ``max_connections``: everyone's connections together, i.e. the table's memory and file
  descriptors. Attacker: many sources opening connections. At the cap the oldest pending
  connection is evicted for the newcomer (a real client sends its first frame at once, an idle
  one never does); with no pending connection to evict, the newcomer is refused (``full``).
- ``max_per_prefix``: connections of one source /24 (IPv4) or /64 (IPv6). Attacker: one network
  opening connections (the flood the issue names: 2,000 idle connections from one source). At
  the cap the prefix's oldest pending connection is evicted; with none pending, the newcomer is
  refused (``prefix_limit``).
- ``max_pending`` and ``pending_timeout_s``: connections without a valid first frame. Attacker:
  idle connections holding slots and descriptors. The oldest is evicted beyond the count, and
  each is closed after the timeout (``pending_timeout``; checked on the once-a-second tick, so
  after between the timeout and a second more).
- ``stall_timeout_s``: a frame begun and not finished (a stalled half frame, slowloris).
  Attacker: an admitted client holding a buffer. Closed after the timeout (``stalled``).
- ``idle_timeout_s``: a connection with no frame either way. Closed (``idle``).
- ``max_frame_bytes`` (relay.framing): the decoder holds at most one frame.
- ``max_write_bytes``: bytes queued toward a client that does not read (a slow reader, or one
  that shrank its window on purpose). Attacker: a client making the relay buffer a transceiver's
  media forever. Beyond the cap the connection is closed (``slow_reader``), never buffered.

Memory per connection is therefore bounded by max_frame_bytes + max_write_bytes (plus the
kernel's socket buffers, which the I/O side fixes), and connections by max_connections.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

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
)
CLOSE_INDEX = {reason: i for i, reason in enumerate(CLOSE_REASONS)}

PENDING, ADMITTED, CONFIRMED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class TcpLimits:
    max_connections: int = 4096
    max_per_prefix: int = 64
    max_pending: int = 1024
    pending_timeout_s: int = 2
    idle_timeout_s: int = 45
    max_frame_bytes: int = 2047  # as a UDP datagram: one less than the receive slot
    max_write_bytes: int = 65536


class TcpConn:
    """One connection. ``handle`` is the I/O side's (its socket); ``header`` the encapsulation
    header its frames go to the target with; ``out`` what waits to be written to the client."""

    __slots__ = (
        "decoder",
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
        self.header = b""
        self.out = bytearray()
        self.handle: Any = None

    def feed(self, data: bytes | bytearray | memoryview, now: int) -> list[bytes]:
        """The frames ``data`` completes (relay.framing's errors pass through, with the frames
        before the bad length), remembering
        since when the frame now incomplete has been so: a stream that keeps completing frames
        is never stalled, however its reads split them."""
        frames = self.decoder.feed(data)
        if not self.decoder.buffered:
            self.partial_since = None
        elif frames or self.partial_since is None:
            self.partial_since = now
        return frames


class TcpConnTable:
    """Connections by client key, with the bounds of the module docstring."""

    def __init__(self, limits: TcpLimits) -> None:
        self.limits = limits
        self.conns: dict[Hashable, TcpConn] = {}
        self.pending: dict[Hashable, TcpConn] = {}  # oldest first
        self._of_prefix: dict[bytes, dict[Hashable, TcpConn]] = {}

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
                return "prefix_limit", evicted
            self.close(victim)
            evicted.append(victim)
        if len(self.conns) >= lim.max_connections or len(self.pending) >= lim.max_pending:
            if not self.pending:
                return "full", evicted
            victim = next(iter(self.pending.values()))
            self.close(victim)
            evicted.append(victim)
        conn = TcpConn(key, prefix, now, lim.max_frame_bytes)
        self.conns[key] = conn
        self.pending[key] = conn
        self._of_prefix.setdefault(prefix, {})[key] = conn
        return conn, evicted

    def admit(self, conn: TcpConn, target: Any, header: bytes) -> None:
        """Its first frame was admitted: bound to ``target`` for good."""
        self.pending.pop(conn.key, None)
        conn.state = ADMITTED
        conn.target = target
        conn.header = header

    def close(self, conn: TcpConn) -> None:
        """Forget the connection at once: its key reaches nothing from now on."""
        if self.conns.get(conn.key) is not conn:
            return
        del self.conns[conn.key]
        self.pending.pop(conn.key, None)
        same = self._of_prefix[conn.prefix]
        del same[conn.key]
        if not same:
            del self._of_prefix[conn.prefix]

    def count_of_prefix(self, prefix: bytes) -> int:
        return len(self._of_prefix.get(prefix, ()))

    def due(self, now: int) -> list[tuple[TcpConn, str]]:
        """The connections a tick closes, with their reasons (pending or stalled too long,
        idle); they are removed from the table already."""
        lim = self.limits
        closing: list[tuple[TcpConn, str]] = []
        for conn in self.conns.values():
            partial = conn.partial_since
            if partial is not None and now - partial >= lim.pending_timeout_s:
                closing.append((conn, "stalled"))
            elif conn.state == PENDING:
                if now - conn.opened_at >= lim.pending_timeout_s:
                    closing.append((conn, "pending_timeout"))
            elif now - conn.last_frame >= lim.idle_timeout_s:
                closing.append((conn, "idle"))
        for conn, _ in closing:
            self.close(conn)
        return closing
