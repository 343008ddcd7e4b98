"""``transceiver serve --https-cert FILE --https-key FILE``: WHIP and the page over TLS on a
real process, and the listener's guards still hold over TLS (issue 27).

A client that opens a TCP connection and never finishes its TLS handshake would not reach the
connection guard (it admits a connection once the handshake is done): the handshake is bounded
by ``--http-header-timeout`` too. Past the handshake, slow headers are cut as on plain http, and
counted. Closing is asserted within 10x the timeout (a wide margin: the machine is shared).
"""

from __future__ import annotations

import datetime
import socket
import ssl
import time

import aiohttp
import pytest

from bench.slowloris import PARTIAL_REQUEST, closed_by_server
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.waits import run, wait_for
from tests.support.whip import SDP, make_offer
from transceiver.config import TransceiverConfig
from transceiver.signaling import tls
from transceiver.signaling.app import page_info

HEADER_TIMEOUT_S = 2.0
CLOSED = "rtcedge_transceiver_http_connections_closed_total"


@pytest.fixture(scope="module")
def trx(tmp_path_factory):
    cert, key = tls.self_signed(["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    files = tmp_path_factory.mktemp("tls")
    (files / "cert.pem").write_bytes(cert)
    (files / "key.pem").write_bytes(key)
    (files / "key.pem").chmod(0o600)
    relay = RelayProcess({}, workers=1, pin=False)
    trx = TransceiverProcess(
        relay,
        https=(str(files / "cert.pem"), str(files / "key.pem")),
        extra_args=[
            "--http-header-timeout", str(HEADER_TIMEOUT_S),
            "--relay-network", "127.0.0.1/32",
            "--drain-grace", "0",
        ],
    )  # fmt: skip
    with trx:
        yield trx


def test_an_offer_over_https_is_answered(trx):
    async def offer() -> tuple[int, str, dict]:
        connector = aiohttp.TCPConnector(ssl=trx.tls_context())
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.post(f"{trx.url}/whip", data=await make_offer(), headers=SDP) as answer,
        ):
            return answer.status, await answer.text(), dict(answer.headers)

    status, body, headers = run(offer())
    assert trx.url.startswith("https://")
    assert status == 201, body
    assert body.startswith("v=0") and headers["Location"].startswith("/whip/")
    assert trx.http("/page.json") == (200, '{"backend": "echo", "audio_format": "pcm16"}')


def test_plain_http_on_the_https_port_gets_no_page(trx):
    with socket.create_connection((trx.host, trx.http_port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        try:
            while chunk := sock.recv(4096):
                reply += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert not reply.startswith(b"HTTP/1.1 200"), reply


def test_a_client_stalled_in_its_tls_handshake_is_closed_after_the_header_timeout(trx):
    with socket.create_connection((trx.host, trx.http_port), timeout=5) as sock:
        sock.settimeout(0.1)
        deadline = time.monotonic() + 10 * HEADER_TIMEOUT_S
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                closed = sock.recv(4096) == b""
            except TimeoutError:
                continue
            except ConnectionResetError:
                closed = True
        assert closed, "a connection that never began its TLS handshake was kept open"


def test_slow_headers_over_tls_are_closed_and_counted(trx):
    before = trx.metric(CLOSED, listener="http", reason="header_timeout")
    raw = socket.create_connection((trx.host, trx.http_port), timeout=5)
    sock = trx.tls_context().wrap_socket(raw, server_hostname=trx.host)  # type: ignore[union-attr]
    try:
        sock.sendall(PARTIAL_REQUEST)
        assert wait_for(lambda: tls_closed(sock), True, timeout_s=10 * HEADER_TIMEOUT_S)
    finally:
        sock.close()
    assert trx.metric(CLOSED, listener="http", reason="header_timeout") - before == 1


def tls_closed(sock: ssl.SSLSocket) -> bool:
    try:
        return closed_by_server(sock)
    except ssl.SSLError:  # an abort mid-record
        return True


@pytest.mark.parametrize(
    ("backend", "url", "said"),
    [
        ("echo", None, {"backend": "echo", "audio_format": "pcm16"}),
        ("websocket", "ws://user:secret@inference:8765/call", {"backend": "websocket"}),
        ("tests.nowhere:factory", None, {"backend": "plugin"}),  # not its module
    ],
)
def test_the_page_is_told_the_backends_kind_and_never_its_url(backend, url, said):
    config = TransceiverConfig(
        transceiver_id=0, advertise=("127.0.0.1", 3478), backend=backend, backend_url=url
    )
    assert page_info(config) == said
