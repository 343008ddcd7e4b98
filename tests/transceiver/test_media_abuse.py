"""Garbage on the media socket, raw and encapsulated, of every length: dropped and harmless."""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import select
import socket

from common import encap, stun
from tests.support.inprocess import direct_config, running
from tests.support.tone_call import run_client
from tests.support.waits import run, wait_until
from transceiver.socket.demux import MAX_ADDRESSES

FIRST_BYTES = [0, 1, 2, 3, 20, 22, 63, 128, 144, 191, 255]


def connected(server) -> bool:  # type: ignore[no-untyped-def]
    """DTLS is up for one of the server's sessions: its call carries media."""
    return any(s.lifecycle.dtls_connected_at for s in server.sessions.values())


def all_read(server) -> bool:  # type: ignore[no-untyped-def]
    """Nothing waits in the media socket: the server has read every datagram sent before."""
    media = server.media.transport.get_extra_info("socket")
    return not select.select([media], [], [], 0)[0]


def garbage(rng: random.Random):  # type: ignore[no-untyped-def]
    for first in FIRST_BYTES:
        for length in range(0, 1501):
            yield (bytes([first]) + rng.randbytes(length))[:length]


async def live_call(server, url: str, seconds: float):  # type: ignore[no-untyped-def]
    """A real caller for ``seconds`` (its task), once connected: its session and client address."""
    call = asyncio.create_task(run_client(url, 440, seconds=seconds))
    assert await wait_until(lambda: connected(server), 10)
    session = next(iter(server.sessions.values()))
    return call, session, server.demux.path(session.ufrag).client


def test_garbage_from_anywhere_is_dropped_and_a_live_call_goes_on(caplog):
    caplog.set_level(logging.ERROR)

    async def go() -> None:
        cfg = direct_config()
        async with running(cfg) as (server, url):
            call, _session, client = await live_call(server, url, seconds=4)
            attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            attacker.bind(("127.0.0.1", 0))
            attacker.setblocking(False)
            rng = random.Random(3)
            sent = 0
            for payload in garbage(rng):
                # raw from an unknown address, and encapsulated claiming to be the live client
                for datagram in (payload, encap.encapsulate(payload, *client)):
                    try:
                        attacker.sendto(datagram, cfg.media)
                        sent += 1
                    except BlockingIOError:
                        await asyncio.sleep(0.001)
                if sent % 200 == 0:
                    await asyncio.sleep(0.005)  # let the server read: every datagram must land
            result = await call
            assert result.connected and not result.error, result.error
            assert result.frames_with_own_tone >= 0.5 * result.frames_expected, "the call went on"
            samples = server.metrics.dropped.collect()[0].samples
            dropped = sum(x.value for x in samples if x.name.endswith("_total"))
            assert dropped >= sent // 2, "every raw datagram from the unknown address was dropped"
            attacker.close()

    run(go(), timeout_s=90)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) <= 3, "no traceback spam"


def test_encapsulated_datagrams_from_outside_the_relay_networks_are_refused():
    async def go() -> None:
        cfg = direct_config(relay_networks=("127.0.0.2/32",))
        async with running(cfg) as (server, _):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.sendto(encap.encapsulate(b"\x80x", "198.51.100.1", 5000), cfg.media)
            refused = server.metrics.dropped.labels("relay_not_allowed")._value.get
            assert await wait_until(lambda: refused() == 1, 1)
            s.close()

    run(go())


def test_one_session_cannot_grow_its_state_with_checks_from_many_ports():
    """Finding 3 of the hardening issue: 2000 correctly signed checks from new ports of one host
    (whoever holds the session's credentials: its own caller) used to leave 2000 addresses in
    aioice's check list, each making every later check slower on the loop all calls share.
    The demultiplexer keeps a handful per session and aioice forgets what it forgets."""

    async def go() -> None:
        cfg = direct_config()
        async with running(cfg) as (server, url):
            call, session, client = await live_call(server, url, seconds=5)
            username = f"{session.ufrag}:attacker"
            key = session.ice.local_password.encode()
            attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            attacker.bind(("127.0.0.1", 0))
            for port in range(20000, 22000):  # as a relay would forward them: one per port
                check = stun.binding_request(username, secrets.token_bytes(12), key)
                attacker.sendto(encap.encapsulate(check, "127.0.0.9", port), cfg.media)
                if port % 50 == 0:
                    await asyncio.sleep(0.01)
            assert await wait_until(lambda: all_read(server)), "the server read every check"
            assert server.demux.addresses <= MAX_ADDRESSES
            assert len(session.ice._check_list) <= MAX_ADDRESSES
            assert len(session.ice.remote_candidates) <= MAX_ADDRESSES
            assert server.demux.path(session.ufrag).client == client, "media stayed with the call"
            result = await call
            assert result.connected and not result.error, result.error
            assert result.frames_with_own_tone >= 0.5 * result.frames_expected, "the call went on"
            attacker.close()

    run(go(), timeout_s=90)
