"""Address keys: a sockaddr (mostly a client's) as the cheapest hashable the kernel gives us.

The worker's hot path turns a whole batch of source sockaddrs into dict keys with C builtins
only, by reading them as little-endian 64-bit words (relay.mmsg lays sockaddrs out at a stride of
16 bytes for IPv4 and 32 for IPv6, so every one starts on a word):

- IPv4: word 0 of ``sockaddr_in`` = family | port | address. One ``int`` per client.
- IPv6: words 0..2 of ``sockaddr_in6`` = (family | port | flowinfo, address high, address low).
  Linux leaves flowinfo zero unless IPV6_FLOWINFO is enabled, which we never do.

Sans-I/O: plain functions over words and bytes. The sockaddr layout (where the port and the
address sit) is relay.mmsg's; nothing here repeats it.
"""

from __future__ import annotations

import socket
from collections.abc import Hashable
from typing import Protocol

from relay.mmsg import ADDR_SLICE, NAME_STRIDE, PORT_SLICE

_WORD = 8
_V4_STEP = NAME_STRIDE[socket.AF_INET] // _WORD  # words from one sockaddr to the next
_V6_STEP = NAME_STRIDE[socket.AF_INET6] // _WORD
_V4_KEY_BYTES = _WORD  # family, port, address
_V6_KEY_BYTES = 3 * _WORD  # family, port, flowinfo, address
# The source prefix a pending-flow quota counts by: /24 (IPv4) or /64 (IPv6), in address bytes.
PREFIX_BYTES = {socket.AF_INET: 24 // 8, socket.AF_INET6: 64 // 8}


class WordView(Protocol):
    def __getitem__(self, index: slice) -> memoryview: ...


def batch_keys_v4(words: WordView, n: int) -> list[Hashable]:
    return words[0 : _V4_STEP * n : _V4_STEP].tolist()


def batch_keys_v6(words: WordView, n: int) -> list[Hashable]:
    hi, mid, lo = (words[i : _V6_STEP * n : _V6_STEP].tolist() for i in range(3))
    return list(zip(hi, mid, lo, strict=True))


class AddressKeys:
    """Key functions for one address family."""

    def __init__(self, family: int) -> None:
        self.family = family
        self.v4 = family == socket.AF_INET
        self.ip_version = 4 if self.v4 else 6  # as common.encap names the family
        self.batch = batch_keys_v4 if self.v4 else batch_keys_v6
        port_off, port_len = PORT_SLICE
        addr_off, addr_len = ADDR_SLICE[family]
        self._port = slice(port_off, port_off + port_len)
        self._address = slice(addr_off, addr_off + addr_len)
        self._prefix = slice(addr_off, addr_off + PREFIX_BYTES[family])

    def from_sockaddr(self, raw: bytes) -> Hashable:
        """The key of one raw sockaddr (as built by ``relay.mmsg.sockaddr_bytes``)."""
        if self.v4:
            return int.from_bytes(raw[0:_V4_KEY_BYTES], "little")
        return tuple(
            int.from_bytes(raw[i : i + _WORD], "little") for i in range(0, _V6_KEY_BYTES, _WORD)
        )

    def to_bytes(self, key: Hashable) -> bytes:
        """The sockaddr bytes a key was read from (family, port, [flowinfo,] address)."""
        if self.v4:
            return key.to_bytes(_WORD, "little")  # type: ignore[attr-defined]
        return b"".join(w.to_bytes(_WORD, "little") for w in key)  # type: ignore[attr-defined]

    def from_bytes(self, raw: bytes) -> Hashable:
        return self.from_sockaddr(raw)

    def port_and_address(self, key: Hashable) -> tuple[bytes, bytes]:
        """Network-order port and address bytes, as the encapsulation header carries them."""
        raw = self.to_bytes(key)
        return raw[self._port], raw[self._address]

    def address(self, key: Hashable) -> bytes:
        """The address bytes alone (network order), as relay.addresspolicy judges them."""
        return self.to_bytes(key)[self._address]

    def host_port(self, key: Hashable) -> tuple[str, int]:
        """The client's address as text, e.g. for the Redis flow cache."""
        port, address = self.port_and_address(key)
        return socket.inet_ntop(self.family, address), int.from_bytes(port, "big")

    def prefix(self, key: Hashable) -> bytes:
        """The source prefix a pending-flow quota is counted by: /24 (IPv4) or /64 (IPv6)."""
        return self.to_bytes(key)[self._prefix]
