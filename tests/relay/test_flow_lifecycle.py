"""Flow life through a real relay: pending until the transceiver answers, expiry, SIGTERM."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from common import encap
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import collect, udp_client
from tests.support.waits import wait_for


def test_pending_flow_forwards_only_stun_until_the_transceiver_answers():
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # allowlisted, never answers
    silent.bind(("127.0.0.1", 0))
    silent.settimeout(2)
    with RelayProcess({5: silent.getsockname()}, workers=1) as relay:
        c = udp_client()
        first, _ = hint_request(relay.keyring, relay.cluster, 5)
        c.sendto(first, relay.address)
        header_len = encap.HEADER_LEN_V4
        assert silent.recv(2048)[header_len:] == first, "the Binding request was forwarded"
        c.sendto(first, relay.address)  # an ICE retransmission is forwarded too
        assert silent.recv(2048)[header_len:] == first
        c.sendto(b"\x16dtls before any answer", relay.address)
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_dropped_packets_total", reason="not_confirmed"), 1
        )
        silent.settimeout(0.2)
        try:
            leaked = silent.recv(2048)
        except TimeoutError:
            leaked = b""
        assert leaked == b"", "non-STUN from a pending flow is not forwarded"
        assert wait_for(lambda: relay.metric("rtcedge_relay_flows_active", table="pending"), 1)
        assert relay.metric("rtcedge_relay_flows_active", table="confirmed") == 0
    silent.close()


def test_idle_confirmed_flow_expires_and_then_forwards_nothing():
    with (
        StandInTransceiver(6) as peer,
        RelayProcess({6: peer.address}, workers=1, extra_args=["--idle-ttl", "4"]) as relay,
    ):
        c = udp_client()
        c.sendto(hint_request(relay.keyring, relay.cluster, 6)[0], relay.address)
        assert len(collect([c], 1)[c]) == 1
        c.sendto(b"\x80fresh", relay.address)
        assert collect([c], 1)[c] == [b"T6:\x80fresh"]
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_flows_expired_total", table="confirmed"),
            1,
            timeout_s=10,
        )
        assert relay.metric("rtcedge_relay_flows_active", table="confirmed") == 0
        received = len(peer.received)
        c.sendto(b"\x80stale", relay.address)
        assert collect([c], 1, timeout_s=0.3)[c] == []
        assert len(peer.received) == received


def test_sigterm_stops_supervisor_and_workers():
    with StandInTransceiver(1) as peer:
        relay = RelayProcess({1: peer.address}, workers=2).start()
        workers = relay.worker_pids()
        assert len(workers) == 2
        started = time.monotonic()
        assert relay.stop() == 0
        assert time.monotonic() - started < 5
        for pid in workers:
            assert not Path(f"/proc/{pid}").exists(), "the supervisor stopped and reaped it"
