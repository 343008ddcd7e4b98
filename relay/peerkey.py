"""Flow keys: a client's address as the cheapest hashable the kernel's sockaddr gives us.

The worker's hot path turns a whole batch of source sockaddrs into dict keys with C builtins
only, by reading them as little-endian 64-bit words (sockaddrs are laid out at a stride of 16
bytes for IPv4 and 32 for IPv6 so every one starts on a word):

- IPv4: word 0 of ``sockaddr_in`` = family | port | address. One ``int`` per client.
- IPv6: words 0..2 of ``sockaddr_in6`` = (family | port | flowinfo, address high, address low).
  Linux leaves flowinfo zero unless IPV6_FLOWINFO is enabled, which we never do.

Sans-I/O: plain functions over words and bytes.
"""

from __future__ import annotations

import socket
from collections.abc import Hashable
from typing import Protocol

NAME_STRIDE = {socket.AF_INET: 16, socket.AF_INET6: 32}
MAX_KEY_BYTES = 24


class WordView(Protocol):
    def __getitem__(self, index: slice) -> memoryview: ...


def batch_keys_v4(words: WordView, n: int) -> list[Hashable]:
    return words[0 : 2 * n : 2].tolist()


def batch_keys_v6(words: WordView, n: int) -> list[Hashable]:
    hi, mid, lo = (words[i : 4 * n : 4].tolist() for i in range(3))
    return list(zip(hi, mid, lo, strict=True))


class PeerKeys:
    """Key functions for one address family."""

    def __init__(self, family: int) -> None:
        self.family = family
        self.v4 = family == socket.AF_INET
        self.stride = NAME_STRIDE[family]
        self.batch = batch_keys_v4 if self.v4 else batch_keys_v6

    def from_sockaddr(self, raw: bytes) -> Hashable:
        """The key of one raw sockaddr (as built by ``relay.mmsg.sockaddr_bytes``)."""
        if self.v4:
            return int.from_bytes(raw[0:8], "little")
        return tuple(int.from_bytes(raw[i : i + 8], "little") for i in (0, 8, 16))

    def to_bytes(self, key: Hashable) -> bytes:
        """The sockaddr bytes a key was read from (family, port, [flowinfo,] address)."""
        if self.v4:
            return key.to_bytes(8, "little")  # type: ignore[attr-defined]
        return b"".join(w.to_bytes(8, "little") for w in key)  # type: ignore[attr-defined]

    def from_bytes(self, raw: bytes) -> Hashable:
        return self.from_sockaddr(raw)

    def port_and_address(self, key: Hashable) -> tuple[bytes, bytes]:
        """Network-order port and address bytes, as the encapsulation header carries them."""
        raw = self.to_bytes(key)
        return (raw[2:4], raw[4:8]) if self.v4 else (raw[2:4], raw[8:24])

    def host_port(self, key: Hashable) -> tuple[str, int]:
        """The client's address as text, e.g. for the Redis flow cache."""
        port, address = self.port_and_address(key)
        return socket.inet_ntop(self.family, address), int.from_bytes(port, "big")

    def prefix(self, key: Hashable) -> bytes:
        """The source prefix a pending-flow quota is counted by: /24 (IPv4) or /64 (IPv6)."""
        addr = self.port_and_address(key)[1]
        return addr[:3] if self.v4 else addr[:8]
