"""A Realtime-shaped WebSocket server on 127.0.0.1 whose behaviour per call is a test's coroutine:
what the realtime backend talks to in tests that script the model server's side."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

Handler = Callable[[web.WebSocketResponse, list], Awaitable[None]]


class Server:
    """A Realtime-shaped WebSocket server whose behaviour per call is the test's coroutine."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.received: list[list[dict]] = []
        self.headers: list[dict] = []
        self.queries: list[dict] = []

    async def __aenter__(self) -> Server:
        async def call(request: web.Request) -> web.WebSocketResponse:
            self.headers.append(dict(request.headers))
            self.queries.append(dict(request.query))
            ws = web.WebSocketResponse(max_msg_size=0)
            await ws.prepare(request)
            received: list[dict] = []
            self.received.append(received)
            reader = asyncio.ensure_future(self._read(ws, received))
            try:
                await self.handler(ws, received)
                await reader
            finally:
                reader.cancel()
            return ws

        app = web.Application()
        app.router.add_get("/v1/realtime", call)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        port = self.runner.addresses[0][1]
        self.url = f"ws://127.0.0.1:{port}/v1/realtime?model=test-model"
        return self

    @staticmethod
    async def _read(ws: web.WebSocketResponse, received: list) -> None:
        async for msg in ws:
            if msg.type is aiohttp.WSMsgType.TEXT:
                received.append(json.loads(msg.data))

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()
