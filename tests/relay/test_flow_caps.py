"""Confirmed flows capped per hint, per transceiver and per worker, through a real relay.

Issue 8 #3: every check a session's transceiver answered from a new address made a confirmed flow
that was never evicted, so one session could fill a worker's table and every new caller then got
``flows_full`` (its Binding response came back, its media did not).
"""

from __future__ import annotations

import time

from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import SpoofingSender, collect, udp_client
from tests.support.waits import wait_for

ATTACKER_HINTS = 12
PORTS_PER_HINT = 10


def media_echoes(relay: RelayProcess, clients, tid_of) -> int:
    """Each client sends one RTP-like packet; count the echoes its transceiver sent back."""
    for i, c in enumerate(clients):
        c.sendto(b"\x80media %d" % i, relay.address)
    got = collect(clients, len(clients), timeout_s=2)
    return sum(got[c] == [b"T%d:\x80media %d" % (tid_of(i), i)] for i, c in enumerate(clients))


def test_one_session_answering_checks_from_ever_new_ports_cannot_lock_out_new_callers():
    with (
        StandInTransceiver(1) as attacked,  # answers every check, as a transceiver does
        StandInTransceiver(2) as other,
        RelayProcess(
            {1: attacked.address, 2: other.address},
            workers=1,
            extra_args=[
                "--max-flows", "32",
                "--max-flows-per-transceiver", "24",
                "--max-flows-per-hint", "4",
                "--max-pending-per-ufrag", "1000",  # let this test reach the confirmed table
            ],
        ) as relay,
    ):  # fmt: skip
        spoofer = SpoofingSender()
        sent = 0
        for h in range(ATTACKER_HINTS):
            request = hint_request(relay.keyring, relay.cluster, 1)[0]
            for p in range(PORTS_PER_HINT):
                spoofer.send((f"127.66.{h}.1", 20000 + p), relay.address, request)
                sent += 1
            time.sleep(0.02)
        spoofer.close()
        assert wait_for(lambda: attacked.stun_requests, sent), "every check was answered"
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_flows_created_total", table="confirmed"), sent
        )
        assert wait_for(lambda: relay.metric("rtcedge_relay_flows_active", table="confirmed"), 24)
        by_hint, by_transceiver = (
            relay.metric("rtcedge_relay_flows_evicted_total", table="confirmed", scope=scope)
            for scope in ("hint", "transceiver")
        )
        # Each hint keeps 4 flows, the transceiver 24 in all: every other confirmation evicted one.
        assert by_hint + by_transceiver == sent - 24 and by_hint > 0 and by_transceiver > 0
        assert relay.metric("rtcedge_relay_flows_evicted_total", scope="worker") == 0

        # New callers of both transceivers: their flows confirm and their media flows.
        callers = [udp_client() for _ in range(30)]
        tid_of = lambda i: 1 + i % 2  # noqa: E731
        for i, c in enumerate(callers):
            c.sendto(hint_request(relay.keyring, relay.cluster, tid_of(i))[0], relay.address)
        replies = collect(callers, len(callers))
        assert all(len(replies[c]) == 1 for c in callers)
        assert media_echoes(relay, callers, tid_of) == len(callers), "no caller locked out"
        # 15 callers per transceiver, 32 in the worker: the attacker's idle flows made the room.
        assert wait_for(lambda: relay.metric("rtcedge_relay_flows_active", table="confirmed"), 32)
        assert relay.metric("rtcedge_relay_flows_evicted_total", scope="worker") > 0
