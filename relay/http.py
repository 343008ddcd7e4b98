"""The supervisor's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

Runs in a thread of the supervisor only; workers never serve HTTP. ``/readyz`` is 200 only once
every worker has entered its loop with the current routing configuration (503 at start, while a
worker restarts, and for up to a tick after a reload), so a node whose relay is not forwarding
with the configuration it was given is out of rotation.

Its connections are bounded like the transceiver's listeners (``common.listener``): at most
``--metrics-max-connections`` open (each is a thread here; beyond, 503 and closed at once), and a
connection that has not sent its request's headers within ``--metrics-header-timeout`` of its
accept is shut down by the serving thread's periodic ``service_actions`` (slowloris). Counted in
``rtcedge_relay_http_connections_closed{reason}``.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from common.listener import ConnectionGuard, ListenerLimits
from relay.counters import CounterArea, RelayCollector

# What a newcomer beyond the cap reads before the close.
REFUSED_RESPONSE = (
    b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n"
)


class GuardedConnections:
    """The listener's ``ConnectionGuard`` behind a lock (handler threads and the serving thread
    both use it), and the collector of its counts."""

    def __init__(self, limits: ListenerLimits) -> None:
        self.guard: ConnectionGuard[socket.socket] = ConnectionGuard(limits)
        self.lock = threading.Lock()

    def admit(self, conn: socket.socket) -> bool:
        with self.lock:
            return self.guard.admit(conn, time.monotonic())

    def request_started(self, conn: socket.socket) -> None:
        with self.lock:
            self.guard.request_started(conn)

    def forget(self, conn: socket.socket) -> None:
        with self.lock:
            self.guard.forget(conn)

    def expired(self) -> list[socket.socket]:
        with self.lock:
            return self.guard.expired(time.monotonic())

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        with self.lock:
            closed, open_now = dict(self.guard.closed), self.guard.open
        family = CounterMetricFamily(
            "rtcedge_relay_http_connections_closed",
            "Connections to --metrics the relay closed itself, by reason: max_connections "
            "(refused at accept), header_timeout (no request headers in time).",
            labels=["reason"],
        )
        for reason, count in closed.items():
            family.add_metric([reason], count)
        yield family
        yield GaugeMetricFamily(
            "rtcedge_relay_http_connections", "Connections to --metrics open now.", open_now
        )


def make_http_server(
    address: tuple[str, int],
    counters: CounterArea,
    state: object,
    peers: tuple[int, ...] = (0,),
    tcp: bool = False,
    limits: ListenerLimits | None = None,
) -> ThreadingHTTPServer:
    """Bind (errors surface at start, before any worker exists); serve with ``serve_in_thread``."""
    connections = GuardedConnections(limits or ListenerLimits())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RelayCollector(counters, state, peers, tcp))
    registry.register(connections)  # type: ignore[arg-type]
    return StatusServer(address, registry, state, connections)


class StatusHandler(BaseHTTPRequestHandler):
    """One request to ``/metrics``, ``/healthz`` or ``/readyz`` (what ``StatusServer`` holds)."""

    server: StatusServer

    @property
    def timeout(self) -> float:  # type: ignore[override]
        """Each read or write of a connection blocks at most this long (socket timeout): a
        client that stops reading a response frees its thread too."""
        return self.server.connections.guard.limits.header_timeout_s

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:  # the headers are in: no deadline while the request is answered
            self.server.connections.request_started(self.request)
        return parsed

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._reply(200, b"ok\n")
        elif path == "/readyz":
            state = self.server.state
            alive, total = state.alive(), len(state.slots)  # type: ignore[attr-defined]
            ready = alive == total
            self._reply(200 if ready else 503, f"workers {alive}/{total}\n".encode())
        else:
            self._reply(404, b"not found\n")

    def _reply(self, status: int, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class StatusServer(ThreadingHTTPServer):
    """The listener: one thread per admitted connection, at most ``connections`` allows."""

    daemon_threads = True
    # The listen backlog: connections the kernel completes while the serving thread is busy
    # (socketserver's default of 5 drops SYNs under a burst of probes and scrapes).
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        state: object,
        connections: GuardedConnections,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.registry = registry
        self.state = state
        self.connections = connections
        super().__init__(address, StatusHandler)

    def verify_request(self, request: object, client_address: object) -> bool:
        """At accept, in the serving thread: over the cap, 503 and closed, no thread."""
        assert isinstance(request, socket.socket)
        if self.connections.admit(request):
            return True
        with contextlib.suppress(OSError):
            request.setblocking(False)  # never wait on a client that does not read
            request.send(REFUSED_RESPONSE)
        return False

    def process_request_thread(self, request: object, client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            assert isinstance(request, socket.socket)
            self.connections.forget(request)

    def handle_error(self, request: object, client_address: object) -> None:
        """A connection's own failure (reset, broken pipe: e.g. one shut down at its
        deadline) is the client's business, not a traceback on stderr per connection."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    def service_actions(self) -> None:
        """Every poll (0.5 s) and accept: shut down the connections past their header
        deadline, which wakes their threads' blocked reads with an EOF."""
        for conn in self.connections.expired():
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def serve_in_thread(server: ThreadingHTTPServer) -> None:
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
