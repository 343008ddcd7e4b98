"""The server's one capacity rule, asked once per offer by WHIP's admission before it reads the
offer (with the offers it admitted that are not sessions yet); the gauges of how full it is."""

from __future__ import annotations

from tests.support.inprocess import direct_config, running
from tests.support.waits import run, wait_until
from tests.support.whip import make_offer, post
from transceiver.server import TransceiverServer


def test_draining_or_a_full_server_refuses_a_new_session_with_one_reason():
    async def go():
        server = TransceiverServer(direct_config(max_sessions=1))  # not started: no socket
        assert server.capacity_refusal() is None
        refusal = server.capacity_refusal(pending=1)  # an offer admitted, not a session yet
        assert refusal is not None and refusal.text == "session limit reached"
        assert refusal.reason == "max_sessions" and refusal.retry_after_s > 0
        assert (refusal.status, refusal.kind) == (503, "capacity")
        server.sessions["live"] = None  # type: ignore[assignment]
        assert server.capacity_refusal() == refusal
        server.sessions.clear()
        server.draining = True
        assert server.capacity_refusal().text == "draining: no new sessions"
        assert server.capacity_refusal().reason == "draining"
        await server.backend.close()

    run(go())


def test_a_full_server_refuses_an_offer_before_reading_it_and_creates_nothing():
    async def go():
        async with running(direct_config(max_sessions=1)) as (server, url):
            assert (await post(url, await make_offer()))[0] == 201
            status, text, headers = await post(url, "not even SDP")
            assert (status, text) == (503, "session limit reached\n"), "refused unread"
            assert headers["Retry-After"] == "5" and len(server.sessions) == 1
            assert server.metrics.refusals.labels("max_sessions")._value.get() == 1

    run(go())


def test_session_utilization_is_live_sessions_over_the_limit():
    """The gauge an autoscaler reads: sessions not yet ended over --max-sessions, kept with
    every start and end."""

    async def go():
        async with running(direct_config(max_sessions=4)) as (server, url):
            gauge = server.metrics.session_utilization
            assert gauge._value.get() == 0
            ids = []
            for _ in range(2):
                status, _, headers = await post(url, await make_offer())
                assert status == 201
                ids.append(headers["Location"].rsplit("/", 1)[1])
            assert gauge._value.get() == 0.5
            first = next(s for s in server.sessions.values() if s.resource_id == ids[0])
            first.end("deleted")
            assert await wait_until(lambda: gauge._value.get() == 0.25, 5)
            assert server.metrics.sessions_active._value.get() == 1

    run(go())
