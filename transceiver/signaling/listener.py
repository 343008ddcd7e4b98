"""The transceiver's HTTP listeners (WHIP on ``--http``, ``--metrics``) with a connection cap and
a header timeout: the asyncio I/O around ``common.listener.ConnectionGuard``.

aiohttp has no header timeout (its keep-alive timer is for idle connections, 3630 s by default,
and not a bound on a request that trickles in). So the listener is our own ``create_server``
over the app runner's protocol factory (``AppRunner.server``, public): each connection's aiohttp
handler sits behind ``_GuardedProtocol``, which asks the guard at accept, and a middleware tells
the guard when a request's handler starts (its headers are in) and ends. A sweep every
``tick_s`` aborts the connections the guard says are past their deadline. Counted in
``rtcedge_transceiver_http_connections_closed{listener, reason}``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import Counter, Gauge

from common.listener import CLOSE_REASONS, ConnectionGuard, ListenerLimits

# What a refused newcomer reads before the close: a status, not just a reset.
REFUSED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
    b"Content-Length: 0\r\n\r\n"
)


class _GuardedProtocol(asyncio.Protocol):
    """Between the event loop and aiohttp's handler of one connection: the handler sees every
    event of an admitted connection and none of a refused one."""

    def __init__(self, listener: GuardedListener, inner: asyncio.Protocol) -> None:
        self._listener = listener
        self._inner = inner
        self.transport: asyncio.Transport | None = None
        self._admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self._listener.admit(self, transport):
            transport.write(REFUSED_RESPONSE)
            transport.close()
            return
        self._admitted = True
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._listener.forget(self)
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._admitted:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._admitted else None

    def pause_writing(self) -> None:
        if self._admitted:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._admitted:
            self._inner.resume_writing()


class GuardedListener:
    """One listening socket serving ``runner``'s app, its connections bounded by ``limits``.

    ``name`` is the option it serves (``http``, ``metrics``): the metrics' ``listener`` label.
    """

    def __init__(
        self,
        runner: web.AppRunner,
        limits: ListenerLimits,
        name: str,
        closed: Counter,
        open_now: Gauge,
    ) -> None:
        self.runner = runner
        self.guard: ConnectionGuard[_GuardedProtocol] = ConnectionGuard(limits)
        self.name = name
        self._closed = {reason: closed.labels(name, reason) for reason in CLOSE_REASONS}
        self._open_now = open_now.labels(name)
        # Filled at accept with the admitted connections only: bounded by the guard's cap.
        self._by_transport: dict[asyncio.BaseTransport, _GuardedProtocol] = {}
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Often enough that a connection is closed within a quarter of its timeout (or 1 s)
        # after its deadline; a sweep costs a dict lookup when nothing is due.
        self.tick_s = min(1.0, limits.header_timeout_s / 4)

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """Put first in the app's middlewares: a request in a handler has no header deadline."""

        @web.middleware
        async def mark_requests(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            conn = self._by_transport.get(request.transport)  # type: ignore[arg-type]
            if conn is not None:
                self.guard.request_started(conn)
            try:
                return await handler(request)
            finally:
                if conn is not None and self._loop is not None:
                    self.guard.request_done(conn, self._loop.time())

        return mark_requests

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listen, over TLS with ``tls`` (OSError surfaces to the caller, which names the
        option). A TLS connection reaches the guard once its handshake is done; the handshake
        itself is bounded by the header timeout, so a client that stalls in it holds a socket
        no longer than one that stalls in its headers."""
        self._loop = asyncio.get_running_loop()
        factory = self.runner.server
        assert factory is not None, "runner.setup() first"
        handshake = {"ssl_handshake_timeout": self.guard.limits.header_timeout_s} if tls else {}
        self._server = await self._loop.create_server(
            lambda: _GuardedProtocol(self, factory()),
            host,
            port,
            reuse_address=True,
            ssl=tls,
            **handshake,
        )
        self._sweeper = self._loop.create_task(self._sweep())

    def admit(self, conn: _GuardedProtocol, transport: asyncio.BaseTransport) -> bool:
        assert self._loop is not None
        if not self.guard.admit(conn, self._loop.time()):
            self._closed["max_connections"].inc()
            return False
        self._by_transport[transport] = conn
        self._open_now.set(self.guard.open)
        return True

    def forget(self, conn: _GuardedProtocol) -> None:
        self.guard.forget(conn)
        if conn.transport is not None:
            self._by_transport.pop(conn.transport, None)
        self._open_now.set(self.guard.open)

    async def _sweep(self) -> None:
        assert self._loop is not None
        while True:
            await asyncio.sleep(self.tick_s)
            for conn in self.guard.expired(self._loop.time()):
                self._closed["header_timeout"].inc()
                if conn.transport is not None:
                    self._by_transport.pop(conn.transport, None)
                    # abort, not close: close would wait for a reader that never reads.
                    conn.transport.abort()
            self._open_now.set(self.guard.open)

    def close(self) -> None:
        """Stop accepting (the runner's cleanup then ends the open connections)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
