"""Session resources reachable from any transceiver (docs/transceiver.md, "Session resources
from any pod"), with real processes: a relay, three transceivers that know each other's WHIP
ports (--peer-http), a round-robin HTTP front the test runs, and real aiortc callers.

- A DELETE through the front ends the right call, whichever transceiver it lands on: the owner
  when it lands there, else passed on to the owner by the one it landed on.
- A forged, a tampered and a malformed id, and the id of an ended session, are 404 everywhere
  and counted; a request that claims to be forwarded already is not passed on again (404).
- Owner gone (nothing listens at its address), owner too slow, too many forwards at once:
  in-process transceivers on real loopback sockets.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import replace

import aiohttp
import pytest

from common.hint import Keyring
from common.sessionid import sign_session_id, verify_session_id
from testbed.callers import EchoCaller
from testbed.fleet import migrating_fleet
from testbed.front import RoundRobinFront
from testbed.ports import free_port
from testbed.processes import RelayProcess, started_in_order
from tests.support.inprocess import direct_config, running
from tests.support.waits import run, wait_until
from tests.support.whip import make_offer, post
from transceiver.ownership import FORWARDED_HEADER

ACTIVE = "rtcedge_transceiver_sessions_active"
ENDED = "rtcedge_transceiver_sessions_ended_total"
REFUSED = "rtcedge_transceiver_session_requests_refused_total"
FORWARDED = "rtcedge_transceiver_session_requests_forwarded_total"


@pytest.fixture(scope="module")
def fleet():
    """A relay and transceivers 0, 1, 2, each told every transceiver's WHIP address (its own
    entry is ignored: one list for all, as the chart gives them)."""
    relay = RelayProcess({}, workers=1, pin=False, cluster=1)
    # Offers that never connect (the 404 tests) stay for the test's span.
    trxs = migrating_fleet(relay, 3, migrate_deadline_s=6.0, drain_grace_s=0,
                           extra_args=["--first-check-timeout", "60",
                                       "--ice-timeout", "60"])  # fmt: skip
    with started_in_order(relay, *trxs):
        yield relay, trxs


def owner_of(relay: RelayProcess, location: str) -> int:
    return verify_session_id(relay.keyring, location.rsplit("/", 1)[1], time.time(), 600).owner[1]


async def delete(url: str, path: str, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as http, http.delete(url + path, headers=headers) as r:
        return r.status


def test_delete_through_the_front_ends_the_right_call_wherever_it_lands(fleet):
    relay, trxs = fleet

    async def go():
        front = RoundRobinFront([t.url for t in trxs])
        url = await front.start()
        callers: list[EchoCaller] = []
        try:
            for _ in trxs:  # one after another: round robin puts one call on each
                caller = EchoCaller()
                callers.append(caller)
                await caller.connect(url)
            owners = [owner_of(relay, c.location) for c in callers]
            assert sorted(owners) == [0, 1, 2], owners
            forwarded_before = sum(t.metric(FORWARDED, method="DELETE") for t in trxs)
            landings = []
            # Reversed: the front's next turns are 0, 1, 2, so two DELETEs land on a transceiver
            # that does not own the call and one on its owner.
            for caller, owner in reversed(list(zip(callers, owners, strict=True))):
                active = [t.metric(ACTIVE) for t in trxs]
                ended = trxs[owner].metric(ENDED, reason="deleted")
                assert await delete(url, caller.location) == 200
                landings.append((front.landed[-1][2], owner))
                # Answered once the end started: the teardown finishes in the background.
                assert await wait_until(
                    lambda o=owner, e=ended: trxs[o].metric(ENDED, reason="deleted") == e + 1
                )
                expected = [a - (t.tid == owner) for a, t in zip(active, trxs, strict=True)]
                assert [t.metric(ACTIVE) for t in trxs] == expected, "only the owner's call ends"
                assert await wait_until(lambda c=caller: c.pc.connectionState != "connected")
                for other in callers[: callers.index(caller)]:  # the others go on
                    assert other.pc.connectionState == "connected"
                    assert await other.wait_for_echo(time.monotonic(), 10)
            elsewhere = sum(landed != owner for landed, owner in landings)
            assert elsewhere == 2 and len(landings) == 3, landings
            forwarded = sum(t.metric(FORWARDED, method="DELETE") for t in trxs)
            assert forwarded - forwarded_before == elsewhere
        finally:
            await asyncio.gather(*(c.pc.close() for c in callers))
            await front.close()

    run(go())


def test_forged_tampered_malformed_and_ended_ids_are_404_everywhere_and_counted(fleet):
    relay, trxs = fleet

    def refused(reason: str) -> float:
        return sum(t.metric(REFUSED, reason=reason) for t in trxs)

    async def go():
        front = RoundRobinFront([t.url for t in trxs])
        url = await front.start()
        try:
            status, _, headers = await post(url, await make_offer())  # need not connect
            assert status == 201
            location = headers["Location"]
            resource = location.rsplit("/", 1)[1]
            owner = owner_of(relay, location)
            assert await delete(url, location) == 200
            forged = sign_session_id(Keyring.generate(1), 1, owner, time.time(), "ab" * 16)
            i = 20  # a character of the call id: the tag no longer matches
            tampered = resource[:i] + ("A" if resource[i] != "A" else "B") + resource[i + 1 :]
            cases = [
                (f"/whip/{forged}", "bad_tag"),
                (f"/whip/{tampered}", "bad_tag"),
                ("/whip/0123456789abcdef0123456789abcdef", "malformed"),
                (location, "no_session"),  # ended: answered by its owner, wherever it landed
            ]
            for path, reason in cases:
                before = refused(reason)
                for _ in trxs:  # through the front: once on each transceiver
                    assert await delete(url, path) == 404, (path, reason)
                assert refused(reason) - before == len(trxs), reason
            assert sum(t.metric(ACTIVE) for t in trxs) == 0
        finally:
            await front.close()

    run(go())


def test_a_request_already_forwarded_is_not_passed_on_again(fleet):
    _, trxs = fleet

    async def go():
        status, _, headers = await post(trxs[1].url, await make_offer())
        assert status == 201
        location = headers["Location"]
        try:
            looped = trxs[0].metric(REFUSED, reason="looped")
            marked = {FORWARDED_HEADER: "2"}
            assert await delete(trxs[0].url, location, marked) == 404
            assert trxs[0].metric(REFUSED, reason="looped") == looped + 1
            assert trxs[1].metric(ACTIVE) == 1, "the call is untouched"
            # A PATCH landing elsewhere: the owner's 405, passed back.
            async with (
                aiohttp.ClientSession() as http,
                http.patch(trxs[2].url + location, data="x") as r,
            ):
                assert r.status == 405 and "DELETE" in r.headers["Allow"]
                assert "ICE restart" in await r.text()
            # The same header at the owner itself: nothing to pass on, it answers.
            assert await delete(trxs[1].url, location, marked) == 200
        finally:
            await delete(trxs[1].url, location)

    run(go())


def test_owner_gone_slow_or_too_many_forwards_are_refused_and_counted():
    """In-process: a peer address where nothing listens (404 owner_gone: a transceiver that is
    not there has no calls), a peer that accepts and never answers (503 owner_failed after
    --peer-timeout), and a second forward while one is under way with --peer-max-forwards 1
    (503 busy)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts, never answers
    silent.setblocking(False)
    held: list[socket.socket] = []

    def connected() -> bool:
        try:
            held.append(silent.accept()[0])
        except BlockingIOError:
            return False
        return True

    nobody = free_port(kind=socket.SOCK_STREAM)
    cfg = direct_config(
        peer_http=((1, ("127.0.0.1", nobody)), (2, silent.getsockname())),
        peer_timeout_s=1.0,
        peer_max_forwards=1,
    )

    async def go():
        async with running(cfg) as (server, url):
            m = server.metrics.session_requests_refused

            def sid(tid: int) -> str:
                return "/whip/" + sign_session_id(server.keyring, 0, tid, time.time(), "cd" * 16)

            assert await delete(url, sid(1)) == 404
            assert m.labels("owner_gone")._value.get() == 1
            slow = asyncio.ensure_future(delete(url, sid(2)))
            assert await wait_until(connected, 5), "the first forward reached the silent peer"
            async with aiohttp.ClientSession() as http, http.delete(url + sid(2)) as r:
                assert r.status == 503 and r.headers["Retry-After"]
            assert m.labels("busy")._value.get() == 1
            assert await slow == 503
            assert m.labels("owner_failed")._value.get() == 1
            assert await delete(url, sid(7)) == 404, "no address for transceiver 7"
            assert m.labels("no_peer")._value.get() == 1

    try:
        run(go())
    finally:
        for sock in (*held, silent):
            sock.close()


def test_a_token_guarded_delete_is_checked_then_passed_on_with_its_token():
    """Two in-process transceivers with one keyring and a static token: the one a DELETE lands
    on refuses it without the token (401, nothing forwarded) and passes it on with it."""
    ring = Keyring.generate(0).to_json()
    common = {"keyring_json": ring, "auth_token": "t" * 32, "first_check_timeout_s": 60.0}
    a = direct_config(transceiver_id=0, **common)
    b = direct_config(transceiver_id=1, **common)
    a = replace(a, peer_http=((1, b.http),))
    bearer = {"Authorization": "Bearer " + "t" * 32}

    async def go():
        async with running(a) as (_, url_a), running(b) as (server_b, url_b):
            status, _, headers = await post(
                url_b, await make_offer(), {"Content-Type": "application/sdp", **bearer}
            )
            assert status == 201
            assert await delete(url_a, headers["Location"]) == 401
            assert len(server_b.sessions) == 1
            assert await delete(url_a, headers["Location"], bearer) == 200
            assert await wait_until(lambda: not server_b.sessions), "ended in the background"

    run(go())
