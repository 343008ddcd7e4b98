"""Free loopback ports for the processes and sockets a test or a benchmark starts.

A port found free is free *now*: whoever binds it next wins, so each is asked for just before
the process that takes it starts.
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(family_of(host), kind) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def family_of(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port_range(host: str, count: int) -> int:
    """A base port such that base..base+count-1 are free for UDP right now."""
    for _ in range(200):
        base = free_port(host)
        if base + count > 65535:
            continue
        socks = []
        try:
            for i in range(count):
                s = socket.socket(family_of(host), socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((host, base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")
