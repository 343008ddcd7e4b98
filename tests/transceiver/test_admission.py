"""Admission in a real process: a transceiver whose own CPU and event loop are loaded refuses new
sessions with 503 + Retry-After, and takes them again once the load is gone; readiness follows
admission (a full or overloaded transceiver is not ready, and keeps its calls)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.busy_transceiver import BusyTransceiverProcess
from tests.support.tone_call import run_client
from tests.support.waits import run, wait_until
from tests.support.whip import make_offer, post

REFUSALS = "rtcedge_transceiver_admission_refusals_total"


def test_a_loaded_transceiver_refuses_with_503_and_retry_after_then_recovers(tmp_path: Path):
    relay = RelayProcess({}, workers=1)  # not started: its address is what answers advertise
    # 50 % of a core: an idle transceiver uses ~0.2 %, the burning thread as much as it gets.
    trx = BusyTransceiverProcess(
        relay, extra_args=["--admit-max-cpu", "50"], flag=tmp_path / "busy"
    )
    relay.transceivers = {0: trx.media_address}
    trx.start()
    try:

        async def go():
            offer = await make_offer()
            status, _, _ = await post(trx.url, offer)
            assert status == 201, "idle: admitted"
            trx.busy(True)
            overloaded = "rtcedge_transceiver_overloaded"
            assert await wait_until(lambda: trx.metric(overloaded) == 1, 20)
            status, text, headers = await post(trx.url, offer)
            assert status == 503 and text.startswith("overloaded"), text
            ready, why = trx.http("/readyz")
            assert ready == 503 and why.startswith("overloaded"), "not ready while overloaded"
            assert int(headers["Retry-After"]) > 0
            refused = trx.metric(REFUSALS, reason="cpu") + trx.metric(REFUSALS, reason="loop_lag")
            assert refused >= 1
            trx.busy(False)
            assert await wait_until(lambda: trx.metric(overloaded) == 0, 20)
            assert trx.http("/readyz")[0] == 200, "ready again"
            status, _, _ = await post(trx.url, await make_offer())
            assert status == 201, "the load is gone: admitted again"

        run(go(), 90)
    finally:
        trx.busy(False)
        trx.stop()


UTILIZATION = "rtcedge_transceiver_session_utilization"


def test_a_full_transceiver_is_not_ready_and_keeps_its_calls():
    """At --max-sessions the pod leaves the signaling Service (/readyz 503) while its calls go
    on through the relay; the utilization gauge an autoscaler reads says how full it is."""
    relay = RelayProcess({}, workers=1)
    trx = TransceiverProcess(relay, extra_args=["--max-sessions", "2"])
    relay.transceivers = {0: trx.media_address}

    async def go():
        assert trx.http("/readyz")[0] == 200 and trx.metric(UTILIZATION) == 0
        calls = [asyncio.create_task(run_client(trx.url, hz, seconds=4)) for hz in (440, 660)]
        connected = "rtcedge_transceiver_dtls_connected_seconds_count"
        assert await wait_until(lambda: trx.metric(connected) == 2, 15), "both calls are live"
        assert trx.metric(UTILIZATION) == 1.0
        status, text = trx.http("/readyz")
        assert status == 503 and text == "session limit reached\n", text
        status, text, _ = await post(trx.url, await make_offer())
        assert status == 503 and "limit" in text, "admission refuses as readiness says"
        results = await asyncio.gather(*calls)
        for result in results:  # the calls kept their media while the pod was not ready
            assert result.connected and not result.error, result.error
            assert result.frames_with_own_tone > 0, result
        assert await wait_until(lambda: trx.metric(UTILIZATION) == 0, 10), "both hung up"
        assert trx.http("/readyz")[0] == 200, "ready again once there is room"

    with relay, trx:
        run(go(), 60)
