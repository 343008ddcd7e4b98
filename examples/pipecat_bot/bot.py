"""A Pipecat phone bot served the way Pipecat serves Twilio calls, which rtcedge's
``--backend media-streams`` calls as Twilio would: FastAPI's WebSocket, Pipecat's
``parse_telephony_websocket`` for the ``connected``/``start`` handshake, its
``FastAPIWebsocketTransport`` with its ``TwilioFrameSerializer``, and one frame processor
(``parrot.Parrot``) that answers the caller with the caller's own audio.

    python3 examples/pipecat_bot/bot.py --listen 127.0.0.1:8766   # prints: ready ws://.../twilio

Two settings differ from a bot behind Twilio: the serializer's ``auto_hang_up`` is off (at the
end of a call it would POST to Twilio's REST API, and there is no Twilio account: rtcedge ends
the stream itself, with ``stop``), and the serializer also passes Twilio's ``mark`` events on
(``TwilioMarkSerializer``; Pipecat's drops them). ``GET /calls`` shows what the bot saw of each
call (the tests read it). ``--key-file``: callers must send ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import socket
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.frames.frames import Frame, InputTransportMessageFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.workers.runner import WorkerRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parrot import RATE, CallRecord, Parrot  # a sibling module: the bot runs as a script


class TwilioMarkSerializer(TwilioFrameSerializer):
    """Pipecat's Twilio serializer, and Twilio's ``mark`` events as transport messages (it
    drops them), so the bot learns when the caller has heard what came before a mark."""

    async def deserialize(self, data: str | bytes) -> Frame | None:
        frame = await super().deserialize(data)
        if frame is not None:
            return frame
        try:
            message = json.loads(data)
        except ValueError:
            return None
        if isinstance(message, dict) and message.get("event") == "mark":
            return InputTransportMessageFrame(message=message)
        return None


def make_app(options: argparse.Namespace) -> FastAPI:
    app = FastAPI()
    calls: list[CallRecord] = []
    key = Path(options.key_file).read_text().strip() if options.key_file else None

    @app.get("/calls")
    async def seen() -> list[dict]:
        return [call.as_dict() for call in calls]

    @app.websocket("/twilio")
    async def twilio(websocket: WebSocket) -> None:
        given = websocket.headers.get("authorization", "")
        if key is not None and not hmac.compare_digest(given, f"Bearer {key}"):
            await websocket.close(code=1008)  # before accept: HTTP 403
            return
        await websocket.accept()
        _, call_data = await parse_telephony_websocket(websocket)
        record = CallRecord(call_data.stream_id, call_data.call_id, dict(call_data.body or {}))
        calls.append(record)
        try:
            await run_call(websocket, record, options)
        finally:
            record.ended = True

    return app


async def run_call(websocket: WebSocket, record: CallRecord, options: argparse.Namespace) -> None:
    """One call's pipeline: the transport's input, the parrot, the transport's output."""
    serializer = TwilioMarkSerializer(
        stream_sid=record.stream_id,
        call_sid=record.call_id,
        params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
    )
    transport = FastAPIWebsocketTransport(
        websocket,
        FastAPIWebsocketParams(
            audio_in_enabled=True, audio_out_enabled=True, serializer=serializer
        ),
    )
    parrot = Parrot(
        record, options.turn_end_ms, options.cue_ms, options.cue_mark_ms, options.cue_hz
    )
    worker = PipelineWorker(
        Pipeline([transport.input(), parrot, transport.output()]),
        params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
        enable_rtvi=False,
        idle_timeout_secs=None,
    )

    @transport.event_handler("on_client_disconnected")
    async def _gone(_transport, _websocket) -> None:
        await worker.cancel()

    await WorkerRunner(handle_sigint=False).run(worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:8766", help="HOST:PORT (port 0: any)")
    parser.add_argument("--key-file", help="the bearer key callers must send")
    parser.add_argument("--turn-end-ms", type=int, default=200, help="silence that ends a turn")
    parser.add_argument("--cue-ms", type=int, default=300, help="the interruption's cue")
    parser.add_argument("--cue-mark-ms", type=int, default=100, help="the cue's mark, and clear")
    parser.add_argument("--cue-hz", type=float, default=1500.0)
    options = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    host, _, port = options.listen.rpartition(":")
    sock = socket.create_server((host, int(port)))
    bound = sock.getsockname()
    print(f"ready ws://{bound[0]}:{bound[1]}/twilio", flush=True)
    config = uvicorn.Config(
        make_app(options), log_level="warning", timeout_graceful_shutdown=1, ws_ping_interval=None
    )
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
