"""A relay refuses a public port another live relay holds, unless told ``--takeover`` (real
processes): SO_REUSEPORT would otherwise let it join that relay's group without a word, and the
kernel would split the clients between two relays that know nothing of each other."""

from __future__ import annotations

import socket

import pytest

from relay.portclaim import claim_name, holder_of
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import collect, udp_client
from tests.support.processes import alive, identities, kill_all, udp_port_free
from tests.support.waits import wait_for


def beside(first: RelayProcess, *extra: str) -> RelayProcess:
    """Another relay for the same transceivers and keyring, on ``first``'s public port."""
    second = RelayProcess(
        dict(first.transceivers), workers=1, keyring=first.keyring, cluster=first.cluster,
        extra_args=list(extra),
    )  # fmt: skip
    second.port = first.port
    return second


def answered(relay: RelayProcess, tid: int) -> bool:
    """A fresh client's hinted STUN request comes back through the relay's public port."""
    c = udp_client()
    c.sendto(hint_request(relay.keyring, relay.cluster, tid)[0], relay.address)
    return len(collect([c], 1)[c]) == 1


def test_a_second_relay_on_a_held_port_refuses_naming_address_and_holder():
    with StandInTransceiver(2) as peer, RelayProcess({2: peer.address}, workers=1) as first:
        second = beside(first)
        try:
            with pytest.raises(RuntimeError) as refused:
                second.start()
        finally:
            second.stop()  # were it to start
        assert second.proc is not None and second.proc.returncode not in (0, None)
        message = str(refused.value)
        assert f"127.0.0.1:{first.port}" in message
        assert f"pid {first.proc.pid}" in message
        assert "--takeover" in message
        assert answered(first, 2), "the first relay still serves"


def test_takeover_starts_beside_the_old_relay_and_claims_the_port_once_it_stops():
    with StandInTransceiver(2) as peer:
        first = RelayProcess({2: peer.address}, workers=1).start()
        second = beside(first, "--takeover")
        try:
            second.start()
            assert first.proc is not None and first.proc.poll() is None, "the old one keeps on"
            assert answered(second, 2)
            first.stop()
            assert answered(second, 2), "the new one serves alone"
            # The new relay claims the port once the old one is gone (on its 1 s tick); then a
            # third, foreign relay is refused again, naming the new holder. (Waiting on the
            # claim itself: third relays started in a loop would race the tick for the claim.)
            assert second.proc is not None
            name = claim_name(socket.AF_INET, second.port)
            assert wait_for(lambda: holder_of(name).pid, second.proc.pid, 10.0)
            third = beside(second)
            try:
                with pytest.raises(RuntimeError) as refused:
                    third.start()
            finally:
                third.stop()
            assert f"pid {second.proc.pid}" in str(refused.value)
        finally:
            first.stop()
            second.stop()


def test_a_killed_relay_leaves_no_stale_claim():
    with StandInTransceiver(2) as peer:
        first = RelayProcess({2: peer.address}, workers=1).start()
        assert first.proc is not None
        processes = identities([first.proc.pid, *first.worker_pids()])
        try:
            first.proc.kill()
            first.proc.wait()
            assert wait_for(lambda: alive(processes), [], 5.0), "workers die with it"
            assert udp_port_free(*first.address)
            with beside(first) as second:  # no --takeover
                assert answered(second, 2)
        finally:
            kill_all(processes)
