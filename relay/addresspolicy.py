"""Which client addresses the relay may admit a flow from and send to (coturn's denied-peer-ip).

The relay sends to a client only what a transceiver names, and a transceiver names an address
only after a check came from it (docs/design.md). A source address can be spoofed, though:
without this policy, a session owner who spoofs one check "from" a victim could point STUN at
the victim (reflection) or at a host inside the relay's own network. So addresses in
special-purpose ranges never get a flow, in either direction.

The built-in ranges (``DEFAULT_DENY_NETWORKS``) are the IANA special-purpose blocks no internet
client has: "this network", loopback, link-local (which holds cloud metadata services),
multicast, broadcast and reserved space, documentation and benchmarking ranges, IPv4-mapped IPv6.
They also hold the private ranges (RFC 1918, the shared 100.64.0.0/10, IPv6 ULA): the relay is
the public edge, so a client reaching its VIP from the internet arrives with a public address
(its NAT's), while private addresses are where the cluster's own services live (DNS, metrics,
anything else that listens on UDP). Deployments whose clients really are on a private network
(on premises, VPN, a kind cluster, a LoadBalancer with ``externalTrafficPolicy: Cluster``, which
hides clients behind node addresses) allow those ranges with ``--allow-network``.

``--deny-network`` adds ranges to the built-in ones; ``--allow-network`` carves exceptions out of
all of them and wins. Checked only when a flow is created (never per packet of a live flow).
Sans-I/O: a decision over address bytes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_DENY_NETWORKS: tuple[str, ...] = (
    # IPv4 (RFC 6890 and the IANA IPv4 special-purpose registry)
    "0.0.0.0/8",  # "this network"
    "10.0.0.0/8",  # private (RFC 1918)
    "100.64.0.0/10",  # shared address space (carrier-grade NAT, some pod networks)
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
    "172.16.0.0/12",  # private (RFC 1918)
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24",  # documentation (TEST-NET-1)
    "192.88.99.0/24",  # deprecated 6to4 relay anycast
    "192.168.0.0/16",  # private (RFC 1918)
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # documentation (TEST-NET-2)
    "203.0.113.0/24",  # documentation (TEST-NET-3)
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, and the limited broadcast 255.255.255.255
    # IPv6 (RFC 6890 and the IANA IPv6 special-purpose registry)
    "::/128",  # unspecified
    "::1/128",  # loopback
    "::ffff:0:0/96",  # IPv4-mapped: would reach the IPv4 addresses above by another name
    "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation (RFC 8215)
    "100::/64",  # discard-only
    "2001:db8::/32",  # documentation
    "fc00::/7",  # unique local (the IPv6 private ranges)
    "fe80::/10",  # link-local
    "fec0::/10",  # deprecated site-local
    "ff00::/8",  # multicast
)

# The ranges a loopback-only setup (``rtcedge up``, tests, benchmarks) must allow.
LOOPBACK_NETWORKS: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
# And those of a LAN, for ``rtcedge up`` tried from a phone on the same Wi-Fi.
PRIVATE_NETWORKS: tuple[str, ...] = (
    "10.0.0.0/8",
    "100.64.0.0/10",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
)


class _Ranges:
    """Networks of one IP version, as sets of prefixes per prefix length: one set lookup per
    distinct length (the defaults have 7 for IPv4), not one comparison per network."""

    def __init__(self, networks: Iterable[Network], bits: int) -> None:
        by_length: dict[int, set[int]] = {}
        for net in networks:
            by_length.setdefault(net.prefixlen, set()).add(
                int(net.network_address) >> (bits - net.prefixlen)
            )
        self.shifts = tuple(
            (bits - length, frozenset(prefixes)) for length, prefixes in sorted(by_length.items())
        )

    def __contains__(self, address: int) -> bool:
        return any(address >> shift in prefixes for shift, prefixes in self.shifts)


class AddressPolicy:
    """Denied client addresses: any deny range, unless an allow range holds the address too."""

    def __init__(self, deny: Iterable[Network], allow: Iterable[Network] = ()) -> None:
        deny, allow = list(deny), list(allow)
        self._deny = {
            4: _Ranges((n for n in deny if n.version == 4), 32),
            16: _Ranges((n for n in deny if n.version == 6), 128),
        }
        self._allow = {
            4: _Ranges((n for n in allow if n.version == 4), 32),
            16: _Ranges((n for n in allow if n.version == 6), 128),
        }

    def denies(self, address: bytes) -> bool:
        """``address``: 4 (IPv4) or 16 (IPv6) bytes in network order, as the flow keys hold it."""
        value = int.from_bytes(address, "big")
        n = len(address)
        return value in self._deny[n] and value not in self._allow[n]
