"""Slowloris against the HTTP listeners (issue 21 #7), and what it costs: ``rtcedge bench
slowloris`` (or ``python3 -m bench.slowloris``).

The attack: TCP connections that send a request line and headers a few bytes at a time and
never finish them. Against a real transceiver (its WHIP port) and a real relay (its ``--metrics``
port), on loopback, bounded in connections and seconds. Printed per victim, the same run:

- the reference: a legitimate request's latency (fresh connection, ``GET /readyz``) and the
  victim's descriptors (transceiver) or threads (relay) with no attack;
- under attack: the same figures while the slow connections are held, how long the server held
  them (against its header timeout), how many it refused at once (over its connection cap) and
  how fast;
- after: the descriptors or threads once the slow connections are gone.

The same helpers are the tests' slowloris clients (tests/transceiver/test_slowloris.py,
tests/relay/test_metrics_slowloris.py).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import statistics
import time
from dataclasses import dataclass, field

import click

from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess

# A request's start, never ended by the blank line that completes its headers.
PARTIAL_REQUEST = b"POST /whip HTTP/1.1\r\nHost: rtcedge\r\nContent-Type: application/sdp\r\n"
TRICKLE = b"X-Slow: 1\r\n"
MAX_CONNECTIONS = 2000  # the benchmark's own bound, whatever is asked


# -- the tests' clients ----------------------------------------------------------------------------
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
        sock.sendall(TRICKLE)
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


# -- the benchmark ---------------------------------------------------------------------------------
@dataclass
class Crowd:
    """Slow connections, opened at once and watched by one selector: when each was closed by the
    server, and whether it was refused (a 503 before any header deadline could pass)."""

    opened_at: dict[socket.socket, float] = field(default_factory=dict)
    closed_after_s: dict[socket.socket, float] = field(default_factory=dict)
    refused: set[socket.socket] = field(default_factory=set)

    def open(self, address: tuple[str, int], count: int) -> None:
        for _ in range(min(count, MAX_CONNECTIONS)):
            (sock,) = open_slow(address, 1)
            self.opened_at[sock] = time.monotonic()
            sock.setblocking(False)

    def watch(self, timeout_s: float, trickle_every_s: float = 0.5) -> None:
        """Until every connection is closed or ``timeout_s`` passed: trickle a header line into
        each open one every ``trickle_every_s``, note each close."""
        deadline = time.monotonic() + timeout_s
        next_trickle = 0.0
        with selectors.DefaultSelector() as sel:
            for sock in self.opened_at:
                sel.register(sock, selectors.EVENT_READ)
            while len(self.closed_after_s) < len(self.opened_at):
                now = time.monotonic()
                if now >= deadline:
                    break
                if now >= next_trickle:
                    next_trickle = now + trickle_every_s
                    for sock in self.opened_at:
                        if sock not in self.closed_after_s:
                            with contextlib.suppress(OSError):
                                sock.send(TRICKLE)
                for key, _ in sel.select(timeout=min(0.1, max(0.0, deadline - now))):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(4096)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data.startswith(b"HTTP/1.") and b" 503 " in data[:16]:
                        self.refused.add(sock)
                    if not data:
                        self.closed_after_s[sock] = time.monotonic() - self.opened_at[sock]
                        sel.unregister(sock)

    def close(self) -> None:
        close_all(list(self.opened_at))


def request_ms(address: tuple[str, int], count: int) -> tuple[list[float], list[float]]:
    """``count`` legitimate requests, each on a fresh connection: the latencies of those
    answered 200, and of those refused (503, reset)."""
    answered: list[float] = []
    refused: list[float] = []
    for _ in range(count):
        start = time.perf_counter()
        reply = b""
        try:
            with socket.create_connection(address, timeout=10) as sock:
                sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: rtcedge\r\nConnection: close\r\n\r\n")
                while chunk := sock.recv(4096):
                    reply += chunk
        except OSError:
            pass
        ms = (time.perf_counter() - start) * 1000
        (answered if reply.split(b" ", 2)[1:2] == [b"200"] else refused).append(ms)
    return answered, refused


def latency(phase: str, outcome: tuple[list[float], list[float]]) -> str:
    ms, refused = outcome
    text = f"  {phase:<10} GET /readyz: {len(ms)} answered"
    if ms:
        text += f" (p50 {p(ms, 0.5):.2f} ms, p99 {p(ms, 0.99):.2f} ms)"
    text += f", {len(refused)} refused"
    if refused:
        text += f" (503 or reset after p50 {p(refused, 0.5):.2f} ms, p99 {p(refused, 0.99):.2f} ms)"
    return text


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_attack(
    name: str,
    address: tuple[str, int],
    pid: int,
    resource: str,
    connections: int,
    header_timeout_s: float,
    requests: int,
) -> None:
    """One victim: the reference, then the attack, then after; printed."""
    count = descriptors if resource == "descriptors" else threads
    reference = request_ms(address, requests)
    ref_held = count(pid)
    crowd = Crowd()
    crowd.open(address, connections)
    time.sleep(min(0.5, header_timeout_s / 4))  # let the server accept them all
    held = count(pid)
    attacked = request_ms(address, requests)
    crowd.watch(timeout_s=10 * header_timeout_s)
    crowd.close()
    time.sleep(0.5)
    after_held = count(pid)
    after = request_ms(address, requests)
    timed_out = [s for s in crowd.closed_after_s if s not in crowd.refused]
    held_s = [crowd.closed_after_s[s] for s in timed_out]
    still_open = len(crowd.opened_at) - len(crowd.closed_after_s)
    print(f"{name}: {len(crowd.opened_at)} slowloris connections, header timeout "
          f"{header_timeout_s:g} s")  # fmt: skip
    print(f"{latency('reference', reference)}; {ref_held} {resource}")
    print(f"{latency('attacked', attacked)}; {held} {resource} while held")
    print(f"{latency('after', after)}; {after_held} {resource}")
    if held_s:
        print(f"  closed by the server after its timeout: {len(held_s)}, held median "
              f"{statistics.median(held_s):.2f} s, max {max(held_s):.2f} s")  # fmt: skip
    print(f"  slow connections refused at accept (over the cap, 503): {len(crowd.refused)}")
    print(f"  still open after {10 * header_timeout_s:g} s: {still_open}")


@click.command("slowloris")
@click.option("--connections", type=click.IntRange(1, MAX_CONNECTIONS), default=400,
              show_default=True, help="Slow connections per victim.")  # fmt: skip
@click.option("--header-timeout", type=click.FloatRange(0.5, 60), default=2.0, show_default=True,
              help="The victims' header timeout option, in seconds.")  # fmt: skip
@click.option("--trx-cap", type=click.IntRange(1), default=1024, show_default=True,
              help="The transceiver's --http-max-connections.")  # fmt: skip
@click.option("--relay-cap", type=click.IntRange(1), default=128, show_default=True,
              help="The relay's --metrics-max-connections.")  # fmt: skip
@click.option("--requests", type=click.IntRange(1, 1000), default=50, show_default=True,
              help="Legitimate requests per phase.")  # fmt: skip
def slowloris_bench(
    connections: int, header_timeout: float, trx_cap: int, relay_cap: int, requests: int
) -> None:
    """Connections that never finish their headers against the transceiver's WHIP listener and
    the relay's metrics listener: a legitimate request's latency and the victim's descriptors or
    threads, before, during and after.

    \b
    Examples:
      rtcedge bench slowloris
      rtcedge bench slowloris --connections 100 --header-timeout 1
    """
    timeout = f"{header_timeout:g}"
    relay = RelayProcess(
        {0: ("127.0.0.1", free_port())},
        workers=1,
        pin=False,
        extra_args=["--metrics-header-timeout", timeout,
                    "--metrics-max-connections", str(relay_cap)],
    )  # fmt: skip
    trx = TransceiverProcess(
        relay,
        extra_args=["--http-header-timeout", timeout,
                    "--http-max-connections", str(trx_cap),
                    "--relay-network", "127.0.0.1/32"],
    )  # fmt: skip
    with relay, trx:
        assert trx.proc is not None and relay.proc is not None
        run_attack(
            f"transceiver --http (cap {trx_cap})",
            (trx.host, trx.http_port),
            trx.proc.pid,
            "descriptors",
            connections,
            header_timeout,
            requests,
        )
        run_attack(
            f"relay --metrics (cap {relay_cap})",
            (relay.host, relay.metrics_port),
            relay.proc.pid,
            "threads",
            min(connections, 2 * relay_cap),
            header_timeout,
            requests,
        )


if __name__ == "__main__":
    slowloris_bench()
