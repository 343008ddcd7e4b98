"""The server's one capacity rule, asked by WHIP before reading an offer and by create_session."""

from __future__ import annotations

import pytest

from tests.support.inprocess import direct_config
from tests.support.waits import run
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
