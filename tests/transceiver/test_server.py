"""The server's one capacity rule, asked by WHIP before reading an offer and by create_session;
the gauges of how full it is."""

from __future__ import annotations

import pytest

from tests.support.inprocess import direct_config, running
from tests.support.waits import run, wait_until
from tests.support.whip import make_offer, post
from transceiver.server import SessionLimitError, TransceiverServer


def test_draining_or_a_full_server_refuses_a_new_session_with_one_reason():
    async def go():
        server = TransceiverServer(direct_config(max_sessions=1))  # not started: no socket
        assert server.capacity_refusal() is None
        server.sessions["live"] = None  # type: ignore[assignment]
        refusal = server.capacity_refusal()
        assert refusal is not None and refusal.text == "session limit reached"
        assert refusal.reason == "max_sessions" and refusal.retry_after_s > 0
        with pytest.raises(SessionLimitError, match=r"^session limit reached$"):
            await server.create_session("v=0", "", {})
        server.sessions.clear()
        server.draining = True
        assert server.capacity_refusal().text == "draining: no new sessions"
        with pytest.raises(SessionLimitError, match=r"^draining: no new sessions$"):
            await server.create_session("v=0", "", {})
        assert not server.demux, "nothing was created"
        await server.backend.close()

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
