"""The websocket backend's credentials: the key as ``Authorization: Bearer``, wss checked against
a CA file, and a wrong key a clear call failure. The backend is a real server of another
WebSocket implementation (the ``websockets`` package) that checks the bearer at the upgrade, on
loopback; its TLS certificate is signed by a CA made in the test (``cryptography``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import ssl
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.certificates import certificates
from tests.support.tone_call import ClientResult, run_client
from tests.support.waits import run
from transceiver.backend import FRAME_BYTES, BackendError, SessionInfo
from transceiver.backends.websocket import WebSocketBackend, WebSocketBackendConfig

KEY = "sk-backend-" + "k" * 24
WRONG = "sk-wrong-" + "w" * 24


class BearerServer:
    """A WebSocket backend that takes a call only with ``Authorization: Bearer KEY``: it records
    the calls' first messages and sends one 20 ms frame back."""

    def __init__(self, key: str, tls: ssl.SSLContext | None = None) -> None:
        self.key, self.tls = key, tls
        self.starts: list[dict] = []
        self.refused: list[str] = []  # the Authorization headers it refused
        self.url = ""

    def check(self, connection: ServerConnection, request: Request) -> Response | None:
        given = request.headers.get("Authorization", "")
        if secrets.compare_digest(given.encode(), f"Bearer {self.key}".encode()):
            return None
        self.refused.append(given)
        return connection.respond(HTTPStatus.UNAUTHORIZED, "wrong key\n")

    async def call(self, ws: ServerConnection) -> None:
        self.starts.append(json.loads(await ws.recv()))
        await ws.send(bytes(FRAME_BYTES))
        await ws.wait_closed()

    @contextlib.asynccontextmanager
    async def running(self, port: int = 0) -> AsyncIterator[BearerServer]:
        async with serve(
            self.call, "127.0.0.1", port, process_request=self.check, ssl=self.tls
        ) as server:
            port = server.sockets[0].getsockname()[1]
            self.url = f"{'wss' if self.tls else 'ws'}://127.0.0.1:{port}/call"
            yield self


def info() -> SessionInfo:
    return SessionInfo(session_id=secrets.token_hex(16), transceiver_id=3, remote="")


async def one_call(config: WebSocketBackendConfig) -> list[bytes]:
    """A call through the websocket backend: what it heard back before hanging up."""
    backend = WebSocketBackend(config)
    heard: list[bytes] = []
    try:
        session = await backend.open_session(info(), heard.append, lambda e: None, print)
        deadline = asyncio.get_running_loop().time() + 5
        while not heard and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await session.close("hangup")
    finally:
        await backend.close()
    return heard


def server_tls(tls: dict[str, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls["cert"], tls["key"])
    return context


def test_the_key_is_the_bearer_a_checking_server_takes():
    server = BearerServer(KEY)

    async def go() -> list[bytes]:
        async with server.running():
            return await one_call(WebSocketBackendConfig(server.url, bearer=KEY))

    heard = run(go(), 10)
    assert heard == [bytes(FRAME_BYTES)] and server.refused == []
    assert server.starts[0]["type"] == "session.start"
    assert KEY not in repr(WebSocketBackendConfig(server.url, bearer=KEY))


def test_a_wrong_or_missing_key_refuses_the_call_saying_so():
    server = BearerServer(KEY)

    async def go() -> list[str]:
        errors = []
        async with server.running():
            for bearer in (WRONG, None):
                with pytest.raises(BackendError) as failed:
                    await one_call(WebSocketBackendConfig(server.url, bearer=bearer))
                errors.append(str(failed.value))
        return errors

    for error in run(go(), 10):
        assert f"backend {server.url} refused the WebSocket upgrade: HTTP 401" in error
        assert "(a missing or wrong key: --backend-key-file or RTCEDGE_BACKEND_KEY)" in error
        assert WRONG not in error
    assert server.refused == [f"Bearer {WRONG}", ""] and server.starts == []


def test_wss_is_checked_against_the_ca_file(tmp_path):
    tls = certificates(tmp_path)
    server = BearerServer(KEY, server_tls(tls))

    async def go() -> tuple[list[bytes], str]:
        async with server.running():
            heard = await one_call(
                WebSocketBackendConfig(server.url, bearer=KEY, ca_file=str(tls["ca"]))
            )
            with pytest.raises(BackendError) as untrusted:  # the system's CAs know not ours
                await one_call(WebSocketBackendConfig(server.url, bearer=KEY))
        return heard, str(untrusted.value)

    heard, untrusted = run(go(), 10)
    assert heard == [bytes(FRAME_BYTES)] and server.starts[0]["type"] == "session.start"
    assert f"cannot reach backend {server.url}" in untrusted
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted
    assert len(server.starts) == 1


def test_a_transceiver_with_a_wrong_key_refuses_the_offer_and_logs_why(tmp_path):
    """The whole path: ``transceiver serve --backend websocket`` with its key from a file; the
    offer gets 503 (the detail, naming the backend, only in the log), the key nowhere."""
    key_file = tmp_path / "key"
    key_file.write_text(WRONG + "\n")
    port = free_port("127.0.0.1", socket.SOCK_STREAM)
    server = BearerServer(KEY)
    relay = RelayProcess({}, workers=1)
    trx = TransceiverProcess(
        relay,
        extra_args=["--backend", "websocket", "--backend-key-file", str(key_file)],
        extra_env={"RTCEDGE_BACKEND_URL": f"ws://127.0.0.1:{port}/call"},
    )
    relay.transceivers = {0: trx.media_address}

    async def call() -> ClientResult:
        async with server.running(port):
            return await run_client(trx.url, 440, seconds=0.5)

    with relay, trx:
        result = run(call(), 20)
    logs = trx.proc.stderr.read().decode() if trx.proc and trx.proc.stderr else ""
    assert not result.connected and result.error == "POST 503: backend unavailable"
    assert server.refused == [f"Bearer {WRONG}"]
    assert "offer refused, backend unavailable" in logs
    assert "HTTP 401 (a missing or wrong key" in logs
    assert WRONG not in logs
