"""relay.headers: the headers a worker writes are common.encap's, and its copy plan puts a
header's client address where a sockaddr holds it."""

from __future__ import annotations

import ctypes
import socket

import pytest

from common import encap
from relay.headers import WIRE, address_copy_plan, address_fields
from relay.mmsg import NAME_STRIDE, sockaddr_bytes
from testbed.standin import hint_request
from tests.support.loopback import udp
from tests.support.relay_worker import make_worker

# (public listen address, a client of that family)
FAMILIES = [
    pytest.param(("127.0.0.1", 0), ("198.51.100.7", 50000), id="v4"),
    pytest.param(("::1", 0), ("2001:db8::42", 50000), id="v6"),
]


def header_of(wire: bytes, length: int) -> bytes:
    """The header a send descriptor points at: what the kernel sends before the payload."""
    return ctypes.string_at(WIRE.unpack(wire)[1], length)


@pytest.mark.parametrize(("listen", "client"), FAMILIES)
def test_a_confirmed_flows_header_is_encode_header_of_its_client(listen, client):
    worker, _ = make_worker({1: udp().getsockname()}, listen=listen, allow=("::/0", "0.0.0.0/0"))
    key = worker.keys.from_sockaddr(sockaddr_bytes(worker.family, *client))
    assert worker.housekeeping.confirm(key, worker.routing.targets[1], worker.now)
    wire = worker.flows.confirmed[key].wire
    assert WIRE.unpack(wire)[0] == worker.routing.targets[1].ptr
    assert header_of(wire, worker.header_len) == encap.encode_header(*client)


@pytest.mark.parametrize(("listen", "client"), FAMILIES)
def test_an_admitted_first_packets_header_is_encode_header_of_its_client(listen, client):
    worker, keyring = make_worker(
        {1: udp().getsockname()}, listen=listen, allow=("::/0", "0.0.0.0/0")
    )
    key = worker.keys.from_sockaddr(sockaddr_bytes(worker.family, *client))
    request, _ = hint_request(keyring, 0, 1)
    worker.rx_pub.data[: len(request)] = request  # as recvmmsg would leave it in slot 0
    wire = worker._admit(key, 0, len(request), entry=3)
    assert wire is not None, "admitted"
    assert header_of(wire, worker.header_len) == encap.encode_header(*client)


@pytest.mark.parametrize(
    ("family", "client"),
    [(socket.AF_INET, ("198.51.100.7", 50000)), (socket.AF_INET6, ("2001:db8::42", 4242))],
)
def test_the_copy_plans_turn_a_header_into_its_clients_sockaddr(family, client):
    header = encap.encode_header(*client)
    expected = sockaddr_bytes(family, *client)
    by_bytes = bytearray(NAME_STRIDE[family])
    by_bytes[:2] = family.to_bytes(2, "little")  # the send batch presets the family
    by_words = bytearray(by_bytes)
    for dst, src, length in address_fields(family):
        by_bytes[dst : dst + length] = header[src : src + length]
    words, header_words = memoryview(by_words).cast("H"), memoryview(header).cast("H")
    for dst, src in address_copy_plan(family):
        words[dst] = header_words[src]
    assert bytes(by_bytes[: len(expected)]) == expected
    assert bytes(by_words[: len(expected)]) == expected
