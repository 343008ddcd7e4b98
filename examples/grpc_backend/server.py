"""A minimal backend for the transceiver's ``grpc`` backend: it echoes the caller.

    python3 examples/grpc_backend/server.py --listen 127.0.0.1:50051   # prints: ready grpc://...
    transceiver serve ... --backend grpc --backend-url grpc://127.0.0.1:50051

One ``Call`` stream per call (protocol: docs/backend-protocol.md, "The gRPC protocol"; the
messages: transceiver/backends/grpc/v1/backend.proto, whose generated Python this imports; a
backend in another language generates its own from that file). It accepts each call in
``--audio-format`` (pcm16 at ``--audio-rate``, or opus), sends the caller's audio straight back,
answers the start with ``{"type": "session.started", ...}`` and every other event with
``{"type": "echo", "event": ...}``. ``--key-file``: calls without that bearer are refused
(UNAUTHENTICATED); ``--tls-cert``/``--tls-key``: TLS (grpcs://). SIGTERM or Ctrl-C ends every
open call (the transceiver ends them as backend_error, as for any backend that goes away).
A real backend replaces ``EchoBackend.answer``: feed speech recognition, send speech back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import grpc
import grpc.aio

from transceiver.backends.grpc.v1 import backend_pb2 as pb
from transceiver.backends.grpc.v1 import backend_pb2_grpc as pb_grpc

log = logging.getLogger("grpc_backend")

ENCODINGS = {"pcm16": pb.ENCODING_PCM16, "opus": pb.ENCODING_OPUS}
# The transceiver pings every 20 s while a call is up (docs/backend-protocol.md, "Keepalives");
# a server that takes fewer pings (grpc-core's default: one per 5 min when it sends nothing)
# would end a listening call with GOAWAY "too many pings".
SERVER_OPTIONS = [
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
]


def event(obj: dict) -> pb.FromBackend:
    return pb.FromBackend(event=pb.Event(json=json.dumps(obj, separators=(",", ":"))))


class EchoBackend(pb_grpc.BackendServicer):
    """Every call: accept, say started, then echo audio and events until the SessionEnd."""

    def __init__(self, audio_format: str = "pcm16", sample_rate: int = 48000, key: str = ""):
        self.audio = pb.AudioFormat(encoding=ENCODINGS[audio_format], sample_rate=sample_rate)
        self.key = key

    def accept(self, start: pb.SessionStart) -> pb.AudioFormat:
        """The call's audio format: one of ``start.offered`` (this server: always its own)."""
        return self.audio

    def answer(self, start: pb.SessionStart, message: pb.ToBackend) -> Iterable[pb.FromBackend]:
        """What to send back for one message of the caller's (the echo)."""
        kind = message.WhichOneof("kind")
        if kind == "pcm16":
            yield pb.FromBackend(pcm16=message.pcm16)  # a real backend: speech recognition
        elif kind == "opus":  # the packet back as it is; its sequence and timestamp are ignored
            yield pb.FromBackend(opus=pb.OpusPacket(payload=message.opus.payload))
        elif kind == "event":
            yield event({"type": "echo", "event": json.loads(message.event.json)})

    async def Call(  # the RPC's name in the .proto
        self, requests: AsyncIterator[pb.ToBackend], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FromBackend]:
        if self.key and dict(context.invocation_metadata()).get("authorization") != (
            f"Bearer {self.key}"
        ):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer is required")
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("kind") != "start":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message is a start")
        start = first.start
        # resumed: the call moved here from a transceiver that was scaled down; a voice agent
        # keyed by session_id would go on with the conversation it has.
        log.info("call %s: started, resumed %s", start.session_id, start.resumed)
        yield pb.FromBackend(accept=pb.SessionAccept(audio=self.accept(start)))
        yield event(
            {"type": "session.started", "session_id": start.session_id, "resumed": start.resumed}
        )
        async for message in requests:
            if message.WhichOneof("kind") == "end":
                self.ended(start, message.end.reason)
                return
            for reply in self.answer(start, message):
                yield reply

    def ended(self, start: pb.SessionStart, reason: str) -> None:
        """The call's SessionEnd. Reason "migrated": the call goes on at another transceiver
        (a start with the same session_id and resumed): a backend keeps its state for it."""
        log.info("call %s: ended (%s)", start.session_id, reason)


def make_server(
    servicer: pb_grpc.BackendServicer, listen: str, tls: tuple[bytes, bytes] | None = None
) -> tuple[grpc.aio.Server, int]:
    """A server of ``servicer`` on ``listen`` (HOST:PORT; port 0: any), not started; its port."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    pb_grpc.add_BackendServicer_to_server(servicer, server)
    if tls is None:
        port = server.add_insecure_port(listen)
    else:
        port = server.add_secure_port(listen, grpc.ssl_server_credentials([tls]))
    return server, port


async def serve(options: argparse.Namespace) -> None:
    key = Path(options.key_file).read_text().strip() if options.key_file else ""
    servicer = EchoBackend(options.audio_format, options.audio_rate, key)
    tls = None
    if options.tls_cert:
        tls = (Path(options.tls_key).read_bytes(), Path(options.tls_cert).read_bytes())
    server, port = make_server(servicer, options.listen, tls)
    await server.start()
    host = options.listen.rpartition(":")[0]
    print(f"ready {'grpcs' if tls else 'grpc'}://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(grace=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT (port 0: any)")
    parser.add_argument("--audio-format", choices=tuple(ENCODINGS), default="pcm16")
    parser.add_argument("--audio-rate", type=int, choices=(8000, 16000, 24000, 48000),
                        default=48000, help="pcm16's rate, in Hz")  # fmt: skip
    parser.add_argument("--key-file", help="file holding the bearer calls must carry")
    parser.add_argument("--tls-cert", help="PEM certificate chain: serve TLS (grpcs://)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    options = parser.parse_args()
    if bool(options.tls_cert) != bool(options.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(serve(options))


if __name__ == "__main__":
    main()
