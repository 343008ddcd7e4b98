"""The supervisor's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

Runs in a thread of the supervisor only; workers never serve HTTP. ``/readyz`` is 200 only once
every worker has entered its loop with the current routing configuration (503 at start, while a
worker restarts, and for up to a tick after a reload), so a node whose relay is not forwarding
with the configuration it was given is out of rotation.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from relay.counters import CounterArea, RelayCollector


def make_http_server(
    address: tuple[str, int],
    counters: CounterArea,
    state: object,
    peers: tuple[int, ...] = (0,),
    tcp: bool = False,
) -> ThreadingHTTPServer:
    """Bind (errors surface at start, before any worker exists); serve with ``serve_in_thread``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RelayCollector(counters, state, peers, tcp))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz":
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

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        daemon_threads = True

    return Server(address, Handler)


def serve_in_thread(server: ThreadingHTTPServer) -> None:
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
