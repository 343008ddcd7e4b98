"""Slowloris clients for the HTTP listeners' tests and benchmark: TCP connections that send a
request line and headers a few bytes at a time and never finish them."""

from __future__ import annotations

import contextlib
import socket
import time

# A request's start, never ended by the blank line that completes its headers.
PARTIAL_REQUEST = b"POST /whip HTTP/1.1\r\nHost: rtcedge\r\nContent-Type: application/sdp\r\n"


def open_slow(address: tuple[str, int], count: int) -> list[socket.socket]:
    """``count`` connections (bounded by the caller), each having sent the partial request."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection(address, timeout=5)
        with contextlib.suppress(OSError):  # a refused one may be closed already
            sock.sendall(PARTIAL_REQUEST)
        socks.append(sock)
    return socks


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (EOF or reset), reading what it sent before; a
    trickled header line each call keeps a slowloris one going meanwhile."""
    sock.settimeout(0.05)
    try:
        sock.sendall(b"X-Slow: 1\r\n")
        while True:
            if sock.recv(4096) == b"":
                return True
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
        return True
    except TimeoutError:
        return False


def wait_all_closed(socks: list[socket.socket], timeout_s: float) -> int:
    """How many of ``socks`` the server closed within ``timeout_s`` (bounded), trickling bytes
    into the others every ~0.2 s, as a slowloris does."""
    pending = list(socks)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        pending = [s for s in pending if not closed_by_server(s)]
        time.sleep(0.2)
    return len(socks) - len(pending)


def first_reply(sock: socket.socket, timeout_s: float = 5.0) -> bytes:
    """The first bytes the server sends on ``sock`` (b'' if it closes or resets first)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(4096)
    except (ConnectionResetError, TimeoutError):
        return b""


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
