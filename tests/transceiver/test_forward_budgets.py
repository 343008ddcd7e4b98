"""Peer forwarding's budgets under attack (issue 21, item 6), with real processes: transceiver 0
takes the requests; transceiver 1, a real process, owns a live session; "transceiver 2" is a
TCP listener that accepts connections and never answers (an owner that hangs).

40 DELETEs of ids owned by 2, from 20 clients (two each, --trusted-proxy + X-Forwarded-For), used
to take every one of the 32 forward slots for --peer-timeout (5 s): a DELETE of the live session
on 1 and a resume offer whose call 1 owns were refused 503 meanwhile. Now the hung owner holds
--peer-max-per-owner (4) slots, the rest are refused at once and counted (owner_busy), the
DELETE is answered 200 by its owner and the resume offer's claim reaches its owner (who answers
that the call is gone: 410, not 503). Once the hung forwards time out, the owner is failed fast
(owner_failing): no new connection is made to it.

In-process: a DELETE is answered once the session's end has started, its teardown going on.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import time

import aiohttp

from common.config import format_host_port
from common.resumetoken import NONCE_LEN, sign_resume_token
from common.sessionid import sign_session_id
from testbed.processes import RelayProcess, TransceiverProcess, started_in_order
from tests.support.inprocess import direct_config, ended, running
from tests.support.waits import run, wait_until
from tests.support.whip import SDP, make_offer, post
from transceiver.backend import Backend, BackendSession
from transceiver.backends import create_backend
from transceiver.call.lifecycle import State
from transceiver.ownership import RESUME_HEADER

ATTACK_REQUESTS = 40
ATTACK_CLIENTS = 20
REFUSED = "rtcedge_transceiver_session_requests_refused_total"
FAILED = "rtcedge_transceiver_migrations_failed_total"
WAIT_FOR_SESSIONS = ["--first-check-timeout", "60", "--ice-timeout", "60", "--client-rate", "0"]


def xff(client: str) -> dict[str, str]:
    return {"X-Forwarded-For": client}


def test_a_hung_owner_does_not_take_the_forwards_of_healthy_owners_or_the_claims():
    relay = RelayProcess({}, workers=1, pin=False)  # never started: its keyring and cluster
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # the kernel completes the handshakes; nothing ever answers
    silent.setblocking(False)
    held: list[socket.socket] = []

    def accepted() -> int:
        while True:
            try:
                held.append(silent.accept()[0])
            except BlockingIOError:
                return len(held)

    owner = TransceiverProcess(relay, tid=1, extra_args=WAIT_FOR_SESSIONS)
    front = TransceiverProcess(relay, tid=0)
    front.extra_args = [
        f"--peer-http=1={format_host_port(owner.host, owner.http_port)}",
        f"--peer-http=2={format_host_port(*silent.getsockname())}",
        "--trusted-proxy", "127.0.0.1/32", *WAIT_FOR_SESSIONS,
    ]  # fmt: skip

    async def go():
        status, _, headers = await post(owner.url, await make_offer())
        assert status == 201
        live = headers["Location"]
        done: list[int] = []

        async def attack(http: aiohttp.ClientSession, i: int) -> None:
            sid = sign_session_id(relay.keyring, relay.cluster, 2, time.time(), "ab" * 16)
            client = f"10.0.{i % ATTACK_CLIENTS}.1"
            async with http.delete(f"{front.url}/whip/{sid}", headers=xff(client)) as r:
                done.append(r.status)

        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            attackers = [asyncio.ensure_future(attack(http, i)) for i in range(ATTACK_REQUESTS)]
            # Every attacking DELETE is either refused or hanging on the silent owner.
            assert await wait_until(lambda: accepted() + len(done) >= ATTACK_REQUESTS, 5)
            hanging = accepted()
            assert len(done) < ATTACK_REQUESTS, "the hung forwards are still under way"

            # Meanwhile: a DELETE of the live call on the healthy owner...
            async with http.delete(front.url + live, headers=xff("192.0.2.9")) as r:
                assert r.status == 200, (r.status, await r.text())
            # ...and a resume offer whose call the healthy owner would own: its claim is made
            # and answered by that owner (no such call there: 410), not refused for capacity.
            token = sign_resume_token(relay.keyring, relay.cluster, 1, time.time() + 5,
                                      "cd" * 16, secrets.token_bytes(NONCE_LEN))  # fmt: skip
            gone = front.metric(FAILED, reason="no_session")
            resume = {**SDP, RESUME_HEADER: token, **xff("192.0.2.10")}
            async with http.post(f"{front.url}/whip", data=await make_offer(), headers=resume) as r:
                assert r.status == 410, (r.status, await r.text())
            assert front.metric(FAILED, reason="no_session") == gone + 1
            assert front.metric(FAILED, reason="busy") == 0

            await asyncio.gather(*attackers)
        assert done == [503] * ATTACK_REQUESTS, done
        assert hanging == 4, "the hung owner held --peer-max-per-owner slots, no more"
        assert front.metric(REFUSED, reason="owner_busy") == ATTACK_REQUESTS - hanging
        assert front.metric(REFUSED, reason="owner_failed") == hanging
        assert front.metric(REFUSED, reason="busy") == 0
        assert await wait_until(lambda: owner.metric("rtcedge_transceiver_sessions_active") == 0)

        # The owner timed out: failed fast for --peer-fail-fast, without a connection to it.
        async with aiohttp.ClientSession() as http:
            sid = sign_session_id(relay.keyring, relay.cluster, 2, time.time(), "ef" * 16)
            async with http.delete(f"{front.url}/whip/{sid}", headers=xff("10.9.9.9")) as r:
                assert r.status == 503 and r.headers["Retry-After"]
        assert front.metric(REFUSED, reason="owner_failing") == 1
        assert accepted() == hanging

    try:
        with started_in_order(owner, front):
            run(go(), timeout_s=40)
    finally:
        for sock in (*held, silent):
            sock.close()


class SlowToEndBackend(Backend):
    """The echo backend, whose sessions' close waits until ``release`` is set (a backend slow
    to hang up: the session's teardown waits on it, up to its step bound)."""

    name = "slow_to_end"

    def __init__(self) -> None:
        self.echo = create_backend("echo")
        self.release = asyncio.Event()

    async def open_session(self, info, emit_audio, emit_event, on_failure) -> BackendSession:
        inner = await self.echo.open_session(info, emit_audio, emit_event, on_failure)
        release = self.release

        class Slow(BackendSession):
            def audio_in(self, pcm: bytes) -> None:
                inner.audio_in(pcm)

            def event_in(self, event: dict) -> None:
                inner.event_in(event)

            async def close(self, reason: str) -> None:
                await release.wait()
                await inner.close(reason)

        return Slow()


