"""Admission by load in a real process: a transceiver whose own CPU and event loop are loaded
refuses new sessions with 503 + Retry-After, and takes them again once the load is gone."""

from __future__ import annotations

from pathlib import Path

from bench.peers import RelayProcess
from tests.support.busy_transceiver import BusyTransceiverProcess
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
            assert int(headers["Retry-After"]) > 0
            refused = trx.metric(REFUSALS, reason="cpu") + trx.metric(REFUSALS, reason="loop_lag")
            assert refused >= 1
            trx.busy(False)
            assert await wait_until(lambda: trx.metric(overloaded) == 0, 20)
            status, _, _ = await post(trx.url, await make_offer())
            assert status == 201, "the load is gone: admitted again"

        run(go(), 90)
    finally:
        trx.busy(False)
        trx.stop()
