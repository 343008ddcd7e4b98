"""A minimal backend for the transceiver's ``websocket`` backend: it echoes the caller.

    python examples/ws_backend_server.py --port 8765
    transceiver serve ... --backend websocket --backend-url ws://127.0.0.1:8765/

One WebSocket per call (protocol: docs/backend-protocol.md). Audio (binary, PCM16 LE mono 48 kHz,
whole 20 ms frames; or with ``--audio-format opus`` Opus packets, each after a 6-byte header)
goes straight back, so the caller hears itself; every JSON event is answered
with ``{"type": "echo", "event": ...}``. A real backend replaces ``on_audio``/``on_event``.
Ctrl-C closes every open call (WebSocket close 1001, "going away") and exits.
"""

from __future__ import annotations

import argparse
import json
import logging

from aiohttp import WSCloseCode, WSMsgType, web

log = logging.getLogger("ws_backend_server")

CALLS = web.AppKey("calls", set)  # the open WebSockets, closed on shutdown
AUDIO_FORMAT = web.AppKey("audio_format", str)  # "pcm16" or "opus"
OPUS_HEADER_BYTES = 6  # before each caller packet: RTP sequence (u16) and timestamp (u32)


async def call(request: web.Request) -> web.WebSocketResponse:
    """One call, from session.start to session.end (or until the transceiver goes away)."""
    # The subprotocol picks the call's audio format; without one the transceiver sends PCM16.
    opus = request.app[AUDIO_FORMAT] == "opus"
    ws = web.WebSocketResponse(protocols=("rtcedge.opus",) if opus else ())
    await ws.prepare(request)
    session_id = request.query.get("session_id", "?")
    request.app[CALLS].add(ws)
    log.info("call %s: connected", session_id)

    async def on_audio(data: bytes) -> None:
        # Echo; a real backend would feed speech recognition here. Opus goes back without its
        # header: one packet per message.
        await ws.send_bytes(data[OPUS_HEADER_BYTES:] if ws.ws_protocol else data)

    async def on_event(event: dict) -> None:
        if event.get("type") == "session.start":
            # resumed: the call moved here from a transceiver that was scaled down; a voice
            # agent keyed by session_id would go on with the conversation it has.
            resumed = bool(event.get("resumed"))
            log.info("call %s: started, audio %s, resumed %s", session_id, event.get("audio"),
                     resumed)  # fmt: skip
            await ws.send_json(
                {"type": "session.started", "session_id": session_id, "resumed": resumed}
            )
        elif event.get("type") == "session.end":
            # reason "migrated": the call goes on at another transceiver; keep its state.
            log.info("call %s: ended (%s)", session_id, event.get("reason"))
            await ws.close()
        else:
            await ws.send_json({"type": "echo", "event": event})

    try:
        async for msg in ws:  # stops when the socket closes
            if msg.type is WSMsgType.BINARY:
                await on_audio(msg.data)
            elif msg.type is WSMsgType.TEXT:
                try:
                    event = json.loads(msg.data)
                except ValueError:
                    log.warning("call %s: ignored a text message that is not JSON", session_id)
                    continue
                if isinstance(event, dict):
                    await on_event(event)
    finally:
        request.app[CALLS].discard(ws)
        log.info("call %s: closed", session_id)
    return ws


async def close_calls(app: web.Application) -> None:
    for ws in list(app[CALLS]):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")


def make_app(audio_format: str = "pcm16") -> web.Application:
    app = web.Application()
    app[CALLS] = set()
    app[AUDIO_FORMAT] = audio_format
    app.router.add_get("/", call)
    app.on_shutdown.append(close_calls)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--audio-format", choices=("pcm16", "opus"), default="pcm16")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # run_app handles Ctrl-C (SIGINT) and SIGTERM: on_shutdown, then cleanup, then exit.
    web.run_app(make_app(args.audio_format), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