def test_delete_is_answered_once_the_end_started_and_the_teardown_goes_on():
    """In-process: the DELETE's 200 arrives while the session is still tearing down (it held
    the caller, and a forwarding peer's slot, for the whole teardown)."""
    backend = SlowToEndBackend()

    async def go():
        async with running(direct_config(), backend=backend) as (server, url):
            status, _, headers = await post(url, await make_offer())
            assert status == 201
            (session,) = server.sessions.values()
            async with (
                aiohttp.ClientSession() as http,
                http.delete(url + headers["Location"]) as r,
            ):
                assert r.status == 200
            assert session.state is State.CLOSING and not session.closed.is_set()
            assert server.metrics.whip_requests.labels("DELETE", "200")._value.get() == 1
            backend.release.set()
            assert await wait_until(lambda: not server.sessions)
            assert ended(server, "deleted") == 1

    run(go())


def test_an_owner_that_never_completes_the_handshake_times_out_connecting_then_fails_fast():
    """In-process: the owner's listener has a full accept queue, so the kernel drops further
    SYNs and a connect to it hangs. With --peer-timeout 30 s and --peer-connect-timeout 0.5 s
    the forward is refused (owner_failed) within the test's bound of 15 s, and the next one at
    once (owner_failing), without a connection attempt."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers: list[socket.socket] = []
    for _ in range(8):  # more than the queue takes: the rest of the SYNs are dropped
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(full.getsockname())
        fillers.append(filler)
    cfg = direct_config(
        peer_http=((5, full.getsockname()),), peer_timeout_s=30.0, peer_connect_timeout_s=0.5
    )

    async def go():
        async with running(cfg) as (server, url), aiohttp.ClientSession() as http:
            refused = server.metrics.session_requests_refused
            sid = sign_session_id(server.keyring, 0, 5, time.time(), "ab" * 16)
            async with http.delete(f"{url}/whip/{sid}") as r:
                assert r.status == 503
            assert refused.labels("owner_failed")._value.get() == 1
            async with http.delete(f"{url}/whip/{sid}") as r:
                assert r.status == 503
            assert refused.labels("owner_failing")._value.get() == 1
            assert server.metrics.session_requests_forwarded.labels("DELETE")._value.get() == 0

    try:
        run(go(), timeout_s=15)
    finally:
        for sock in (*fillers, full):
            sock.close()
