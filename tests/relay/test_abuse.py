"""Abuse: floods of new-flow attempts from spoofed sources, and malformed input of every length."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import stun
from testbed.processes import RelayProcess
from testbed.procfs import udp_drops
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import SpoofingSender, collect, udp_client
from tests.support.waits import wait_for

FLOOD = 20_000
FLOOD_BURST, FLOOD_PAUSE_S = 100, 0.015  # ~7,000 new-flow attempts per second
PENDING_CAP = 256


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@contextlib.contextmanager
def relay_with_a_silent_transceiver() -> Iterator[tuple[StandInTransceiver, RelayProcess]]:
    """Transceiver 1 answers (a live call's); transceiver 2 is allowlisted and never answers
    (the one the attacker's hints name, so their flows stay pending)."""
    silent = udp_client()
    with (
        StandInTransceiver(1) as peer,
        RelayProcess(
            {1: peer.address, 2: silent.getsockname()},
            workers=1,
            extra_args=["--max-pending-flows", str(PENDING_CAP)],
        ) as relay,
    ):
        yield peer, relay
    silent.close()


def test_flood_of_new_flows_from_spoofed_sources_is_bounded_and_spares_a_live_call():
    with relay_with_a_silent_transceiver() as (peer, relay):
        call = udp_client()
        call.sendto(hint_request(relay.keyring, relay.cluster, 1)[0], relay.address)
        assert len(collect([call], 1)[call]) == 1
        worker = relay.worker_pids()[0]
        rss_before = rss_kib(worker)
        out_before = relay.metric("rtcedge_relay_packets_total", direction="transceiver_to_client")

        rng = random.Random(1)
        spoofer = SpoofingSender()
        # Many distinct valid hints (an attacker can collect one per WHIP offer), each sent from
        # many spoofed addresses: the per-ufrag cap alone cannot stop this, the global one must.
        requests = [hint_request(relay.keyring, relay.cluster, 2)[0] for _ in range(500)]

        def flood() -> None:
            # Paced at ~7,000 packets/s (20,000 over ~3 s, while the call runs): what is tested
            # is that the tables stay bounded and keep the call, not the kernel's socket buffer;
            # a flood beyond a worker's packet rate is dropped by the kernel for every sender
            # alike, and on this shared 2-core machine the flood's own thread competes with the
            # worker for the CPU (unpaced, the socket dropped ~3,000 datagrams, the call's too).
            for i in range(FLOOD):
                request = requests[i % len(requests)]
                src = (
                    f"127.{rng.randrange(1, 255)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                    rng.randrange(1024, 65535),
                )
                spoofer.send(src, relay.address, request)
                if i % FLOOD_BURST == FLOOD_BURST - 1:
                    time.sleep(FLOOD_PAUSE_S)

        flooder = threading.Thread(target=flood)
        flooder.start()
        sent = received = 0
        deadline = time.monotonic() + 30
        while (flooder.is_alive() or sent < 150) and time.monotonic() < deadline:
            call.sendto(b"\x80call %d" % sent, relay.address)
            sent += 1
            received += len(collect([call], 1, timeout_s=0.02)[call])
        flooder.join()
        received += len(collect([call], sent - received, timeout_s=1)[call])
        spoofer.close()

        assert sent >= 150
        assert peer.malformed == [], (call.getsockname(), len(peer.malformed))
        drops = {
            line
            for line in relay.http("/metrics")[1].splitlines()
            if "dropped" in line and not line.endswith(" 0.0") and not line.startswith("#")
        }
        where = (udp_drops(relay.port), udp_drops(peer.address[1]), drops)
        assert received >= 0.99 * sent, f"the live call lost {sent - received} of {sent}: {where}"
        assert wait_for(lambda: relay.metric("rtcedge_relay_flows_active", table="confirmed"), 1)
        pending = relay.metric("rtcedge_relay_flows_active", table="pending")
        assert 0 < pending <= PENDING_CAP
        assert relay.metric("rtcedge_relay_flows_evicted_total", table="pending") > 0
        out_after = relay.metric("rtcedge_relay_packets_total", direction="transceiver_to_client")
        assert out_after - out_before == received, "nothing was sent toward a spoofed source"
        assert rss_kib(worker) - rss_before < 10_000, "memory stays flat"


def test_harvested_hints_from_spoofed_sources_cannot_block_a_new_caller():
    """Issue 8 #5: 64 valid hints x 8 spoofed sources kept the pending table full; on main every
    new caller's check was then refused (``pending_full``) until the attack stopped."""
    with relay_with_a_silent_transceiver() as (_, relay):
        hints = [hint_request(relay.keyring, relay.cluster, 2)[0] for _ in range(64)]
        rng = random.Random(2)
        spoofer = SpoofingSender()
        stop = threading.Event()
        rounds = 0

        def attack() -> None:
            nonlocal rounds
            while not stop.is_set():
                for request in hints:
                    for _ in range(8):
                        src = (
                            f"127.{rng.randrange(1, 255)}.{rng.randrange(256)}.1",
                            40000 + rounds,
                        )
                        spoofer.send(src, relay.address, request)
                rounds += 1
                stop.wait(0.3)  # ~1700 requests/s: 4x what kept 4096 slots full on main

        attacker = threading.Thread(target=attack)
        attacker.start()
        try:
            assert wait_for(
                lambda: relay.metric("rtcedge_relay_flows_active", table="pending"), PENDING_CAP
            ), "the attack fills the pending table"
            caller = udp_client()
            request = hint_request(relay.keyring, relay.cluster, 1)[0]
            answered = []
            for _ in range(10):  # an ICE agent retransmits its check
                caller.sendto(request, relay.address)
                answered = collect([caller], 1, timeout_s=0.2)[caller]
                if answered:
                    break
            assert answered, "the new caller's check reached its transceiver and came back"
            caller.sendto(b"\x80media", relay.address)
            assert collect([caller], 1)[caller] == [b"T1:\x80media"], "and its media flows"
            assert relay.metric("rtcedge_relay_flows_active", table="pending") <= PENDING_CAP
        finally:
            stop.set()
            attacker.join()
            spoofer.close()
        assert rounds >= 3
        # A hint opens its burst (8) and then one pending flow per 10 s, however often it is sent.
        assert relay.metric("rtcedge_relay_flows_created_total", table="pending") <= 64 * 9 + 1
        assert relay.metric("rtcedge_relay_dropped_packets_total", reason="pending_ufrag_limit") > 0
        assert (
            relay.metric("rtcedge_relay_flows_evicted_total", table="pending", scope="worker") > 0
        )


@pytest.mark.parametrize("first", [0, 1, 2, 3, 20, 22, 63, 64, 127, 128, 191, 200, 255])
def test_malformed_datagrams_of_every_length_never_crash_a_worker(first):
    with StandInTransceiver(1) as peer, RelayProcess({1: peer.address}, workers=1) as relay:
        pids = relay.worker_pids()
        c = udp_client()
        rng = random.Random(first)
        for length in range(0, 1501):
            c.sendto((bytes([first]) + rng.randbytes(length))[:length], relay.address)
            if length % 200 == 0:
                time.sleep(0.01)  # stay within the socket buffers: every datagram must be read
        odd = [b"", b":", b"\xff" * 40, b"a" * 600, ("\u00e9" * 100).encode()]
        for username in odd:
            attrs = [(stun.ATTR_USERNAME, username)] if username else []
            c.sendto(stun.build(stun.BINDING_REQUEST, rng.randbytes(12), attrs), relay.address)
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_dropped_packets_total") >= 1501 + len(odd), True
        )
        assert (
            relay.worker_pids() == pids and relay.metric("rtcedge_relay_worker_restarts_total") == 0
        )
        assert peer.received == [], "nothing malformed reached the transceiver"
        relay.stop()
        assert "Traceback" not in relay.proc.stderr.read().decode()
