"""A worker's batches, in-process on real sockets: drops inside a batch never mix payloads up."""

from __future__ import annotations

import socket

from common import encap
from relay.worker import Worker
from testbed.standin import hint_request
from tests.support.loopback import drain, udp
from tests.support.relay_worker import DROP_SLOT, make_worker, read_all


def confirm(worker: Worker, client: socket.socket, tid: int) -> None:
    host, port = client.getsockname()
    raw = (2).to_bytes(2, "little") + port.to_bytes(2, "big") + socket.inet_aton(host) + bytes(8)
    worker.housekeeping.confirm(
        worker.keys.from_sockaddr(raw), worker.routing.targets[tid], worker.now
    )


def test_client_batches_with_drops_and_new_flows_keep_every_payload_with_its_client():
    sink, other = udp(), udp()
    worker, keyring = make_worker({1: sink.getsockname(), 2: other.getsockname()})
    calls = [udp() for _ in range(3)]
    for c in calls:
        confirm(worker, c, 1)
    strangers = [udp() for _ in range(3)]
    newcomer = udp()
    relay = worker.public.getsockname()
    for i in range(60):  # one batch: confirmed, unknown (dropped), new flows, interleaved
        for n, c in enumerate(calls):
            c.sendto(b"\x80call%d-%d" % (n, i), relay)
        strangers[i % 3].sendto(b"\x80nobody", relay)
        if i % 20 == 0:
            newcomer.sendto(hint_request(keyring, 0, 2)[0], relay)
    read_all(worker._from_clients, 60 * 4 + 3)
    for data in drain(sink):
        header, offset = encap.decode_header(data)
        n = [c.getsockname() for c in calls].index((header.client_ip, header.client_port))
        assert data[offset:].startswith(b"\x80call%d-" % n), "payload with its own client"
    assert len(drain(other)) == 3, "the new flow's Binding requests went to transceiver 2"


def test_transceiver_batches_with_bad_headers_keep_every_payload_with_its_client():
    transceiver = udp()
    worker, _ = make_worker({1: transceiver.getsockname()})
    clients = [udp() for _ in range(4)]
    internal = worker.internal.getsockname()
    for i in range(60):
        for n, c in enumerate(clients):
            transceiver.sendto(
                encap.encapsulate(b"\x80to%d-%d" % (n, i), *c.getsockname()), internal
            )
        transceiver.sendto(b"\xff\x00junk", internal)  # malformed: dropped mid-batch
    read_all(worker._from_transceivers, 60 * 5)
    for n, c in enumerate(clients):
        got = drain(c)
        assert len(got) == 60
        assert all(p.startswith(b"\x80to%d-" % n) for p in got)


def test_a_transceiver_batch_naming_a_denied_client_drops_only_those_packets():
    transceiver = udp()
    worker, _ = make_worker({1: transceiver.getsockname()}, allow=("127.0.0.1/32",))
    clients = [udp() for _ in range(3)]  # new flows: the batch needs decisions
    confirm(worker, clients[0], 1)  # and one flow that exists already
    victim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    victim.bind(("127.0.0.9", 0))  # denied: 127.0.0.0/8 without this worker's exception
    victim.settimeout(0.2)
    internal = worker.internal.getsockname()
    for i in range(40):
        for n, c in enumerate(clients):
            transceiver.sendto(
                encap.encapsulate(b"\x80to%d-%d" % (n, i), *c.getsockname()), internal
            )
        transceiver.sendto(encap.encapsulate(b"\x80reflected", *victim.getsockname()), internal)
    read_all(worker._from_transceivers, 40 * 4)
    assert drain(victim) == [], "nothing was sent to the denied address"
    for n, c in enumerate(clients):
        got = drain(c)
        assert len(got) == 40 and all(p.startswith(b"\x80to%d-" % n) for p in got)
    assert worker.ctr[DROP_SLOT["denied_address"]] == 40
    assert len(worker.flows.confirmed) == 3
