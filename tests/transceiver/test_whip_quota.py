"""One WHIP client cannot hold a transceiver's session slots (issue 8, finding 7).

Before: ~2 offers per second that never send an ICE check held all 20 slots, each for the whole
ICE deadline (10 s). Now a client gets a burst and then a rate of new sessions (429 +
Retry-After past it), optionally a cap on live sessions, and an offer never followed by an
authenticated check ends after --first-check-timeout. Real HTTP and UDP on loopback; clients
are told apart through a trusted proxy's X-Forwarded-For (the test is the proxy).
"""

from __future__ import annotations

import asyncio
import math
import secrets
import socket
import time

from common import stun
from tests.support.inprocess import direct_config, ended, running
from tests.support.waits import run, wait_until
from tests.support.whip import SDP, make_offer, post, sdp_value

ATTACKER = {**SDP, "X-Forwarded-For": "198.51.100.7"}
CALLER = {**SDP, "X-Forwarded-For": "203.0.113.9"}


def test_a_client_over_its_rate_gets_429_with_retry_after_and_others_do_not():
    async def go():
        cfg = direct_config(
            client_rate_per_s=0.5, client_burst=3, trusted_proxies=("127.0.0.1/32",)
        )
        async with running(cfg) as (server, url):
            offer = await make_offer()
            statuses = [(await post(url, offer, ATTACKER))[:1] for _ in range(5)]
            assert statuses == [(201,)] * 3 + [(429,)] * 2
            status, text, headers = await post(url, offer, ATTACKER)
            assert status == 429 and "too many new sessions" in text
            assert headers["Retry-After"] in ("1", "2"), "one new session per 2 s"
            assert (await post(url, offer, CALLER))[0] == 201, "another client is unaffected"
            assert len(server.sessions) == 4
            assert server.metrics.whip_requests.labels("POST", "429")._value.get() == 3

    run(go())


def test_a_forwarded_header_from_an_untrusted_peer_is_ignored():
    async def go():
        cfg = direct_config(client_rate_per_s=0.5, client_burst=2)  # no trusted proxy
        async with running(cfg) as (_, url):
            offer = await make_offer()
            assert (await post(url, offer, ATTACKER))[0] == 201
            assert (await post(url, offer, ATTACKER))[0] == 201
            # Claiming to be someone else does not buy a fresh bucket.
            assert (await post(url, offer, CALLER))[0] == 429

    run(go())


def test_the_attack_of_the_issue_no_longer_holds_every_slot():
    """Offers without checks, as fast as allowed: the caller still gets a session."""

    async def go():
        cfg = direct_config(
            max_sessions=6,
            client_rate_per_s=1.0,
            client_burst=3,
            client_max_sessions=4,
            first_check_timeout_s=1.0,
            trusted_proxies=("127.0.0.1/32",),
        )
        async with running(cfg) as (server, url):
            offer = await make_offer()
            started = time.monotonic()
            accepted = 0
            while time.monotonic() - started < 4.0:  # ~10 offers/s for 4 s: 40 tries
                status, _, _ = await post(url, offer, ATTACKER)
                accepted += status == 201
                assert len(server.sessions) <= 4, "never more than the per-client cap"
                await asyncio.sleep(0.1)
            elapsed = time.monotonic() - started
            assert 3 <= accepted <= 3 + math.ceil(elapsed), accepted  # the burst, then 1/s
            assert (await post(url, offer, CALLER))[0] == 201
            assert await wait_until(lambda: len(server.sessions) == 1, 5)
            assert ended(server, "first_check_timeout") == accepted
            assert ended(server, "ice_timeout") == 0

    run(go())


def test_concurrent_offers_of_one_client_do_not_pass_the_cap_together():
    async def go():
        cfg = direct_config(client_max_sessions=2, trusted_proxies=("127.0.0.1/32",))
        async with running(cfg) as (server, url):
            offer = await make_offer()
            results = await asyncio.gather(*(post(url, offer, ATTACKER) for _ in range(6)))
            assert sorted(r[0] for r in results) == [201, 201, 429, 429, 429, 429]
            assert len(server.sessions) == 2

    run(go())


def test_one_authenticated_check_gives_the_session_the_full_ice_deadline():
    """The media socket tells the session when its first check arrived (a hook in media.py):
    a client that is connecting, only slowly, is not cut off at the first-check deadline."""

    async def go():
        cfg = direct_config(first_check_timeout_s=0.5, ice_timeout_s=3.0)
        async with running(cfg) as (server, url):
            offer = await make_offer()
            status, answer, _ = await post(url, offer)
            assert status == 201
            (session,) = server.sessions.values()
            username = f"{sdp_value(answer, 'ice-ufrag')}:{sdp_value(offer, 'ice-ufrag')}"
            key = sdp_value(answer, "ice-pwd").encode()
            check = stun.binding_request(username, secrets.token_bytes(12), integrity_key=key)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
                client.bind(("127.0.0.1", 0))
                client.sendto(check, cfg.media)
                assert await wait_until(lambda: session.lifecycle.first_check_at is not None, 2)
                await asyncio.sleep(1.5)  # three first-check deadlines
                assert session.id in server.sessions
                assert await wait_until(lambda: not server.sessions, 5)
            assert ended(server, "first_check_timeout") == 0
            assert session.lifecycle.end_reason in ("ice_timeout", "ice_failed")

    run(go())
