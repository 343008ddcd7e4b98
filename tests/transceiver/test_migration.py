"""Scale-down that moves calls (docs/transceiver.md, "Moving calls on scale-down"), with real
processes: a relay, three transceivers that know each other's WHIP ports (--peer-http), a
round-robin HTTP front the test runs, and real aiortc callers.

SIGTERM the transceiver carrying calls: every caller that supports ``session.migrate``
continues on another transceiver with the same call id (the echo backend's
``session.started`` on the new connection says so, resumed) and hears its echo there; a caller
that ignores the event drains as before (its call lasts the drain grace). A replayed and a
tampered token are refused and counted. The owner's claim endpoint answers peers only.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from common.sessionid import verify_session_id
from testbed.callers import EchoCaller
from testbed.fleet import migrating_fleet
from testbed.front import RoundRobinFront
from testbed.processes import RelayProcess, TransceiverProcess, started_in_order
from tests.support.inprocess import direct_config, running
from tests.support.waits import run, wait_until
from tests.support.whip import SDP, make_offer
from transceiver.ownership import CLAIM_PATH, FORWARDED_HEADER, RESUME_HEADER

GRACE_S = 10.0  # the drain grace: a caller that does not move keeps its call this long
DEADLINE_S = 6.0  # --migrate-deadline
FAILED = "rtcedge_transceiver_migrations_failed_total"
ENDED = "rtcedge_transceiver_sessions_ended_total"


@pytest.fixture
def fleet():
    """A relay and transceivers 0, 1, 2, each told every transceiver's WHIP address."""
    relay = RelayProcess({}, workers=1, pin=False, cluster=1)
    trxs = migrating_fleet(relay, 3, DEADLINE_S, GRACE_S)
    with started_in_order(relay, *trxs):
        yield relay, trxs


def call_of(relay: RelayProcess, location: str) -> tuple[int, str]:
    """(owner transceiver id, call id) that a WHIP Location names."""
    sid = verify_session_id(relay.keyring, location.rsplit("/", 1)[1], time.time(), 600)
    return sid.transceiver_id, sid.call_id


async def post_resume(url: str, token: str, attempts: int = 6) -> tuple[int, str]:
    """A resume offer through the front, again after a 503 (a draining pod) as a client does."""
    offer = await make_offer()
    async with aiohttp.ClientSession() as http:
        for _ in range(attempts):
            async with http.post(
                f"{url}/whip", data=offer, headers={**SDP, RESUME_HEADER: token}
            ) as r:
                if r.status != 503:
                    return r.status, await r.text()
                await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
    return 503, "still refused"


def settled(caller: EchoCaller) -> bool:
    return bool(caller.moves) and caller.moves[-1].outcome != "under way"


def metric_sum(trxs: list[TransceiverProcess], name: str, **labels: str) -> float:
    return sum(t.metric(name, **labels) for t in trxs if t.proc and t.proc.poll() is None)


def test_sigterm_moves_every_migrating_call_and_drains_the_others(fleet):
    relay, trxs = fleet

    async def go():
        front = RoundRobinFront([t.url for t in trxs])
        url = await front.start()
        movers = [EchoCaller(migrate=True, hz=440), EchoCaller(migrate=True, hz=660)]
        stayer = EchoCaller(events=True, hz=880)  # hears session.migrate, does nothing
        callers = [*movers, stayer]
        try:
            for caller in callers:  # all on transceiver 0: the front's turn is back at 0
                await caller.connect(url)
                for _ in trxs[1:]:
                    async with aiohttp.ClientSession() as http:
                        await (await http.get(f"{url}/readyz")).release()
            before = [call_of(relay, c.location) for c in callers]
            assert [owner for owner, _ in before] == [0, 0, 0], before
            victim = trxs[0]
            assert victim.proc is not None
            victim.proc.terminate()  # SIGTERM: drain, and ask callers to move
            assert await wait_until(lambda: all(settled(c) for c in movers), 20), [
                c.moves for c in movers
            ]
            for caller, (_, call_id) in zip(movers, before, strict=False):
                move = caller.moves[-1]
                assert move.outcome == "moved", move
                owner, new_call_id = call_of(relay, caller.location)
                assert owner in (1, 2) and new_call_id == call_id, (owner, new_call_id, call_id)
                started = [e for e in caller.events if e.get("type") == "session.started"]
                assert started[-1] == {
                    "type": "session.started",
                    "session_id": call_id,
                    "resumed": True,
                }, started
                assert caller.pc.connectionState == "connected"
                assert await caller.wait_for_echo(time.monotonic(), 10), "audio on the new call"
            assert metric_sum(trxs[1:], "rtcedge_transceiver_migrations_resumed_total") == 2
            # The old calls ended as moved, once their callers hung them up; the victim still
            # drains: the caller that did not move keeps its call for the grace period.
            assert await wait_until(lambda: victim.metric(ENDED, reason="migrated") == 2, 10)
            assert victim.metric("rtcedge_transceiver_migrations_completed_total") == 2
            assert victim.metric("rtcedge_transceiver_migrations_offered_total") == 3
            assert any(e.get("type") == "session.migrate" for e in stayer.events)
            assert not stayer.moves and stayer.pc.connectionState == "connected"
            assert await stayer.wait_for_echo(time.monotonic(), 5), "drains as today"

            # A used token, replayed through the front: refused wherever it lands (the owner
            # answers its claim once), and counted.
            token = next(e for e in movers[0].events if e.get("type") == "session.migrate")
            token = token["resume_token"]
            replayed = metric_sum(trxs[1:], FAILED, reason="replayed")
            assert await post_resume(url, token) == (409, "resume token already used\n")
            assert metric_sum(trxs[1:], FAILED, reason="replayed") == replayed + 1
            i = 20  # a character of the call id: the tag no longer matches
            tampered = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]
            assert await post_resume(url, tampered) == (400, "invalid resume token\n")
            assert metric_sum(trxs[1:], FAILED, reason="bad_tag") == 1
            assert sum(t.metric("rtcedge_transceiver_sessions_active") for t in trxs[1:]) == 2

            # The grace ends: the call that did not move ends with the process, as before.
            ended = await asyncio.to_thread(victim.proc.wait, GRACE_S + 10)
            assert ended == 0
            assert await wait_until(lambda: stayer.pc.connectionState != "connected", 40)
            for caller in movers:  # the moved calls go on
                assert await caller.wait_for_echo(time.monotonic(), 5)
        finally:
            await asyncio.gather(*(c.close() for c in callers), return_exceptions=True)
            await front.close()

    run(go(), timeout_s=120)


def test_the_claim_endpoint_answers_peers_only_and_a_token_once():
    """In-process: a claim without the hop header is 404 (a client never calls it); with it,
    a token that does not verify is 400 and one for a call that was never offered 404."""
    from common.resumetoken import sign_resume_token

    cfg = direct_config()

    async def go():
        async with running(cfg) as (server, url), aiohttp.ClientSession() as http:
            token = sign_resume_token(server.keyring, 0, 3, time.time() + 5, "ab" * 16, bytes(9))
            cases = [
                ({RESUME_HEADER: token}, 404),
                ({FORWARDED_HEADER: "1"}, 404),
                ({FORWARDED_HEADER: "1", RESUME_HEADER: token[:-1] + "x"}, 400),
                ({FORWARDED_HEADER: "1", RESUME_HEADER: token}, 404),  # no such call here
            ]
            for headers, status in cases:
                async with http.post(url + CLAIM_PATH, headers=headers) as r:
                    assert r.status == status, (headers.keys(), await r.text())

    run(go())
