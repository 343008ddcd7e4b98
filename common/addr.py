"""A socket address as the transceiver passes it: (IP, port), or a TCP client's (IP, port, "tcp").

A client that reached a relay over TCP (ICE-TCP: the relay marks its datagrams with
common.encap.FLAG_TCP) is told apart from a UDP client of the same (IP, port) by a third
element: ``over_tcp((ip, port)) == (ip, port, "tcp")``. Tables and lookups treat it as just
another address; only the media socket's send path and the ICE agent look at the mark. The
addresses a socket binds or sends to (a relay's, an advertised one) are the 2-tuple form.
"""

from __future__ import annotations

Addr = tuple[str, int] | tuple[str, int, str]
TCP = "tcp"


def over_tcp(addr: tuple[str, int]) -> Addr:
    return (addr[0], addr[1], TCP)


def is_tcp(client: Addr) -> bool:
    return len(client) > 2
