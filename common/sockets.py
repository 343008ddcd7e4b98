"""Socket setup the relay and the transceiver share: receive and send buffers sized for bursts.

A media socket takes bursts (a relay worker's batch, many calls' packets at once); the kernel
drops what does not fit in its receive buffer, so both services ask for more than the default.
"""

from __future__ import annotations

import socket

SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # asm-generic/socket.h; not exported by Python


def set_buffers(sock: socket.socket, size_bytes: int) -> None:
    """Set SO_RCVBUF/SO_SNDBUF; as root beyond net.core.{r,w}mem_max (the *FORCE options)."""
    for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size_bytes)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, size_bytes)
