"""One relay per public UDP port: the claim SO_REUSEPORT does not make.

SO_REUSEPORT lets a replacement relay bind the public port while the old one still runs (the
recovery path, a restart of the same deployment), but it lets any other relay of the same user
join too, and the kernel then silently splits the clients between the two. So the supervisor
claims the port first: it binds an abstract-namespace unix socket named after the port's family
and number, and holds it for its whole life. A second relay finds the name taken, asks the holder
for its pid (SO_PEERCRED) and refuses to start, unless told ``--takeover``.

Why this kind of lock: an abstract socket vanishes with the last process holding it (a SIGKILLed
relay leaves no stale lock, unlike a file), and its namespace is the network namespace, exactly
the scope of the UDP port (a Kubernetes pod has its own; hostNetwork pods share the node's).
The key is the port, not the address: a relay on 127.0.0.1:3478 would take that address's traffic
from one on 0.0.0.0:3478 just as surely.

A holder of another uid cannot be in our SO_REUSEPORT group (the kernel refuses across users), so
it is no reason to refuse: such a name squatter could otherwise keep every relay from starting.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from dataclasses import dataclass

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def claim_name(family: int, port: int) -> bytes:
    """The abstract socket name for a public UDP port (leading NUL: the abstract namespace)."""
    version = 6 if family == socket.AF_INET6 else 4
    return f"\0rtcedge-relay/udp{version}/{port}".encode()


@dataclass(frozen=True)
class Holder:
    """Who holds a port's claim: pid and uid from SO_PEERCRED (0 when not known)."""

    pid: int
    uid: int

    def describe(self) -> str:
        return f"pid {self.pid}" if self.pid else "pid unknown"


def try_claim(family: int, port: int) -> socket.socket | Holder:
    """The listening claim socket, or the holder of the claim when another process has it."""
    name = claim_name(family, port)
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(name)
    except OSError as exc:
        claim.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        return holder_of(name)
    claim.listen(16)
    claim.setblocking(False)
    return claim


def holder_of(name: bytes) -> Holder:
    """Connect to the claim and read the credentials the holder had when it listened."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(name)
        except OSError:
            return Holder(0, -1)  # gone meanwhile, or its backlog is full
        pid, uid, _gid = _UCRED.unpack(
            probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        )
        return Holder(pid, uid)


def could_share_port(holder: Holder) -> bool:
    """Could this holder be in our SO_REUSEPORT group? Only a process of our uid (or unknown)."""
    return holder.uid in (-1, os.geteuid())


def drain(claim: socket.socket) -> None:
    """Accept and close pending probes so the claim's backlog never fills."""
    while True:
        try:
            conn, _ = claim.accept()
        except (BlockingIOError, InterruptedError):
            return
        with contextlib.suppress(OSError):
            conn.close()
