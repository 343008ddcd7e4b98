"""How the relay's workers should take TCP connections: each from its own SO_REUSEPORT listener
(what relay.tcpfront does), or all from one dedicated acceptor that hands each connection's
descriptor to a worker (SCM_RIGHTS). Server CPU per connection, both designs, the same run: the
second section of ``rtcedge bench tcp`` (``bench/relay_tcp.py``).

Each design runs two worker processes (and, for the acceptor design, the acceptor), forked from
this one, that take a connection, read its first 22-byte message (a stand-in for the first
frame), answer 2 bytes and close it; this process connects ``connections`` times in a row (one
at a time: set-up cost, not concurrency), round after round, the designs interleaved. Per round
and design: the CPU time of every server process over the connections served.

The servers die with this process (parent-death signal) and are stopped by PID on the way out.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from common.lifetime import die_with_parent
from testbed.procfs import process_cpu_ns

HOST = "127.0.0.1"
DESIGNS = ("reuseport", "acceptor")
WORKERS = 2
FIRST = b"\x00\x14" + bytes(20)  # a 20-byte "Binding request", framed
START_TIMEOUT_S = 10.0


def _serve(conn: socket.socket) -> None:
    conn.settimeout(5.0)  # a client that never writes cannot hold a server forever
    with contextlib.suppress(OSError), conn:
        conn.recv(64)
        conn.sendall(b"ok")


def _reuseport_worker(port: int, ready: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((HOST, port))
    s.listen(1024)
    os.write(ready, b"r")
    while True:
        conn, _ = s.accept()
        _serve(conn)


def _fd_worker(channel: socket.socket, ready: int) -> None:
    os.write(ready, b"r")
    while True:
        _, fds, _, _ = socket.recv_fds(channel, 1, 1)
        for fd in fds:
            _serve(socket.socket(fileno=fd))


def _acceptor(port: int, channels: list[socket.socket], ready: int) -> None:
    s = socket.socket()
    s.bind((HOST, port))
    s.listen(1024)
    os.write(ready, b"r")
    turn = 0
    while True:
        conn, _ = s.accept()
        socket.send_fds(channels[turn % len(channels)], [b"c"], [conn.fileno()])
        conn.close()
        turn += 1


def _fork(target: Callable[..., None], *args: Any) -> int:
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent(parent, signal.SIGKILL)
            target(*args)
        finally:
            os._exit(0)
    return pid


def _start(design: str, port: int, pids: list[int]) -> None:
    """Fork ``design``'s servers on ``port`` (their PIDs appended to ``pids`` at once, so that
    they are stopped whatever happens next) and wait until every one listens."""
    r, w = os.pipe()
    try:
        if design == "reuseport":
            for _ in range(WORKERS):
                pids.append(_fork(_reuseport_worker, port, w))
            count = WORKERS
        else:
            pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(WORKERS)]
            for _, b in pairs:
                pids.append(_fork(_fd_worker, b, w))
            pids.append(_fork(_acceptor, port, [a for a, _ in pairs], w))
            for a, b in pairs:
                a.close()
                b.close()
            count = WORKERS + 1
        for _ in range(count):
            if not select.select([r], [], [], START_TIMEOUT_S)[0]:
                raise RuntimeError(f"the {design} servers did not start")
            os.read(r, 1)
    finally:
        os.close(r)
        os.close(w)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def servers() -> Iterator[dict[str, tuple[int, list[int]]]]:
    """Both designs' servers running: design -> (port, server PIDs); stopped by PID on exit."""
    running: dict[str, tuple[int, list[int]]] = {}
    try:
        for design in DESIGNS:
            port, pids = _free_port(), []
            running[design] = (port, pids)
            _start(design, port, pids)
        yield running
    finally:
        for _, pids in running.values():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)


def connect_many(port: int, count: int) -> None:
    """``count`` connections, one after another: connect, the first message, the answer, close."""
    for _ in range(count):
        with socket.create_connection((HOST, port), timeout=5) as c:
            c.sendall(FIRST)
            c.recv(8)


def server_cpu_us_per_connection(port: int, pids: list[int], count: int) -> float:
    """One round of one design: ``count`` connections and the CPU its servers spent on each."""
    before = sum(process_cpu_ns(p)[0] for p in pids)
    connect_many(port, count)
    time.sleep(0.1)  # the last connection's close is served
    return (sum(process_cpu_ns(p)[0] for p in pids) - before) / 1000 / count
