"""One paced load, offered to a relay over UDP and over ICE-TCP alike: the flows of both
transports set up through the relay (STUN + hint, confirmed by the transceiver's answer), then
``paced_send``, the same loop for both, so that a window of either offers the same frames per
second, one frame per write as a browser sends them (a UDP datagram per ``send`` on a connected
socket; an RFC 4571 frame per ``send`` on a TCP connection with ``TCP_NODELAY``, as WebRTC's TCP
port sets it). Used by ``rtcedge bench tcp`` (``bench/relay_tcp.py``).

``paced_send`` is a hot path; the rest is written for reading.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass

from bench.harness.bounds import Deadline
from bench.relay_pps import confirm_flows
from relay.framing import FrameDecoder, frame
from testbed.processes import RelayProcess
from testbed.standin import hint_request

HOST = "127.0.0.1"
TICK_S = 0.0005  # the pacer's sleep when nothing is due: ~2,000 bursts a second at most


def open_udp_flows(relay: RelayProcess, count: int, tid: int) -> list[socket.socket]:
    """``count`` UDP client sockets whose flows the relay confirmed, each connected to the relay
    (a plain ``send`` per datagram)."""
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((HOST, 0))
        s.setblocking(False)
        socks.append(s)
    try:
        confirm_flows(relay, socks, tid)
    except BaseException:
        close_all(socks)
        raise
    for s in socks:
        s.connect(relay.address)
    return socks


def open_tcp_flows(
    relay: RelayProcess, count: int, tid: int, timeout_s: float = 30.0
) -> list[socket.socket]:
    """``count`` connections to the relay's TCP port, each admitted by a first frame carrying a
    signed hint and confirmed by the transceiver's Binding success framed back; non-blocking."""
    deadline = Deadline.after(timeout_s)
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.create_connection(relay.tcp_address, timeout=max(0.1, deadline.left_s()))
            socks.append(s)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(frame(hint_request(relay.keyring, relay.cluster, tid)[0]))
            decoder, got = FrameDecoder(0xFFFF), []
            while not got:
                if deadline.passed() or not select.select([s], [], [], deadline.left_s())[0]:
                    raise RuntimeError("a TCP flow got no Binding success through the relay")
                data = s.recv(4096)
                if not data:
                    raise RuntimeError("the relay closed a TCP flow during its set-up")
                got = decoder.feed(data)
            if got[0][:2] != b"\x01\x01":
                raise RuntimeError(f"a TCP flow got {got[0][:2].hex()}, not a Binding success")
            s.setblocking(False)
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


@dataclass(frozen=True)
class Offered:
    """What one paced window offered."""

    frames: int  # written whole
    refused: int  # due but not written: the socket's buffer was full (the relay fell behind)
    wall_s: float


def paced_send(
    socks: list[socket.socket], data: bytes, rate_fps: float, seconds: float, max_frames: int
) -> Offered:
    """Write ``data`` (one datagram, or one framed datagram) ``rate_fps`` times a second, round
    robin over ``socks``, for ``seconds`` and at most ``max_frames`` writes.

    Hot path. Each pass writes what fell due since the last one, so the offered rate holds when
    a pass is late. A write the kernel refuses (full buffer) is counted and not retried; a partial
    TCP write is finished at once, blocking, so the relay never sees a stalled half frame.
    """
    n = len(socks)
    sends = [s.send for s in socks]
    size = len(data)
    sent = refused = i = 0
    started = time.monotonic()
    end_at = started + seconds
    while True:
        now = time.monotonic()
        if now >= end_at:
            break
        due = min(int((now - started) * rate_fps), max_frames) - sent - refused
        if due <= 0:
            if sent + refused >= max_frames:
                break
            time.sleep(TICK_S)
            continue
        for _ in range(due):
            try:
                written = sends[i](data)
            except BlockingIOError:
                refused += 1
            else:
                sent += 1
                if written < size:
                    _finish(socks[i], data[written:])
            i = i + 1 if i + 1 < n else 0
    return Offered(sent, refused, time.monotonic() - started)


def _finish(sock: socket.socket, rest: bytes) -> None:
    sock.setblocking(True)
    sock.settimeout(5.0)
    try:
        sock.sendall(rest)
    finally:
        sock.setblocking(False)
