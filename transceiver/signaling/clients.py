"""Who a WHIP client is: its address (behind trusted proxies only), and the key its quotas count by.

The client is the subject of its signed token when it has one (users behind one NAT then do not
share a quota), else its address: the TCP peer, or, only when the peer is a trusted proxy, the
address that proxy reports in a header such as X-Forwarded-For (``client_address``). IPv6
addresses count by their /64, the block one subscriber usually gets. Sans-I/O: text in, text out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
IPV6_PREFIX = 64


def client_address(
    peer: str | None, forwarded: str | None, trusted: Sequence[Network]
) -> str | None:
    """The client's IP: the peer, or what trusted proxies in front of us say it is.

    A proxy appends the address it got the request from to the header, so the list reads
    client, proxy1, proxy2...; only the entries our trusted proxies added can be believed. We
    walk it from the right and take the first address that is not a trusted proxy (anything
    to its left was written by the client itself). An entry that is not an IP stops the walk.
    """
    address = _ip(peer)
    if address is None or not forwarded or not _within(address, trusted):
        return peer
    for entry in reversed(forwarded.split(",")):
        hop = _ip(entry.strip())
        if hop is None:
            break
        address = hop
        if not _within(hop, trusted):
            break
    return str(address)


def from_trusted_proxy(peer: str | None, trusted: Sequence[Network]) -> bool:
    """Whether the TCP peer is one of our trusted proxies: only then are its headers believed."""
    address = _ip(peer)
    return address is not None and _within(address, trusted)


def client_key(address: str | None, subject: str | None = None) -> str:
    """The quota key: the token's subject, else the address (an IPv6 one by its /64)."""
    if subject:
        return f"sub:{subject}"
    ip = _ip(address)
    if ip is None:
        return f"addr:{address or ''}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"addr:{ip.ipv4_mapped}"
        return f"addr:{ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False)}"
    return f"addr:{ip}"


def _ip(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _within(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, nets: Sequence[Network]) -> bool:
    return any(ip.version == net.version and ip in net for net in nets)
