"""First packets are rate-limited per source prefix before the hint's HMAC (issue 8 #8).

An invalid hint costs ~9 us of HMAC: ~110k packets/s from one host saturated a worker. A source
/24 (IPv4) or /64 (IPv6) now gets ``--first-packet-rate`` STUN first packets a second (bursts of
twice that) before any parsing; the table of prefixes is bounded and the prefixes beyond it share
one budget.
"""

from __future__ import annotations

import random
import secrets
import socket
import time

from common import stun
from common.hint import NONCE_LEN, Keyring, sign_hint
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import SpoofingSender, collect, drain, udp, udp_client
from tests.support.relay_worker import DROP_SLOT, make_worker, read_all
from tests.support.waits import wait_for

KEYRING = Keyring.generate(1)


def forged() -> bytes:
    """A well-formed Binding request whose hint fails only its HMAC tag (key unknown here)."""
    ufrag = sign_hint(KEYRING, 0, 1, time.time(), secrets.token_bytes(NONCE_LEN))
    return stun.binding_request(f"{ufrag}:cli", secrets.token_bytes(12))


def bound(host: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    return s


def drops(worker, reason: str) -> int:
    return worker.ctr[DROP_SLOT[reason]]


def test_one_prefix_gets_its_burst_then_its_rate_and_other_prefixes_are_untouched():
    sink = udp()
    worker, keyring = make_worker({1: sink.getsockname()}, first_packet_rate_per_s=50)
    relay = worker.public.getsockname()
    flooder = bound("127.0.0.1")
    for _ in range(300):
        flooder.sendto(forged(), relay)
    read_all(worker._from_clients, 300)
    assert drops(worker, "hint_bad_tag") == 100, "the burst (twice the rate) reached the HMAC"
    assert drops(worker, "first_packet_rate") == 200, "the rest never did"
    caller = bound("127.0.1.1")  # another /24
    caller.sendto(hint_request(keyring, 0, 1)[0], relay)
    read_all(worker._from_clients, 1)
    assert len(drain(sink)) == 1, "a caller from another prefix is forwarded"
    worker.tick(worker.now + 1)  # a second later: the prefix earned its rate again
    for _ in range(100):
        flooder.sendto(forged(), relay)
    read_all(worker._from_clients, 100)
    assert drops(worker, "first_packet_rate") == 200 + 50


def test_a_full_prefix_table_makes_the_prefixes_beyond_it_share_one_budget():
    worker, _ = make_worker(
        {1: udp().getsockname()}, first_packet_rate_per_s=1, first_packet_prefixes=3
    )
    relay = worker.public.getsockname()
    sources = [bound(f"127.0.{i}.1") for i in range(1, 6)]
    for s in sources:
        for _ in range(3):
            s.sendto(forged(), relay)
    read_all(worker._from_clients, 5 * 3)
    # Prefixes 1-3 fill the table (2 each, then refused); 4 and 5 share the overflow burst of 2.
    assert drops(worker, "first_packet_rate") == 3
    assert drops(worker, "first_packet_overflow") == 4
    assert drops(worker, "hint_bad_tag") == 3 * 2 + 2
    assert len(worker.admission.first_packets) == 3
    worker.tick(worker.now + 10)  # every bucket full again: the tick forgets them
    assert len(worker.admission.first_packets) == 0


def test_a_flood_of_forged_hints_from_one_prefix_is_cut_before_the_hmac_through_a_real_relay():
    with (
        StandInTransceiver(1) as peer,
        RelayProcess(
            {1: peer.address}, workers=1, extra_args=["--first-packet-rate", "100"]
        ) as relay,
    ):
        spoofer = SpoofingSender()  # one /24, ever new hosts and ports: a flooding network
        rng = random.Random(3)
        packets = [forged() for _ in range(50)]
        started = time.monotonic()
        for i in range(5000):
            src = (f"127.5.5.{rng.randrange(1, 255)}", rng.randrange(1024, 65535))
            spoofer.send(src, relay.address, packets[i % len(packets)])
        spoofer.close()
        caller = udp_client()  # 127.0.0.1: another prefix, in the middle of the flood
        caller.sendto(hint_request(relay.keyring, relay.cluster, 1)[0], relay.address)
        assert len(collect([caller], 1)[caller]) == 1, "the caller is answered"
        elapsed = time.monotonic() - started

        def refused() -> float:
            return relay.metric("rtcedge_relay_dropped_packets_total", reason="first_packet_rate")

        hmac_checked = 5000 - 200 - 100 * (elapsed + 2)  # burst + rate x (time + tick slack)
        assert wait_for(lambda: refused() >= hmac_checked, True), refused()
        tags = relay.metric("rtcedge_relay_dropped_packets_total", reason="hint_bad_tag")
        assert tags + refused() == 5000 and tags <= 200 + 100 * (elapsed + 2)
