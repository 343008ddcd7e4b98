"""``seam.track_connect``: the task aiortc starts to connect a peer connection, kept when it is
started rather than found among every task of the loop."""

from __future__ import annotations

import asyncio

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from tests.support.waits import run
from tests.support.whip import make_offer
from transceiver.call.seam import track_connect
from transceiver.call.seam.peer import CONNECT_QUALNAME


def test_the_task_aiortc_starts_to_connect_is_the_one_kept():
    async def go():
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        started = track_connect(pc)
        assert started() is None, "nothing started before the offer"
        await pc.setRemoteDescription(RTCSessionDescription(await make_offer(), "offer"))
        await pc.setLocalDescription(await pc.createAnswer())
        task = started()
        assert task is not None and task.get_coro().__qualname__ == CONNECT_QUALNAME
        ours = [
            t
            for t in asyncio.all_tasks()
            if t.get_coro().__qualname__ == CONNECT_QUALNAME
            and t.get_coro().cr_frame is not None
            and t.get_coro().cr_frame.f_locals.get("self") is pc
        ]
        assert ours in ([task], []), "the one aiortc runs (or it is done already)"
        await pc.close()
        await asyncio.wait_for(asyncio.shield(task), 5)
        assert task.done()

    run(go())


def test_a_peer_connection_is_tracked_once():
    async def go():
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        track_connect(pc)
        with pytest.raises(RuntimeError, match="not verified"):
            track_connect(pc)
        await pc.close()

    run(go())
