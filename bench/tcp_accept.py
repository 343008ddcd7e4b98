"""How the relay's workers should take TCP connections: each from its own SO_REUSEPORT listener
(what relay.tcpfront does), or all from one dedicated acceptor that hands each connection's
descriptor to a worker (SCM_RIGHTS). Server CPU per connection, both designs, the same run.

Each design runs two worker processes (and, for the acceptor design, the acceptor) that take a
connection, read its first 22-byte message (a stand-in for the first frame), answer 2 bytes and
close it; this process connects ``connections`` times in a row (one at a time: set-up cost, not
concurrency), round after round, the designs interleaved. Per round and design: the CPU time of
every server process (/proc/<pid>/schedstat of each) over the connections served.

Run: ``python -m bench.tcp_accept [--quick]``; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import statistics
import sys
import time
from typing import Any

from bench.harness.procfs import cpu_ns

FIRST = b"\x00\x14" + bytes(20)  # a 20-byte "Binding request", framed


def _serve(conn: socket.socket) -> None:
    conn.recv(64)
    conn.sendall(b"ok")
    conn.close()


def _reuseport_worker(port: int, ready: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
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
    s.bind(("127.0.0.1", port))
    s.listen(1024)
    os.write(ready, b"r")
    turn = 0
    while True:
        conn, _ = s.accept()
        socket.send_fds(channels[turn % len(channels)], [b"c"], [conn.fileno()])
        conn.close()
        turn += 1


def _fork(target: Any, *args: Any) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            target(*args)
        finally:
            os._exit(0)
    return pid


def _start(design: str, port: int) -> list[int]:
    r, w = os.pipe()
    if design == "reuseport":
        pids = [_fork(_reuseport_worker, port, w) for _ in range(2)]
    else:
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
        pids = [_fork(_fd_worker, b, w) for _, b in pairs]
        pids.append(_fork(_acceptor, port, [a for a, _ in pairs], w))
    for _ in pids:
        select.select([r], [], [], 10)
        os.read(r, 1)
    os.close(r)
    os.close(w)
    return pids


def _connect_many(port: int, n: int) -> None:
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.sendall(FIRST)
        c.recv(8)
        c.close()


def measure(connections: int, rounds: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"reuseport": [], "acceptor": []}
    running: dict[str, tuple[int, list[int]]] = {}
    try:
        for design in samples:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            running[design] = (port, _start(design, port))
        for r in range(rounds):
            for design in sorted(samples, reverse=bool(r % 2)):
                port, pids = running[design]
                before = sum(cpu_ns(p) for p in pids)
                _connect_many(port, connections)
                time.sleep(0.1)
                spent_us = (sum(cpu_ns(p) for p in pids) - before) / 1000
                samples[design].append(spent_us / connections)
    finally:
        for _, pids in running.values():
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    medians = {d: statistics.median(v) for d, v in samples.items()}
    return {
        "benchmark": "tcp_accept",
        "connections_per_round": connections,
        "rounds": rounds,
        "server_cpu_us_per_connection": {d: round(v, 1) for d, v in medians.items()},
        "acceptor_over_reuseport": round(medians["acceptor"] / medians["reuseport"], 2),
        "samples_us": {d: [round(x, 1) for x in v] for d, v in samples.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 1000 connections")
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    n, rounds = (1000, 2) if args.quick else (args.connections, args.rounds)
    json.dump(measure(n, rounds), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
