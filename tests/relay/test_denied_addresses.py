"""No flow from, and nothing to, a denied client address (issue 8 #4: reflection).

Real relay process, stand-in transceiver, loopback sockets: the relay allows only 127.0.0.1 here,
so 127.0.0.9 stands for a victim (or a host inside the relay's network) in a denied range.
"""

from __future__ import annotations

import re
import socket

from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import SpoofingSender, collect, udp_client
from tests.support.waits import wait_for

VICTIM_HOST = "127.0.0.9"  # in the built-in 127.0.0.0/8 denial, outside this relay's exception


def bound(host: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    s.setblocking(False)
    return s


def test_a_denied_address_gets_no_flow_and_receives_nothing_a_transceiver_sends_it():
    with (
        StandInTransceiver(1) as peer,
        RelayProcess(
            {1: peer.address}, workers=1, allow_networks=("127.0.0.1/32", "::1/128")
        ) as relay,
    ):
        call = udp_client()
        call.sendto(hint_request(relay.keyring, relay.cluster, 1)[0], relay.address)
        assert len(collect([call], 1)[call]) == 1, "an allowed client still gets its flow"

        victim = bound(VICTIM_HOST)
        victim.sendto(hint_request(relay.keyring, relay.cluster, 1)[0], relay.address)
        spoofer = SpoofingSender()  # the same "from" an address the attacker does not own
        spoofer.send(
            (VICTIM_HOST, 4242), relay.address, hint_request(relay.keyring, relay.cluster, 1)[0]
        )
        spoofer.close()
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_dropped_packets_total", reason="denied_address"),
            2,
        )
        assert not [r for r in peer.received if r[0] == VICTIM_HOST], "nothing was admitted"

        # A transceiver told (by a spoofed check) to send a call's output to the victim, in
        # bursts mixed with a live call's packets: the relay drops exactly the victim's.
        out_before = relay.metric("rtcedge_relay_packets_total", direction="transceiver_to_client")
        internal = relay.internal_address(0)
        for i in range(100):
            peer.send_to_client(internal, victim.getsockname(), b"\x80to victim %d" % i)
            peer.send_to_client(internal, call.getsockname(), b"\x80to call %d" % i)
            peer.send_to_client(internal, (VICTIM_HOST, 4242), b"\x80to spoofed %d" % i)
        got = collect([call, victim], 200, timeout_s=2)
        assert got[victim] == [], "not one datagram reached the denied address"
        assert len(got[call]) == 100 and all(p.startswith(b"\x80to call") for p in got[call])
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_dropped_packets_total", reason="denied_address"),
            2 + 200,
        )
        out_after = relay.metric("rtcedge_relay_packets_total", direction="transceiver_to_client")
        assert out_after - out_before == 100
        assert relay.metric("rtcedge_relay_flows_active", table="confirmed") == 1
        call.close()
        victim.close()


def denied_notices(log: str) -> list[int]:
    """The packet counts of the relay's denied-address log lines."""
    return [
        int(re.search(r"dropped (\d+) packets?", line).group(1))  # type: ignore[union-attr]
        for line in log.splitlines()
        if "(denied_address)" in line
    ]


def test_a_relay_that_denies_every_caller_says_so_in_its_log_naming_allow_network():
    """Issue 27: a relay and a transceiver tried by hand on loopback dropped every packet as
    ``denied_address``, visible only in the metrics. The supervisor logs the drops, counted and
    rate-limited (one line at once, the rest at stop here), naming the option that fixes it."""
    packets = 30
    with StandInTransceiver(1) as peer:
        relay = RelayProcess({1: peer.address}, workers=1, allow_networks=())  # the bare default
        relay.start()
        try:
            call = udp_client()
            for _ in range(packets):
                call.sendto(hint_request(relay.keyring, relay.cluster, 1)[0], relay.address)
            dropped = "rtcedge_relay_dropped_packets_total"
            assert wait_for(lambda: relay.metric(dropped, reason="denied_address"), packets, 5)
            call.close()
        finally:
            relay.stop()
        assert relay.proc is not None and relay.proc.stderr is not None
        log = relay.proc.stderr.read().decode()
    counts = denied_notices(log)
    assert 1 <= len(counts) <= 2 and sum(counts) == packets, log
    assert "--allow-network CIDR" in log and f"({packets} in all)" in log, log
    assert not peer.received, "nothing was admitted"
