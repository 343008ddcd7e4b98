"""The worker loop's coalescing wait (--coalesce-us), through ``relay serve`` on real sockets: a
lone datagram still leaves at once, datagrams that come densely share recvmmsg calls and every
one is forwarded (the wait is bounded: nothing waits for a batch to fill), and a wait beyond
1 ms is refused at start naming the option (tests/relay/test_cli.py)."""

from __future__ import annotations

import socket
import time

import pytest

from common import stun
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import collect, udp_client
from tests.support.waits import wait_for

DENSE_PACKETS = 600
DENSE_PERIOD_S = 200e-6  # 5,000 datagrams/s: a 1 ms wait gathers ~5


@pytest.fixture
def standin():
    peer = StandInTransceiver(1).start()
    yield peer
    peer.close()


def relay_with(standin: StandInTransceiver, coalesce_us: int) -> RelayProcess:
    return RelayProcess(
        {standin.tid: standin.address}, workers=1, extra_args=["--coalesce-us", str(coalesce_us)]
    )


def confirmed_client(relay: RelayProcess) -> socket.socket:
    client = udp_client()
    client.sendto(hint_request(relay.keyring, relay.cluster, 1)[0], relay.address)
    (reply,) = collect([client], 1)[client]
    assert stun.parse(reply).msg_type == stun.BINDING_SUCCESS
    return client


def batches(relay: RelayProcess) -> tuple[float, float]:
    """(datagrams, recvmmsg calls that returned any) so far, both directions."""
    return (
        relay.metric("rtcedge_relay_receive_batch_packets_sum"),
        relay.metric("rtcedge_relay_receive_batch_packets_count"),
    )


def test_at_a_low_rate_each_datagram_leaves_without_waiting_for_another(standin):
    with relay_with(standin, 1000) as relay:
        client = confirmed_client(relay)
        for i in range(8):  # 8 datagrams 30 ms apart: each echoed before the next is sent
            client.sendto(b"\x80lone %d" % i, relay.address)
            got = collect([client], 1, timeout_s=1.0)[client]
            assert got == [b"T1:\x80lone %d" % i]
            time.sleep(0.03)


def test_dense_datagrams_share_receive_calls_and_all_are_forwarded(standin):
    with relay_with(standin, 1000) as relay:
        client = confirmed_client(relay)
        packets_before, calls_before = batches(relay)
        next_at = time.perf_counter()
        for i in range(DENSE_PACKETS):  # paced, never in bursts
            while time.perf_counter() < next_at:
                pass
            client.sendto(b"\x80dense %d" % i, relay.address)
            next_at += DENSE_PERIOD_S
        echoes = collect([client], DENSE_PACKETS, timeout_s=5.0)[client]
        assert sorted(echoes) == sorted(b"T1:\x80dense %d" % i for i in range(DENSE_PACKETS))
        # Both directions: the clients' datagrams and the echoes, twice as many.
        assert wait_for(lambda: batches(relay)[0] - packets_before, 2 * DENSE_PACKETS)
        packets, calls = batches(relay)
        per_call = (packets - packets_before) / (calls - calls_before)
        assert per_call > 1.5, f"{per_call:.2f} datagrams per recvmmsg: the wait did not gather"


def test_a_burst_then_silence_is_forwarded_whole(standin):
    """Three datagrams 100 us apart wake a worker that then waits: the wait ends by its bound,
    not when a batch is full."""
    with relay_with(standin, 1000) as relay:
        client = confirmed_client(relay)
        for _round in range(5):
            for i in range(3):
                client.sendto(b"\x80burst %d" % i, relay.address)
                time.sleep(100e-6)
            got = collect([client], 3, timeout_s=1.0)[client]
            assert sorted(got) == [b"T1:\x80burst %d" % i for i in range(3)]
