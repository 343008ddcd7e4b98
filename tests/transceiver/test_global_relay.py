"""Global Relay end to end, with real processes (docs/global-relay.md): two edge relays, one
cluster relay, two transceivers, real aiortc callers.

- Callers entering at either edge reach their own transceiver and hear their echo (audio both
  ways), whichever transceiver the edge's region points at.
- A caller whose answer advertised edge A first and the cluster relay second still connects
  when A is down: through the backup candidate.
- Killing an edge moves no transceiver state: with the edges sharing one public address (two
  relays in one SO_REUSEPORT group, as anycast or a load balancer would put them), the callers
  of the killed edge come back through the other one (at their next ICE consent check; no
  Redis here) and the transceivers keep every session.

The edges are cluster 9 and route cluster 1 to the cluster relay's peer ingress; the cluster
relay takes encapsulated datagrams from 127.0.0.0/8 only.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from common.config import format_host_port
from testbed.callers import EchoCaller
from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.waits import run

CLUSTER = 1
EDGE_CLUSTER = 9
SESSIONS_ENDED = "rtcedge_transceiver_sessions_ended_total"
SESSIONS_ACTIVE = "rtcedge_transceiver_sessions_active"
SESSIONS_STARTED = "rtcedge_transceiver_sessions_started_total"


def selected_remote(caller: EchoCaller) -> tuple[str, int] | None:
    """The relay address the caller's ICE agent nominated (its remote candidate)."""
    dtls = caller.pc.getTransceivers()[0].receiver.transport
    connection = dtls.transport._connection  # the aioice agent under aiortc's ICE transport
    pair = connection._nominated.get(1)
    return None if pair is None else (pair.remote_addr[0], pair.remote_addr[1])


def edge(cluster_relay: RelayProcess, peer_port: int, **kw) -> RelayProcess:
    """An edge-only relay (no transceivers) routing the cluster's hints to its peer ingress."""
    route = f"{CLUSTER}={format_host_port('127.0.0.1', peer_port)}"
    return RelayProcess(
        {},
        workers=1,
        pin=False,
        cluster=EDGE_CLUSTER,
        keyring=cluster_relay.keyring,
        extra_args=["--route", route, "--route-probe-interval", "0.2", *kw.pop("extra", [])],
        **kw,
    )


@pytest.fixture
def world():
    """The cluster relay with its peer ingress, two transceivers, and a factory for their
    region table (each region: an edge's address first, the cluster relay as the backup)."""
    peer_port = free_port("127.0.0.1")
    cluster = RelayProcess(
        {},
        workers=2,
        pin=False,
        cluster=CLUSTER,
        extra_args=[
            "--peer-listen", format_host_port("127.0.0.1", peer_port),
            "--peer-network", "127.0.0.0/8",
        ],
    )  # fmt: skip
    started: list = []

    def transceivers(
        regions: dict[str, tuple[str, int]], backup: bool = True
    ) -> list[TransceiverProcess]:
        args = ["--region-header", "X-Region", "--trusted-proxy", "127.0.0.1/32"]
        if not backup:  # the edge is the only way in: ICE cannot settle on the backup instead
            args.append("--no-backup-candidate")
        for name, address in regions.items():
            args += ["--region", f"{name}={format_host_port(*address)}"]
        args += ["--relay-network", "127.0.0.0/8", "--drain-grace", "0", "--client-rate", "0"]
        trxs = [TransceiverProcess(cluster, tid=t, extra_args=list(args)) for t in (0, 1)]
        cluster.transceivers = {t.tid: t.media_address for t in trxs}
        cluster.start()
        started.append(cluster)
        for t in trxs:
            t.start()
            started.append(t)
        return trxs

    yield cluster, peer_port, transceivers, started
    for process in reversed(started):
        process.stop()


def start(process: RelayProcess, started: list) -> RelayProcess:
    process.start()
    started.append(process)
    return process


async def call(trx: TransceiverProcess, region: str) -> EchoCaller:
    caller = EchoCaller()
    await caller.connect(trx.url, {"X-Region": region})
    return caller


