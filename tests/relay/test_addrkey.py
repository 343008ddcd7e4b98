"""relay.addrkey: flow keys read from sockaddrs, alone and a batch at once, and what they tell
about the client (port, address, source prefix)."""

from __future__ import annotations

import socket

import pytest

from relay.addrkey import AddressKeys
from relay.mmsg import NAME_STRIDE, sockaddr_bytes

CLIENTS = {
    socket.AF_INET: [("203.0.113.7", 5000), ("203.0.113.7", 5001), ("198.51.100.1", 5000)],
    socket.AF_INET6: [("2001:db8:1:2:3:4:5:6", 5000), ("2001:db8::1", 5000), ("::1", 65535)],
}
FAMILIES = pytest.mark.parametrize("family", CLIENTS, ids=["v4", "v6"])


def batch_names(family: int, clients: list[tuple[str, int]]) -> memoryview:
    """Sockaddrs at relay.mmsg's stride, as recvmmsg leaves them, read as 64-bit words."""
    stride = NAME_STRIDE[family]
    names = bytearray(stride * len(clients))
    for i, client in enumerate(clients):
        raw = sockaddr_bytes(family, *client)
        names[i * stride : i * stride + len(raw)] = raw
    return memoryview(names).cast("Q")


@FAMILIES
def test_a_batch_of_sockaddrs_gives_the_keys_of_each_one(family):
    keys = AddressKeys(family)
    clients = CLIENTS[family]
    expected = [keys.from_sockaddr(sockaddr_bytes(family, *c)) for c in clients]
    assert keys.batch(batch_names(family, clients), len(clients)) == expected
    assert keys.batch(batch_names(family, clients), 2) == expected[:2]


@FAMILIES
def test_keys_tell_clients_apart_by_address_and_port(family):
    keys = AddressKeys(family)
    made = [keys.from_sockaddr(sockaddr_bytes(family, *c)) for c in CLIENTS[family]]
    assert len(set(made)) == len(made)
    again = keys.from_sockaddr(sockaddr_bytes(family, *CLIENTS[family][0]))
    assert again == made[0] and hash(again) == hash(made[0])


@FAMILIES
def test_a_key_round_trips_through_its_journal_bytes(family):
    keys = AddressKeys(family)
    for client in CLIENTS[family]:
        raw = sockaddr_bytes(family, *client)
        key = keys.from_sockaddr(raw)
        stored = keys.to_bytes(key)
        assert raw.startswith(stored) and len(stored) == (8 if family == socket.AF_INET else 24)
        assert keys.from_bytes(stored) == key


@FAMILIES
def test_port_and_address_are_in_network_order_as_the_header_carries_them(family):
    keys = AddressKeys(family)
    for host, port in CLIENTS[family]:
        key = keys.from_sockaddr(sockaddr_bytes(family, host, port))
        assert keys.port_and_address(key) == (
            port.to_bytes(2, "big"),
            socket.inet_pton(family, host),
        )
        assert keys.address(key) == socket.inet_pton(family, host)
        assert keys.host_port(key) == (host, port)


def test_source_prefixes_are_a_v4_slash_24_and_a_v6_slash_64():
    v4 = AddressKeys(socket.AF_INET)
    assert v4.prefix(v4.from_sockaddr(sockaddr_bytes(socket.AF_INET, "203.0.113.7", 5000))) == (
        bytes([203, 0, 113])
    )
    v6 = AddressKeys(socket.AF_INET6)
    address = socket.inet_pton(socket.AF_INET6, "2001:db8:1:2:3:4:5:6")
    key = v6.from_sockaddr(sockaddr_bytes(socket.AF_INET6, "2001:db8:1:2:3:4:5:6", 5000))
    assert v6.prefix(key) == address[:8]


def test_clients_of_one_prefix_share_it_and_others_do_not():
    v4 = AddressKeys(socket.AF_INET)

    def prefix(host: str) -> bytes:
        return v4.prefix(v4.from_sockaddr(sockaddr_bytes(socket.AF_INET, host, 1)))

    assert prefix("203.0.113.7") == prefix("203.0.113.200") != prefix("203.0.114.7")


def test_the_encapsulation_family_follows_the_socket_family():
    assert AddressKeys(socket.AF_INET).ip_version == 4
    assert AddressKeys(socket.AF_INET6).ip_version == 6
