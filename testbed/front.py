"""A round-robin HTTP front, as a load-balanced Service or an ingress puts one before the
transceivers: each request goes to the next upstream in turn, whatever it is for, ready or not
(a client retries a 503); an upstream that refuses the connection (a pod gone) is skipped. It
runs in the caller's event loop, and records where each request went (``landed``, the latest
``MAX_LANDED``). Used by the tests, by ``rtcedge bench recovery --scenario scale-down`` and by
``testbed.fleet``'s stack."""

from __future__ import annotations

import socket
from collections import deque
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from common.config import format_host_port
from testbed.ports import free_port

# Hop-by-hop or recomputed: not passed through (RFC 9110 7.6.1).
_NOT_PASSED = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


MAX_LANDED = 1000


@dataclass
class RoundRobinFront:
    upstreams: list[str]  # base URLs, e.g. http://127.0.0.1:8080
    # (method, path, upstream index) of the latest requests; bounded: a benchmark runs long.
    landed: deque[tuple[str, str, int]] = field(default_factory=lambda: deque(maxlen=MAX_LANDED))
    _turn: int = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host``:``port`` (0: a free port); returns the front's base URL."""
        self._client = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._pass)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = port or free_port(host, kind=socket.SOCK_STREAM)
        await web.TCPSite(self._runner, host, port).start()
        return f"http://{format_host_port(host, port)}"

    async def close(self) -> None:
        await self._runner.cleanup()
        await self._client.close()

    async def _pass(self, request: web.Request) -> web.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_PASSED}
        data = await request.read() if request.body_exists else None
        for attempt in range(len(self.upstreams)):
            index = self._turn % len(self.upstreams)
            self._turn += 1
            try:
                async with self._client.request(
                    request.method,
                    self.upstreams[index] + request.path_qs,
                    headers=headers,
                    data=data,
                    allow_redirects=False,
                ) as answer:
                    body = await answer.read()
            except aiohttp.ClientConnectorError:
                # Nothing listens there (a pod scaled down): the request was not sent, so the
                # next upstream gets it, as a Service drops a gone pod's endpoint.
                if attempt == len(self.upstreams) - 1:
                    raise
                continue
            self.landed.append((request.method, request.path, index))
            passed = {k: v for k, v in answer.headers.items() if k.lower() not in _NOT_PASSED}
            return web.Response(status=answer.status, body=body, headers=passed)
        raise AssertionError("unreachable: the last attempt returns or raises")