async def close(callers: list[EchoCaller]) -> None:
    await asyncio.gather(*(c.pc.close() for c in callers))


def test_callers_at_either_edge_reach_their_own_transceiver(world):
    cluster, peer_port, transceivers, started = world
    edge_a = edge(cluster, peer_port)
    edge_b = edge(cluster, peer_port)
    t0, t1 = transceivers({"a": edge_a.address, "b": edge_b.address}, backup=False)
    start(edge_a, started)
    start(edge_b, started)

    async def go() -> None:
        plan = [(t0, "a"), (t1, "b"), (t0, "b"), (t1, "a")]
        callers = await asyncio.gather(*(call(t, r) for t, r in plan))
        try:
            for caller, (_, region) in zip(callers, plan, strict=True):
                entered = edge_a.address if region == "a" else edge_b.address
                assert selected_remote(caller) == entered, "entered at the region's edge"
                # Audio both ways: the echo of its own tone keeps coming back.
                assert await caller.wait_for_echo(time.monotonic(), 5), "echo stopped"
        finally:
            await close(callers)

    run(go())
    assert t0.metric("rtcedge_transceiver_region_sessions_total", region="a") == 1
    assert t1.metric("rtcedge_transceiver_region_sessions_total", region="a") == 1
    for e in (edge_a, edge_b):  # each edge carried two calls' media, both ways
        assert e.metric("rtcedge_relay_packets_total") > 200
    assert cluster.metric("rtcedge_relay_dropped_packets_total", reason="peer_denied") == 0


def test_a_caller_whose_edge_is_down_connects_through_the_backup(world):
    cluster, peer_port, transceivers, _ = world
    edge_a = edge(cluster, peer_port)  # never started: nothing listens on its address
    (t0, _t1) = transceivers({"a": edge_a.address})

    async def go() -> None:
        caller = await call(t0, "a")
        try:
            assert selected_remote(caller) == cluster.address, "the backup candidate"
            assert await caller.wait_for_echo(time.monotonic(), 5)
        finally:
            await close([caller])

    run(go())


def test_killing_an_edge_moves_no_transceiver_state_and_its_callers_recover(world):
    cluster, peer_port, transceivers, started = world
    edge_a = edge(cluster, peer_port)
    # Edge B joins A's public port (one SO_REUSEPORT group: anycast on one host).
    edge_b = edge(cluster, peer_port, extra=["--takeover"])
    edge_b.port = edge_a.port
    t0, t1 = transceivers({"anycast": edge_a.address}, backup=False)
    start(edge_a, started)
    start(edge_b, started)

    async def go() -> None:
        callers = await asyncio.gather(*(call(t, "anycast") for t in (t0, t1, t0, t1, t0, t1)))
        try:
            for caller in callers:
                assert selected_remote(caller) == edge_a.address

            async def carried_by_a() -> bool:  # its workers' counts reach /metrics in a while
                return await asyncio.to_thread(edge_a.metric, "rtcedge_relay_packets_total") > 0

            deadline = time.monotonic() + 5
            while not await carried_by_a() and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert await carried_by_a(), "the kernel spread no caller onto edge A: nothing to test"
            assert edge_a.proc is not None
            await asyncio.sleep(1)  # past the echo's start-up
            edge_a.proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            await asyncio.to_thread(edge_a.proc.wait, 5)
            # Every caller hears its echo again: those of A at their next consent check
            # (4-6 s), through B and the same cluster relay and transceiver.
            back = await asyncio.gather(*(c.echo.wait(killed + 0.5, 25, 15) for c in callers))
            assert all(back), f"callers without echo after the kill: {back}"
            gaps = [c.echo.gap_ms(killed, time.monotonic()) for c in callers]
            assert max(gaps) < 10_000, gaps
            # Nothing moved in the transceivers: three sessions each, the same ones, all alive.
            for t in (t0, t1):
                assert t.metric(SESSIONS_STARTED) == 3
                assert t.metric(SESSIONS_ACTIVE) == 3
                assert t.metric(SESSIONS_ENDED) == 0
        finally:
            await close(callers)

    run(go(), timeout_s=90)
