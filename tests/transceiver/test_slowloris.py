"""Slowloris against a real ``transceiver serve`` (issue 21 #7): connections that never finish
their headers are closed after ``--http-header-timeout``, on the WHIP port and on ``--metrics``;
beyond ``--http-max-connections`` a newcomer is refused at once (503); once the slow ones are
gone a real WHIP offer is answered; a request past its headers is not cut by the timeout.

Closing is asserted within 10x the timeout (a wide margin: the machine is shared), counted by
the transceiver's own metric."""

from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner

from bench.slowloris import close_all, first_reply, open_slow, wait_all_closed
from common.hint import Keyring
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.waits import run, wait_for
from tests.support.whip import make_offer, post
from transceiver.cli import main as transceiver_main

HEADER_TIMEOUT_S = 3.0
CAP = 12
CLOSED = "rtcedge_transceiver_http_connections_closed_total"


@pytest.fixture(scope="module")
def trx():
    relay = RelayProcess({}, workers=1, pin=False)
    trx = TransceiverProcess(
        relay,
        extra_args=[
            "--http-header-timeout", str(HEADER_TIMEOUT_S),
            "--http-max-connections", str(CAP),
            "--relay-network", "127.0.0.1/32",
            "--drain-grace", "0",
        ],
    )  # fmt: skip
    with trx:
        yield trx


def closed(trx: TransceiverProcess, listener: str, reason: str) -> float:
    return trx.metric(CLOSED, listener=listener, reason=reason)


def test_slow_headers_are_closed_after_the_header_timeout(trx):
    before = closed(trx, "http", "header_timeout")
    socks = open_slow((trx.host, trx.http_port), CAP - 2)
    try:
        # Each connection trickles a header line every ~0.2 s: a per-read timeout never fires.
        assert wait_all_closed(socks, 10 * HEADER_TIMEOUT_S) == len(socks)
    finally:
        close_all(socks)
    assert closed(trx, "http", "header_timeout") - before == len(socks)
    gauge = "rtcedge_transceiver_http_connections"
    assert wait_for(lambda: trx.metric(gauge, listener="http"), 0)


def test_beyond_the_cap_newcomers_are_refused_at_once_and_whip_works_after(trx):
    refused_before = closed(trx, "http", "max_connections")
    slow = open_slow((trx.host, trx.http_port), CAP)
    try:
        over = open_slow((trx.host, trx.http_port), 4)
        # Refused at accept, before any timeout: the 503 is the refusal's own (an expired
        # connection is aborted without a word).
        replies = [first_reply(s) for s in over]
        close_all(over)
        assert all(r.startswith(b"HTTP/1.1 503") for r in replies), replies
        assert closed(trx, "http", "max_connections") - refused_before == 4
        assert wait_all_closed(slow, 10 * HEADER_TIMEOUT_S) == CAP
    finally:
        close_all(slow)

    async def offer() -> int:
        status, _, _ = await post(trx.url, await make_offer())
        return status

    assert run(offer()) == 201


def test_slowloris_on_the_metrics_listener_is_closed_too(trx):
    before = closed(trx, "metrics", "header_timeout")
    socks = open_slow((trx.host, trx.metrics_port), 4)
    try:
        assert wait_all_closed(socks, 10 * HEADER_TIMEOUT_S) == len(socks)
    finally:
        close_all(socks)
    assert closed(trx, "metrics", "header_timeout") - before == len(socks)


def test_an_idle_keep_alive_connection_is_closed_after_its_response(trx):
    """The deadline starts again after each response: a connection cannot idle forever."""
    sock = socket.create_connection((trx.host, trx.http_port), timeout=5)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: rtcedge\r\n\r\n")
        assert first_reply(sock).startswith(b"HTTP/1.1 200")
        assert wait_all_closed([sock], 10 * HEADER_TIMEOUT_S) == 1
    finally:
        sock.close()


def test_a_request_past_its_headers_is_not_cut_by_the_header_timeout(trx):
    """An offer whose headers came at once and whose body takes longer than the header timeout
    (within --body-timeout) is answered: the handler, not the header deadline, bounds a body."""

    async def offer_sdp() -> bytes:
        return (await make_offer()).encode()

    body = run(offer_sdp())
    sock = socket.create_connection((trx.host, trx.http_port), timeout=5)
    try:
        sock.sendall(
            b"POST /whip HTTP/1.1\r\nHost: rtcedge\r\nContent-Type: application/sdp\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        )
        half = len(body) // 2
        sock.sendall(body[:half])
        time.sleep(1.5 * HEADER_TIMEOUT_S)  # the request is in its handler: no deadline
        sock.sendall(body[half:])
        assert first_reply(sock, timeout_s=10).startswith(b"HTTP/1.1 201")
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("option", "value"), [("--http-header-timeout", "0"), ("--http-max-connections", "0")]
)
def test_a_bad_value_fails_at_start_naming_its_option(option, value):
    result = CliRunner().invoke(
        transceiver_main,
        ["serve", "--id", "0", "--advertise", "127.0.0.1:3478", option, value],
        env={"RTCEDGE_KEYRING_JSON": Keyring.generate(1).to_json()},
    )
    assert result.exit_code == 2 and f"{option}: must be" in result.output, result.output
