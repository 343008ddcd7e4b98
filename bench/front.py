"""A round-robin HTTP front, as a load-balanced Service or an ingress puts one before the
transceivers: each request goes to the next upstream in turn, whatever it is for, ready or not
(a client retries a 503). It runs in the caller's event loop on a loopback port, and records
where each request went (``landed``, the latest ``MAX_LANDED``). Used by the tests and by
``rtcedge bench recovery --scenario scale-down``."""

from __future__ import annotations

import socket
from collections import deque
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from bench.peers import free_port

# Hop-by-hop or recomputed: not passed through (RFC 9110 7.6.1).
_NOT_PASSED = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


MAX_LANDED = 1000


@dataclass
class RoundRobinFront:
    upstreams: list[str]  # base URLs, e.g. http://127.0.0.1:8080
    # (method, path, upstream index) of the latest requests; bounded: a benchmark runs long.
    landed: deque[tuple[str, str, int]] = field(default_factory=lambda: deque(maxlen=MAX_LANDED))
    _turn: int = 0

    async def start(self) -> str:
        """Listen on a free loopback port; returns the front's base URL."""
        self._client = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._pass)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port(kind=socket.SOCK_STREAM)
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        await self._runner.cleanup()
        await self._client.close()

    async def _pass(self, request: web.Request) -> web.Response:
        index = self._turn % len(self.upstreams)
        self._turn += 1
        self.landed.append((request.method, request.path, index))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_PASSED}
        async with self._client.request(
            request.method,
            self.upstreams[index] + request.path_qs,
            headers=headers,
            data=await request.read() if request.body_exists else None,
            allow_redirects=False,
        ) as answer:
            body = await answer.read()
            passed = {k: v for k, v in answer.headers.items() if k.lower() not in _NOT_PASSED}
            return web.Response(status=answer.status, body=body, headers=passed)
