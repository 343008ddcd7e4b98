"""A UDP proxy on loopback that sends every datagram through emulated links (testbed/linkmodel.py).

``LinkProxy`` listens on one address and forwards to one target, like a NAT: each new source
gets an outside socket of its own (bound to ``outside_host``, a port the kernel picks), so the
target sees one address per source and its replies come back to the right sender. Each mapping
has two ``LinkModel``s, one per direction (client -> target "up", target -> client "down"),
seeded from the proxy's seed and the mapping's number: each source has a path of its own with
the same parameters, and a run with the same seed and arrival order draws the same fates.

I/O is thin: non-blocking sockets read by the event loop (``add_reader``), a delivery is a
``loop.call_at`` at the time the model returned, on the loop's clock (``time.monotonic``). The
loop runs timers late (epoll rounds its timeout up to a whole ms, plus the work of the loop):
the proxy schedules each delivery early by its running estimate of that lateness (an integral
controller on the measured error, at most ``MAX_LEAD_S``), so the mean delay is the model's.
Bounded: at most ``max_mappings`` sources (later ones dropped and counted), ``max_packets``
datagrams in all, and it closes itself after ``max_seconds``. ``LinkThread`` runs proxies on an
event loop of their own in a thread, for a caller that blocks (the benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from common.sockets import set_buffers
from testbed.linkmodel import LinkModel, LinkSpec

T = TypeVar("T")
Address = tuple[str, int]
READS_PER_WAKEUP = 64  # datagrams read per readiness callback, so one socket cannot starve others
MAX_DATAGRAM = 65535
MAX_LEAD_S = 0.005  # the most a delivery is scheduled early to make up for the loop's lateness
LEAD_GAIN = 1 / 64  # of each delivery's error, added to the lead


class Mapping:
    """One source's path: its outside socket and a model per direction."""

    def __init__(self, client: Address, sock: socket.socket, up: LinkModel, down: LinkModel):
        self.client = client
        self.sock = sock
        self.up = up
        self.down = down


