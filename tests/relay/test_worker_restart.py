"""A worker killed with SIGKILL: its replacement inherits the sockets and the flows."""

from __future__ import annotations

import os
import signal

from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import collect, udp_client
from tests.support.waits import wait_for

CLIENTS = 60


def test_killed_worker_is_replaced_with_same_flows_and_queued_packets_delivered():
    with StandInTransceiver(4) as peer, RelayProcess({4: peer.address}, workers=2) as relay:
        clients = [udp_client() for _ in range(CLIENTS)]
        for c in clients:
            c.sendto(hint_request(relay.keyring, relay.cluster, 4)[0], relay.address)
        assert all(len(v) == 1 for v in collect(clients, CLIENTS).values())
        for i, c in enumerate(clients):
            c.sendto(b"\x80before %d" % i, relay.address)
        assert sum(map(len, collect(clients, CLIENTS).values())) == CLIENTS
        path_before = {c.getsockname(): peer.relay_of_client[c.getsockname()] for c in clients}
        worker0 = relay.internal_address(0)
        on_worker0 = [c for c in clients if path_before[c.getsockname()] == worker0]
        assert on_worker0, "SO_REUSEPORT gave worker 0 some of the flows"

        old_pids = relay.worker_pids()
        victim = old_pids[0]
        # Freeze the worker, let packets queue in its socket, then kill it: the queued packets
        # must be forwarded by the replacement, from the journal it inherited.
        os.kill(victim, signal.SIGSTOP)
        for i, c in enumerate(clients):
            c.sendto(b"\x80during %d" % i, relay.address)
        # The other worker's calls go on meanwhile: once their packets made the round trip, those
        # sent to the frozen worker (interleaved with them) wait in its socket.
        others = [c for c in clients if c not in on_worker0]
        echoes = collect(others, len(others))
        os.kill(victim, signal.SIGKILL)
        echoes.update(collect(on_worker0, len(on_worker0), timeout_s=5))
        for i, c in enumerate(clients):
            assert echoes[c] == [b"T4:\x80during %d" % i], "queued packet delivered exactly once"

        assert wait_for(lambda: relay.metric("rtcedge_relay_worker_restarts_total", worker="0"), 1)
        new_pids = relay.worker_pids()
        assert victim not in new_pids and len(new_pids) == 2
        assert relay.metric("rtcedge_relay_flows_restored_total", worker="0") == len(on_worker0)

        for i, c in enumerate(clients):
            c.sendto(b"\x80after %d" % i, relay.address)
        echoes = collect(clients, CLIENTS)
        assert all(echoes[c] == [b"T4:\x80after %d" % i] for i, c in enumerate(clients))
        path_after = {c.getsockname(): peer.relay_of_client[c.getsockname()] for c in clients}
        assert path_after == path_before, "no flow moved to another worker"
        assert relay.http("/readyz")[0] == 200
        for c in clients:
            c.close()
