"""A worker's TCP side (ICE over TCP, RFC 6544, with RFC 4571 framing): the I/O around
relay.tcpconns (the bounded table), relay.framing (the codec) and relay.admission (the rule).

Each worker owns one listening socket of the --listen-tcp SO_REUSEPORT group (created by the
supervisor, inherited by a replacement worker like the UDP sockets) and serves the connections it
accepts in its own loop, beside the UDP hot path: non-blocking sockets behind one epoll
instance, whose descriptor sits in the worker's poll set (epoll, unlike the UDP sockets' poll:
there may be thousands of connections, and this is not the hot path).

Client -> transceiver: the first frame of a connection must be admitted by the same rule as a UDP
first packet (a TCP instance of relay.admission, sharing the address policy, the first-packet
and per-transceiver budgets and the routing tables, with its own flow table for the per-hint
budgets); its drop reasons are the same counters under transport="tcp". Later frames go to the
connection's transceiver, encapsulated like a UDP datagram with the connection's address and
``FLAG_TCP``, from the worker's internal socket, if they pass, in this order (each drop counted
by its reason):

1. the class's floor (relay.tcpconns ``MIN_FRAME_BYTES``)         -> ``frame_too_short``
2. until the transceiver first sent on it, the rule of a pending UDP flow's packets
   (relay.admission ``rechecks``: only STUN, budgets, the same hint) -> its reasons
3. after that, the connection's byte bucket                        -> ``byte_rate``

Reads are bounded in frames, not only bytes (a stream of 4-byte frames would otherwise be 16,384
frames per 64 KiB read): a round takes at most ``max_frames_per_read`` frames of a connection,
and at most what its frame bucket holds (``--tcp-frame-rate``; a pending connection: its first
frame only). It peeks, then reads just the bytes of the frames taken; the rest waits in the
kernel. A connection whose frame bucket ran dry is not read again until the tick, so its
sender's window closes: TCP throttles the sender, not the worker.

Transceiver -> client: the worker's per-packet path hands a datagram with ``FLAG_TCP``
(``to_client``); it is framed onto the connection of that address if that connection belongs to
that transceiver (else ``no_flow``). What the kernel does not take at once waits in the
connection's bounded buffer (relay.tcpconns: a slow reader is closed, not buffered).

Connections the relay closes are reset (SO_LINGER 0): no TIME_WAIT state per refused or
evicted connection of a flood.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import time
from collections.abc import Hashable

from common import encap
from common.verdict import Drop
from relay import counters as C
from relay.addrkey import AddressKeys
from relay.admission import Admission
from relay.framing import FramingError, frame
from relay.mmsg import sockaddr_bytes
from relay.routing import Routing, Target
from relay.tcpconns import (
    ADMITTED,
    CLOSE_INDEX,
    MIN_FRAME_BYTES,
    PENDING,
    TcpConn,
    TcpConnTable,
    TcpLimits,
)

READ_BYTES = 65536  # at most one peek of this per readable connection and round
ACCEPTS_PER_ROUND = 64  # a flood of connections cannot starve the UDP path
EVENTS_PER_ROUND = 256
SEND_BUFFER_BYTES = 65536  # the kernel's share of a slow reader's backlog, fixed (no autotuning)
_LINGER_RESET = struct.pack("ii", 1, 0)
_IN = select.EPOLLIN
_OUT = select.EPOLLOUT
_IN_OUT = select.EPOLLIN | select.EPOLLOUT
_DROP = {reason: C.TCP_DROPS + i for i, reason in enumerate(C.DROP_REASONS)}


class TcpFront:
    def __init__(
        self,
        limits: TcpLimits,
        listener: socket.socket,
        internal: socket.socket,
        keys: AddressKeys,
        admission: Admission,
        routing: Routing,
        counters: memoryview,
    ) -> None:
        self.limits = limits
        self.listener = listener
        self.internal = internal
        self.keys = keys
        self.admission = admission
        self.routing = routing
        self.ctr = counters
        self.table = TcpConnTable(limits)
        self.epoll = select.epoll()
        self.epoll.register(listener.fileno(), _IN)
        self._listener_fd = listener.fileno()
        self._listener_paused = False  # after a failed accept, until the next tick
        self._by_fd: dict[int, TcpConn] = {}
        self._paused: set[TcpConn] = set()  # not read until the tick (frame bucket dry)
        self._buf = bytearray(READ_BYTES)
        self._view = memoryview(self._buf)
        self.now = 0
        self.wall = 0.0
        self.clock_s = 0.0  # the connections' buckets' clock (monotonic, read once per round)

    def fileno(self) -> int:
        return self.epoll.fileno()

    # -- the loop's turn -------------------------------------------------------------------------
    def serve(self, now: int, wall: float) -> int:
        """Handle what is ready now (never waits); returns how many events there were."""
        events = self.epoll.poll(0, EVENTS_PER_ROUND)
        if not events:
            return 0
        self.now, self.wall = now, wall
        self.clock_s = time.monotonic()  # once per round with events, not per frame
        by_fd = self._by_fd
        for fd, ev in events:
            if fd == self._listener_fd:
                self._accept()
                continue
            conn = by_fd.get(fd)
            if conn is None:
                continue
            if ev & select.EPOLLOUT:
                self._flush(conn)
            if conn.handle is None or not ev & ~select.EPOLLOUT:
                continue
            if conn in self._paused:
                # Not read until the tick; a hang-up or error is reported whatever the mask,
                # and would be reported again every round: the peer is gone, so is the conn.
                if ev & (select.EPOLLHUP | select.EPOLLERR):
                    self._close(conn, "client_closed")
                continue
            self._read(conn)
        return len(events)

    def tick(self, now: int) -> None:
        """Once a second: timeouts, connections whose transceiver left, the gauges."""
        self.now = now
        for conn, reason in self.table.due(now):
            self._closed(conn, reason)
        targets = self.routing.targets
        gone = [
            c
            for c in self.table.conns.values()
            if c.target is not None and targets.get(c.target.tid) is not c.target
        ]
        for conn in gone:
            self._close(conn, "target_gone")
        self.admission.flows.expire_pending(now)  # forgets the hints whose budget is full
        if self._listener_paused:
            self._listener_paused = False
            self.epoll.modify(self._listener_fd, _IN)
        for conn in self._paused:
            if conn.handle is not None:
                self.epoll.modify(conn.handle.fileno(), _IN_OUT if conn.out else _IN)
        self._paused.clear()
        self.ctr[C.TCP_OPEN] = len(self.table)
        self.ctr[C.TCP_PENDING] = len(self.table.pending)

    # -- connections -------------------------------------------------------------------------------
    def _accept(self) -> None:
        table = self.table
        for _ in range(ACCEPTS_PER_ROUND):
            try:
                sock, addr = self.listener.accept()
            except BlockingIOError:
                return
            except OSError:  # EMFILE, ENOBUFS...: the connection waits in the backlog
                self.ctr[C.TCP_CLOSED + CLOSE_INDEX["error"]] += 1
                # The listener stays readable: without a pause the loop would spin on it.
                self.epoll.modify(self._listener_fd, 0)
                self._listener_paused = True
                return
            self.ctr[C.TCP_ACCEPTED] += 1
            host = addr[0].partition("%")[0]  # a link-local IPv6 source names its interface
            key = self.keys.from_sockaddr(sockaddr_bytes(self.keys.family, host, addr[1]))
            if self.admission.denies(key):
                _reset(sock)
                self.ctr[C.TCP_CLOSED + CLOSE_INDEX["denied_address"]] += 1
                continue
            got, evicted = table.open(key, self.keys.prefix(key), self.now)
            for old in evicted:
                self._closed(old, "evicted")
            if isinstance(got, str):
                _reset(sock)
                self.ctr[C.TCP_CLOSED + CLOSE_INDEX[got]] += 1
                continue
            got.handle = sock
            fd = sock.fileno()
            self._by_fd[fd] = got
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
                self.epoll.register(fd, _IN)
            except OSError:  # reset before we got to it
                self._close(got, "error")

    def _read(self, conn: TcpConn) -> None:
        sock = conn.handle
        bound = conn.state != PENDING  # a pending connection: its first frame only
        if bound:
            allowed = min(self.limits.max_frames_per_read, conn.refill(self.clock_s, self.limits))
            if allowed < 1:
                self._pause(conn)
                return
        else:
            allowed = 1
        # No more than those frames can fill, at most (the first one's partial rest included).
        peek = min(READ_BYTES, allowed * (self.limits.max_frame_bytes + 2))
        try:
            n = sock.recv_into(self._buf, peek, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, "client_closed")  # a reset
            return
        if not n:
            self._close(conn, "client_closed")
            return
        try:
            frames, taken = conn.take(self._view[:n], self.now, allowed)
            # Only what was taken leaves the kernel (the frames are copies already); the rest
            # is read in a later round. (``taken`` is never 0 here: 0 would mean "all".)
            sock.recv_into(self._buf, taken)
        except OSError:
            self._close(conn, "client_closed")
            return
        except FramingError as exc:
            # The frames before the bad length go on, as they would have from an earlier read.
            for f in exc.frames:
                self._from_client(conn, f)
                if conn.handle is None:
                    return
            self._close(conn, exc.reason)
            return
        if bound:
            conn.read_frames(len(frames))
        for f in frames:
            self._from_client(conn, f)
            if conn.handle is None:
                return
        if bound and len(frames) == allowed < self.limits.max_frames_per_read:
            self._pause(conn)  # its bucket is dry: what it sends next waits in the kernel

    def _pause(self, conn: TcpConn) -> None:
        """Stop reading a connection until the tick (writing to it goes on)."""
        self._paused.add(conn)
        self.epoll.modify(conn.handle.fileno(), _OUT if conn.out else 0)
        self.ctr[C.TCP_PAUSED] += 1

    def _from_client(self, conn: TcpConn, data: bytes) -> None:
        """One frame of a client: admitted, or forwarded, or dropped (counted); the order is
        the module docstring's. A client's frame never refreshes its connection."""
        ctr = self.ctr
        state = conn.state
        if state == PENDING:
            if not self._admit(conn, data):
                return
        elif len(data) < MIN_FRAME_BYTES[data[0]]:
            ctr[_DROP["frame_too_short"]] += 1
            return
        elif state == ADMITTED:
            refused = self.admission.rechecks(data, conn.key, conn.ufrag, self.now, self.wall)
            if refused is not None:
                ctr[_DROP[refused.reason]] += 1
                return
        elif not conn.spend_bytes(len(data)):  # refilled by this round's _read
            ctr[_DROP["byte_rate"]] += 1
            return
        try:
            self.internal.sendto(conn.header + data, conn.target.address)
        except OSError:
            ctr[_DROP["send_error"]] += 1
            return
        ctr[C.TCP_PACKETS] += 1
        ctr[C.TCP_BYTES] += len(data)

    def _admit(self, conn: TcpConn, data: bytes) -> bool:
        """A pending connection's first frame: is it admitted (the connection then bound to its
        target and hint)? If not, the connection is closed and why counted."""
        verdict = self.admission.accepts(data, conn.key, self.now, self.wall)
        if isinstance(verdict, Drop):
            self.ctr[_DROP[verdict.reason]] += 1
            self._close(conn, "first_frame")
            return False
        flows = self.admission.flows
        ufrag = flows.pending[conn.key].ufrag  # what accepts() just admitted
        flows.forget_pending(conn.key)  # the connection is the flow
        if verdict.health is not None:  # a route's: relay tiers carry UDP only (docs)
            self._close(conn, "routed_hint")
            return False
        port, address = self.keys.port_and_address(conn.key)
        header = encap.encode_header_packed(
            self.keys.ip_version, address, int.from_bytes(port, "big"), flags=encap.FLAG_TCP
        )
        refused, evicted = self.table.admit(conn, verdict, header, ufrag, self.now)
        for old in evicted:
            self._closed(old, "evicted")
        if refused is not None:
            self._close(conn, refused)
            return False
        return True

    def to_client(self, key: Hashable, target: Target, payload: memoryview) -> None:
        """A transceiver's datagram with FLAG_TCP: framed onto its client's connection."""
        conn = self.table.get(key)
        if conn is None or conn.target is None or conn.target.tid != target.tid:
            self.ctr[_DROP["no_flow"]] += 1
            return
        self.table.confirm(conn)  # the target's traffic, and only it, keeps a connection
        conn.last_frame = self.now
        try:
            data = frame(payload)
        except FramingError:
            self.ctr[_DROP["empty_or_oversize"]] += 1
            return
        self.ctr[C.TCP_PACKETS + 1] += 1
        self.ctr[C.TCP_BYTES + 1] += len(payload)
        out = conn.out
        if out:
            out += data
            if len(out) > self.limits.max_write_bytes:
                self._close(conn, "slow_reader")
            return
        try:
            sent = conn.handle.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn, "error")
            return
        if sent < len(data):
            out += memoryview(data)[sent:]
            if len(out) > self.limits.max_write_bytes:
                self._close(conn, "slow_reader")
                return
            self.epoll.modify(conn.handle.fileno(), _OUT if conn in self._paused else _IN_OUT)

    def _flush(self, conn: TcpConn) -> None:
        out = conn.out
        try:
            sent = conn.handle.send(out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, "error")
            return
        del out[:sent]
        if not out:
            self.epoll.modify(conn.handle.fileno(), 0 if conn in self._paused else _IN)

    def _close(self, conn: TcpConn, reason: str) -> None:
        """Close and forget a connection (the table entry first: its key reaches nothing)."""
        self.table.close(conn)
        self._closed(conn, reason)

    def _closed(self, conn: TcpConn, reason: str) -> None:
        """The I/O half of a close, for a connection the table has forgotten already."""
        sock = conn.handle
        if sock is None:
            return
        conn.handle = None
        self._paused.discard(conn)
        fd = sock.fileno()
        self._by_fd.pop(fd, None)
        with contextlib.suppress(OSError):
            self.epoll.unregister(fd)
        if reason == "client_closed":
            sock.close()
        else:
            _reset(sock)
        conn.out.clear()
        self.ctr[C.TCP_CLOSED + CLOSE_INDEX[reason]] += 1


def _reset(sock: socket.socket) -> None:
    """Close with a RST (SO_LINGER 0): nothing of a refused connection stays in TIME_WAIT."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    sock.close()