class LinkProxy:
    """Forwards datagrams between sources and ``target`` through per-direction link models."""

    def __init__(
        self,
        target: Address,
        up: LinkSpec,
        down: LinkSpec,
        seed: int | str = 0,
        listen: Address = ("127.0.0.1", 0),
        outside_host: str = "127.0.0.1",
        name: str = "link",
        max_mappings: int = 64,
        max_packets: int = 5_000_000,
        max_seconds: float = 600.0,
    ) -> None:
        self.target = target
        self.up_spec = up
        self.down_spec = down
        self.seed = seed
        self.name = name
        self.outside_host = outside_host
        self.max_mappings = max_mappings
        self.max_packets = max_packets
        self.max_seconds = max_seconds
        self._listen_at = listen
        self.listen: socket.socket | None = None
        self.mappings: dict[Address, Mapping] = {}
        self.packets = 0  # datagrams read, both directions
        self.refused_mappings = 0  # datagrams from sources beyond max_mappings
        self.send_errors = 0
        self.lead_s = 0.0  # deliveries are scheduled this much early (see the module docstring)
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_handle: asyncio.TimerHandle | None = None

    @property
    def address(self) -> Address:
        assert self.listen is not None
        return self.listen.getsockname()[:2]

    def start(self) -> LinkProxy:
        """Bind and start reading; call from the event loop's thread."""
        self._loop = asyncio.get_running_loop()
        self.listen = _udp_socket(self._listen_at)
        self._loop.add_reader(self.listen.fileno(), self._read_clients)
        self._stop_handle = self._loop.call_later(self.max_seconds, self.close)
        return self

    # -- client -> target ---------------------------------------------------------------------
    def _read_clients(self) -> None:
        assert self.listen is not None and self._loop is not None
        for data, src in self._received(self.listen):
            mapping = self.mappings.get(src[:2]) or self._new_mapping(src[:2])
            if mapping is None:
                self.refused_mappings += 1
                continue
            at = mapping.up.schedule(self._loop.time(), len(data))
            if at is not None:
                self._loop.call_at(
                    at - self.lead_s, self._send, mapping.sock, data, self.target, at
                )

    def _new_mapping(self, client: Address) -> Mapping | None:
        if len(self.mappings) >= self.max_mappings:
            return None
        assert self._loop is not None
        n = len(self.mappings)
        sock = _udp_socket((self.outside_host, 0))
        mapping = Mapping(
            client,
            sock,
            LinkModel(self.up_spec, f"{self.seed}/{self.name}/{n}/up"),
            LinkModel(self.down_spec, f"{self.seed}/{self.name}/{n}/down"),
        )
        self.mappings[client] = mapping
        self._loop.add_reader(sock.fileno(), self._read_target, mapping)
        return mapping

    # -- target -> client ---------------------------------------------------------------------
    def _read_target(self, mapping: Mapping) -> None:
        assert self._loop is not None and self.listen is not None
        for data, _src in self._received(mapping.sock):
            at = mapping.down.schedule(self._loop.time(), len(data))
            if at is not None:
                self._loop.call_at(
                    at - self.lead_s, self._send, self.listen, data, mapping.client, at
                )

    def _received(self, sock: socket.socket) -> Iterator[tuple[bytes, Any]]:
        """What ``sock`` holds, up to READS_PER_WAKEUP datagrams, counted against max_packets
        (the proxy closes itself past it)."""
        for _ in range(READS_PER_WAKEUP):
            try:
                data, src = sock.recvfrom(MAX_DATAGRAM)
            except OSError:  # BlockingIOError: nothing left; others: closed meanwhile
                return
            self.packets += 1
            if self.packets > self.max_packets:
                self.close()
                return
            yield data, src

    def _send(self, sock: socket.socket, data: bytes, to: Address, due_s: float) -> None:
        if self.closed:
            return
        assert self._loop is not None
        late_s = self._loop.time() - due_s
        self.lead_s = min(MAX_LEAD_S, max(0.0, self.lead_s + LEAD_GAIN * late_s))
        try:
            sock.sendto(data, to)
        except OSError:
            self.send_errors += 1

    def close(self) -> None:
        """Stop reading and close every socket; datagrams still in the links are discarded."""
        if self.closed:
            return
        self.closed = True
        if self._stop_handle is not None:
            self._stop_handle.cancel()
        socks = [m.sock for m in self.mappings.values()]
        if self.listen is not None:
            socks.append(self.listen)
        for sock in socks:
            with contextlib.suppress(ValueError, OSError):
                if self._loop is not None and not self._loop.is_closed():
                    self._loop.remove_reader(sock.fileno())
            sock.close()

    def counters(self) -> dict[str, Any]:
        """Per direction, what the models did with all traffic (their own bookkeeping)."""
        out: dict[str, Any] = {
            "mappings": len(self.mappings),
            "refused_mappings": self.refused_mappings,
            "send_errors": self.send_errors,
            "lead_ms": 1000 * self.lead_s,
        }
        for direction in ("up", "down"):
            models = [getattr(m, direction) for m in self.mappings.values()]
            packets = sum(m.packets for m in models)
            lost = sum(m.lost for m in models)
            delivered = sum(m.packets - m.lost - m.queue_dropped for m in models)
            delay_s = sum(m.delay_sum_s for m in models)
            out[direction] = {
                "packets": packets,
                "lost": lost,
                "queue_dropped": sum(m.queue_dropped for m in models),
                "loss_pct": 100.0 * lost / packets if packets else float("nan"),
                "mean_delay_ms": 1000 * delay_s / delivered if delivered else float("nan"),
            }
        return out


def _udp_socket(address: Address) -> socket.socket:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    set_buffers(sock, 1 << 20)
    sock.setblocking(False)
    sock.bind(address)
    return sock


class Runs(Protocol):
    """What a LinkThread runs: started on its loop, closed when it stops."""

    def start(self) -> Any: ...

    def close(self) -> None: ...


R = TypeVar("R", bound=Runs)


class LinkThread:
    """An event loop in a daemon thread for proxies (and probes), driven from blocking code."""

    def __init__(self, name: str = "links") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._closers: list[Callable[[], None]] = []

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> LinkThread:
        self._thread.start()
        return self

    def call(self, fn: Callable[[], T], timeout_s: float = 10.0) -> T:
        """``fn()`` run on the loop's thread; its result here."""

        async def run() -> T:
            return fn()

        future: Future[T] = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return future.result(timeout_s)

    def add(self, part: R) -> R:
        """Start ``part`` (a proxy, a probe) on this loop; ``stop`` closes it."""
        self.call(part.start)
        self._closers.append(part.close)
        return part

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self.call(lambda: [close() for close in self._closers])
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()

    def __enter__(self) -> LinkThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
