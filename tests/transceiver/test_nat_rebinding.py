"""A caller whose address and port change mid-call (NAT rebinding) keeps its session."""

from __future__ import annotations

import asyncio
import time

from testbed.callers import EchoCaller
from testbed.nat import NatProxy
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.waits import run, wait_for


def test_nat_rebinding_keeps_the_session_and_media_resumes_within_a_consent_interval():
    # Short lifetimes, so the test sees the old address expire on both sides.
    relay = RelayProcess({}, workers=1, extra_args=["--idle-ttl", "4"])
    proxy = NatProxy(relay.address)
    trx = TransceiverProcess(relay, advertise=proxy.address, extra_args=["--address-ttl", "2"])
    relay.transceivers = {0: trx.media_address}

    async def go() -> None:
        caller = EchoCaller()
        await caller.connect(trx.url)
        pc, echo = caller.pc, caller.echo
        assert await echo.wait(0.0, 50, 10), "echo flows before the rebinding"
        old_outside = proxy.outside_address
        moved_at = time.monotonic()
        new_outside = proxy.rebind()
        assert new_outside[0] != old_outside[0] and new_outside[1] != old_outside[1]
        await echo.wait(moved_at + 0.2, 1, 10)
        resumed = [t for t in echo.times if t > moved_at + 0.2]
        assert resumed, "media resumed after the rebinding"
        gap = resumed[0] - moved_at
        # The client's next consent check (every 4-6 s) re-creates the path through the relay;
        # allow for one lost or late check on this shared machine.
        assert gap < 12.0, f"resumed at the client's next consent check, took {gap:.1f} s"
        await asyncio.sleep(1.0)
        assert trx.metric("rtcedge_transceiver_sessions_started_total") == 1
        assert trx.metric("rtcedge_transceiver_sessions_active") == 1, "the same session went on"
        # The relay saw the client at its new address as a new, confirmed flow.
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_flows_created_total", table="confirmed"), 2
        )
        # The old address expires: the relay drops its flow after the idle TTL, the transceiver
        # forgets it once silent for --address-ttl; the call goes on at the new one.
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_flows_expired_total", table="confirmed"), 1, 10
        )
        assert relay.metric("rtcedge_relay_flows_active", table="confirmed") == 1
        assert wait_for(lambda: trx.metric("rtcedge_transceiver_client_addresses"), 1, 5)
        assert await echo.wait(time.monotonic(), 25, 5), "media still flows"
        await pc.close()

    with relay, trx:
        proxy.start()
        try:
            run(go(), timeout_s=60)
        finally:
            proxy.close()
