"""Every way a session ends releases it, with its reason counted; SIGTERM drains."""

from __future__ import annotations

import asyncio
import signal

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from testbed.callers import ToneTrack
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.inprocess import direct_config, ended, running
from tests.support.tone_call import run_client
from tests.support.waits import run, wait_until
from tests.support.whip import make_offer, post


def test_offer_that_never_connects_ends_by_ice_timeout():
    async def go():
        async with running(direct_config(ice_timeout_s=1.0)) as (server, url):
            status, _, _ = await post(url, await make_offer())  # nobody ever sends a check
            assert status == 201 and len(server.sessions) == 1
            assert await wait_until(lambda: not server.sessions, 5)
            assert ended(server, "ice_timeout") == 1
            assert len(server.demux) == 0

    run(go())


async def connect(url: str) -> tuple[RTCPeerConnection, str]:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(ToneTrack(440))
    pc.createDataChannel("events")
    await pc.setLocalDescription(await pc.createOffer())
    status, answer, headers = await post(url, pc.localDescription.sdp)
    assert status == 201
    await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
    assert await wait_until(lambda: pc.connectionState == "connected")
    return pc, headers["Location"]


def test_silent_caller_ends_by_idle_timeout_and_hang_up_without_delete_is_noticed():
    async def go():
        async with running(direct_config(idle_timeout_s=1.0)) as (server, url):
            pc, _ = await connect(url)
            pc.getSenders()[0].replaceTrack(None)  # the caller stops sending audio
            assert await wait_until(lambda: not server.sessions, 6)
            assert ended(server, "idle") == 1
            await pc.close()

            pc, _ = await connect(url)
            await pc.close()  # DTLS close_notify, no DELETE
            assert await wait_until(lambda: not server.sessions, 6)
            assert ended(server, "peer_closed") + ended(server, "ice_failed") == 1

    run(go())


def test_sigterm_drains_then_exits():
    relay = RelayProcess({}, workers=1)
    trx = TransceiverProcess(relay, extra_args=["--drain-grace", "3"])
    relay.transceivers = {0: trx.media_address}

    async def go():
        call = asyncio.create_task(run_client(trx.url, 440, seconds=6, delete=False))
        connected = "rtcedge_transceiver_dtls_connected_seconds_count"
        assert await wait_until(lambda: trx.metric(connected) == 1, 10), "the call is live"
        trx.proc.send_signal(signal.SIGTERM)
        assert await wait_until(lambda: trx.http("/readyz")[0] == 503, 3), (
            "not ready while draining"
        )
        status, text, _ = await post(trx.url, await make_offer())
        assert status == 503 and "draining" in text
        assert trx.metric("rtcedge_transceiver_sessions_active") == 1, "the live call goes on"
        await asyncio.sleep(1.0)
        assert trx.proc.poll() is None, "still serving the live call within the 3 s grace"
        assert await wait_until(lambda: trx.proc.poll() is not None, 10)
        assert trx.proc.returncode == 0
        result = await call
        assert result.connected

    with relay, trx:
        run(go())
