"""A call moved to another live relay: the transceiver's replies follow the newest path.

A load balancer or ECMP change can steer a client's packets to another node's relay while the
first one stays up. The client's address is unchanged; the new relay restores the flow from
Redis and the transceiver must answer through it at once (and never keep sending through the
relay the client left). Real processes: redis-server, two relays, a transceiver, an aiortc
caller behind a loopback proxy that plays the load balancer.
"""

from __future__ import annotations

import asyncio
import time

from testbed.callers import EchoCaller
from testbed.nat import NatProxy
from testbed.processes import RedisServer, RelayProcess, TransceiverProcess
from tests.support.waits import run, wait_until

TO_CLIENT = {"direction": "transceiver_to_client"}


def test_replies_follow_the_call_to_another_live_relay():
    with RedisServer() as rds:
        first = RelayProcess({}, workers=1, extra_args=["--redis-url", rds.url])
        second = RelayProcess(
            {}, workers=1, keyring=first.keyring, cluster=first.cluster,
            extra_args=["--redis-url", rds.url],
        )  # fmt: skip
        proxy = NatProxy(first.address)
        trx = TransceiverProcess(first, advertise=proxy.address)
        first.transceivers = second.transceivers = {0: trx.media_address}

        async def go() -> None:
            caller = EchoCaller()
            await caller.connect(trx.url)
            pc, echo = caller.pc, caller.echo
            assert await echo.wait(0.0, 50, 10), "echo flows through the first"

            for there, left in ((second, first), (first, second)):
                moved_at = time.monotonic()
                proxy.upstream = there.address
                assert await echo.wait(moved_at, 25, 5), (
                    "echo resumed through the relay it moved to"
                )
                # The relay left behind carries nothing more toward the client: the transceiver
                # answers along the newest path only. (Packet counters move as packets go; only
                # the flow counters wait for the relay's one-second tick.)
                before = left.metric("rtcedge_relay_packets_total", **TO_CLIENT)
                now_there = there.metric("rtcedge_relay_packets_total", **TO_CLIENT)
                await asyncio.sleep(1.2)  # a second of the call
                assert left.metric("rtcedge_relay_packets_total", **TO_CLIENT) == before
                assert there.metric("rtcedge_relay_packets_total", **TO_CLIENT) > now_there + 25
            assert await wait_until(
                lambda: second.metric("rtcedge_relay_flows_restored_total", source="redis") == 1
            )
            assert trx.metric("rtcedge_transceiver_sessions_started_total") == 1
            assert trx.metric("rtcedge_transceiver_sessions_active") == 1, "one session all along"
            await pc.close()

        with first, second, trx:
            proxy.start()
            try:
                run(go(), timeout_s=60)
            finally:
                proxy.close()
