"""A hung owner against the peer forwarder (issue 21, item 6): what a legitimate DELETE gets.

``rtcedge bench forward-abuse`` runs two transceiver processes on loopback: 0 takes the
requests, 1 owns real sessions; "transceiver 2" is a TCP listener that accepts and never answers.
An attacker sends DELETEs of ids owned by 2 (a burst of ``--burst``, then ``--rate`` per second,
from 20 client addresses via X-Forwarded-For) for ``--seconds``; meanwhile, and in a phase
without the attack just before, a legitimate client DELETEs sessions of 1 through 0, one every
200 ms. Printed: the legitimate DELETEs' statuses and answer times (median, max) in each phase,
and the attacker's statuses. Bounded: ``--seconds`` (<= 30) per phase, at most
``--burst + rate x seconds`` attacking requests.
"""

from __future__ import annotations

import asyncio
import collections
import json
import socket
import statistics
import time

import aiohttp
import click

from bench.offer_abuse import SDP_HEADERS, normal_offer
from common.config import format_host_port
from common.sessionid import sign_session_id
from testbed.callers import loopback_only
from testbed.processes import NO_LOAD_GATE, RelayProcess, TransceiverProcess, started_in_order

LEGIT_EVERY_S = 0.2
KEEP_SESSIONS = ["--first-check-timeout", "60", "--ice-timeout", "60", "--client-rate", "0",
                 *NO_LOAD_GATE]  # fmt: skip


async def legit_deletes(owner: str, front: str, seconds: float) -> list[tuple[int, float]]:
    """Sessions made at the owner and DELETEd through the front, one every LEGIT_EVERY_S:
    (status, ms to the answer) each."""
    offer = await normal_offer()
    results: list[tuple[int, float]] = []
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.post(f"{owner}/whip", data=offer, headers=SDP_HEADERS) as r:
                location = r.headers.get("Location", "")
            started = time.monotonic()
            async with http.delete(front + location, headers={"X-Forwarded-For": "192.0.2.9"}) as r:
                await r.read()
                results.append((r.status, (time.monotonic() - started) * 1000))
            await asyncio.sleep(LEGIT_EVERY_S)
    return results


async def attack(front: str, relay: RelayProcess, burst: int, rate: float, seconds: float):
    """DELETEs of ids the hung owner owns: ``burst`` at once, then ``rate`` per second."""
    statuses: collections.Counter[int] = collections.Counter()
    timeout = aiohttp.ClientTimeout(total=30)

    async def one(http: aiohttp.ClientSession, i: int) -> None:
        sid = sign_session_id(relay.keyring, relay.cluster, 2, time.time(), "ab" * 16)
        headers = {"X-Forwarded-For": f"10.0.{i % 20}.1"}
        try:
            async with http.delete(f"{front}/whip/{sid}", headers=headers) as r:
                statuses[r.status] += 1
        except (aiohttp.ClientError, TimeoutError):
            statuses[0] += 1

    async with aiohttp.ClientSession(timeout=timeout) as http:
        tasks = [asyncio.ensure_future(one(http, i)) for i in range(burst)]
        deadline = time.monotonic() + seconds
        i = burst
        while time.monotonic() < deadline:
            await asyncio.sleep(1 / rate)
            tasks.append(asyncio.ensure_future(one(http, i)))
            i += 1
        await asyncio.gather(*tasks)
    return dict(statuses)


def summary(results: list[tuple[int, float]]) -> dict:
    times = [ms for _, ms in results]
    return {
        "deletes": len(results),
        "statuses": dict(collections.Counter(status for status, _ in results)),
        "ms_median": round(statistics.median(times), 1) if times else None,
        "ms_max": round(max(times), 1) if times else None,
    }


async def run_bench(owner, front, relay, burst: int, rate: float, seconds: float) -> dict:
    quiet = await legit_deletes(owner.url, front.url, seconds)
    attacking = asyncio.ensure_future(attack(front.url, relay, burst, rate, seconds))
    await asyncio.sleep(0.5)  # the burst is under way
    during = await legit_deletes(owner.url, front.url, seconds - 0.5)
    return {
        "without_attack": summary(quiet),
        "with_attack": summary(during),
        "attacker_statuses": await attacking,
        "attack": {"burst": burst, "rate_per_s": rate, "seconds": seconds},
    }


@click.command("forward-abuse")
@click.option("--burst", type=click.IntRange(1, 200), default=40, show_default=True,
              help="Attacking DELETEs sent at once first.")  # fmt: skip
@click.option("--rate", type=click.FloatRange(0.5, 50), default=7.0, show_default=True,
              help="Attacking DELETEs per second after the burst.")  # fmt: skip
@click.option("--seconds", type=click.FloatRange(2, 30), default=8.0, show_default=True,
              help="Length of each phase (without, then with the attack).")  # fmt: skip
def forward_abuse_bench(burst: int, rate: float, seconds: float) -> None:
    """DELETEs of a hung owner's ids beside a legitimate client's DELETEs through the same
    transceiver: statuses and answer times with and without the attack.

    \b
    Examples:
      rtcedge bench forward-abuse
      rtcedge bench forward-abuse --burst 80 --seconds 4
    """
    loopback_only()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(512)  # the kernel completes the handshakes; nothing ever answers
    relay = RelayProcess({}, workers=1, pin=False)  # never started: its keyring and cluster
    owner = TransceiverProcess(relay, tid=1, extra_args=KEEP_SESSIONS)
    front = TransceiverProcess(relay, tid=0)
    front.extra_args = [
        f"--peer-http=1={format_host_port(owner.host, owner.http_port)}",
        f"--peer-http=2={format_host_port(*silent.getsockname())}",
        "--trusted-proxy", "127.0.0.1/32", *KEEP_SESSIONS,
    ]  # fmt: skip
    try:
        with started_in_order(owner, front):
            result = asyncio.run(run_bench(owner, front, relay, burst, rate, seconds))
    finally:
        silent.close()
    for phase in ("without_attack", "with_attack"):
        r = result[phase]
        print(f"{phase:<15} legit DELETEs {r['deletes']:>3}  statuses {r['statuses']}  "
              f"ms median {r['ms_median']}  max {r['ms_max']}")  # fmt: skip
    print(f"attacker statuses {result['attacker_statuses']}")
    print("result: " + json.dumps(result))


if __name__ == "__main__":
    forward_abuse_bench()
