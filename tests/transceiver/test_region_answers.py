"""Region-aware answers with real processes: a transceiver behind a real relay answers WHIP
offers with its region's relay addresses (from the trusted region header or the client's
prefix), counts sessions by region, and a call whose preferred candidate is dead connects
through the backup (the cluster's relay).

Loopback plays the world: the test's HTTP client is 127.0.0.1, the trusted proxy, so the
region header and X-Forwarded-For are believed; from 127.0.0.2 they are not. Region ``eu``
advertises an unused loopback port first (an edge that is down), then the real relay.
"""

from __future__ import annotations

import re

import aiohttp
import pytest
from aioice.ice import CandidatePair

from common.config import format_host_port
from testbed.callers import EchoCaller
from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.waits import run
from tests.support.whip import SDP, make_offer

DEAD = ("127.0.0.1", free_port())  # nothing listens here: the region's edge is down
US = [("127.0.0.2", 4000), ("127.0.0.3", 4001)]  # only advertised: no call goes there


@pytest.fixture(scope="module")
def stack():
    relay = RelayProcess({}, workers=1)
    us = ",".join(format_host_port(*a) for a in US)
    trx = TransceiverProcess(
        relay,
        extra_args=[
            "--region", f"eu={format_host_port(*DEAD)}",
            "--region", f"us={us}",
            "--region-header", "X-Region",
            "--region-prefix", "10.0.0.0/8=us",
            "--region-prefix", "10.1.0.0/16=eu",  # longer: wins inside 10/8
            "--region-prefix", "127.0.0.1/32=eu",  # the aiortc caller below
            "--trusted-proxy", "127.0.0.1/32",
            "--client-rate", "0",
        ],
    )  # fmt: skip
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        yield relay, trx


def candidates(sdp: str) -> list[tuple[tuple[str, int], int]]:
    """((host, port), priority) of each a=candidate line of the first m-line (BUNDLE: every
    m-line repeats them), in the answer's order."""
    first = sdp.split("\r\nm=")[1]
    found = re.findall(r"a=candidate:\S+ 1 udp (\d+) (\S+) (\d+) typ host", first, re.I)
    return [((host, int(port)), int(priority)) for priority, host, port in found]


async def offer_from(url: str, headers: dict[str, str], source: str = "127.0.0.1") -> str:
    """POST an aiortc offer from ``source`` with extra ``headers``: the answer, session ended."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.post(f"{url}/whip", data=await make_offer(), headers=SDP | headers) as r:
            answer = await r.text()
            assert r.status == 201, answer
            location = r.headers["Location"]
        async with http.delete(f"{url}{location}") as r:
            assert r.status == 200
    return answer


def test_answers_advertise_the_region_s_relays_in_order_and_sessions_count_by_region(stack):
    relay, trx = stack
    eu, us, default = [DEAD, relay.address], [*US, relay.address], [relay.address]
    cases = [  # (headers, HTTP source, what the answer advertises, the region counted)
        ({"X-Region": "eu"}, "127.0.0.1", eu, "eu"),
        ({"X-Region": "US", "X-Forwarded-For": "10.1.0.1"}, "127.0.0.1", us, "us"),
        ({"X-Forwarded-For": "10.1.2.3"}, "127.0.0.1", eu, "eu"),  # the longest prefix
        ({"X-Forwarded-For": "10.9.9.9"}, "127.0.0.1", us, "us"),
        ({"X-Region": "mars", "X-Forwarded-For": "10.2.0.1"}, "127.0.0.1", us, "us"),
        ({"X-Forwarded-For": "192.0.2.1"}, "127.0.0.1", default, "default"),
        # From 127.0.0.2 (no trusted proxy) neither header is believed: 127.0.0.2 is in no
        # prefix, so the answer names --advertise alone.
        ({"X-Region": "eu", "X-Forwarded-For": "10.1.2.3"}, "127.0.0.2", default, "default"),
    ]
    before = {r: trx.metric("rtcedge_transceiver_region_sessions_total", region=r) for r in
              ("eu", "us", "default")}  # fmt: skip

    async def go() -> None:
        for headers, source, expected, _ in cases:
            answer = await offer_from(trx.url, headers, source)
            found = candidates(answer)
            assert [address for address, _ in found] == expected, (headers, source)
            priorities = [priority for _, priority in found]
            assert priorities == sorted(priorities, reverse=True), "first = most preferred"
            assert len(set(priorities)) == len(priorities), "strictly decreasing"
            assert f"c=IN IP4 {expected[0][0]}" in answer

    run(go())
    for region in ("eu", "us", "default"):
        counted = trx.metric("rtcedge_transceiver_region_sessions_total", region=region)
        assert counted - before[region] == sum(1 for *_, r in cases if r == region), region


def test_a_call_whose_preferred_edge_is_down_connects_through_the_backup_relay(stack):
    relay, trx = stack

    async def go() -> None:
        caller = EchoCaller()
        await caller.connect(trx.url)  # from 127.0.0.1: region eu, DEAD first
        assert await caller.echo.wait(0.0, 25, 10), "the echo comes back"
        answer = caller.pc.remoteDescription.sdp
        assert [address for address, _ in candidates(answer)] == [DEAD, relay.address]
        ice = caller.pc.getTransceivers()[0].sender.transport.transport._connection
        nominated = ice._nominated[1]
        assert nominated.remote_addr == relay.address, "the backup carries the call"
        tried = [p for p in ice._check_list if p.remote_addr == DEAD]
        assert tried and all(p.state != CandidatePair.State.SUCCEEDED for p in tried)
        await caller.pc.close()

    run(go())
    assert relay.metric("rtcedge_relay_packets_total", direction="transceiver_to_client") > 10
