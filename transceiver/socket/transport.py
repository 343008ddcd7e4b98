"""The media socket's asyncio transport: read it dry on each wake-up, send without a buffer.

asyncio's datagram transport reads ONE datagram per readiness event: every packet of every
call costs a whole event-loop iteration (an ``epoll_wait``, the ready list, the callback).
With a few hundred calls at 50 packets/s each way, that iteration cost more than handling the
packet (measured with py-spy on the sessions benchmark). ``DrainingTransport`` registers the socket
with ``loop.add_reader`` and reads up to ``MAX_READS_PER_WAKE`` datagrams per wake-up, handing each
to the protocol (``transceiver.socket.media.MediaSocket``) as asyncio would; then it yields, so
timers (the audio clock) and other sockets still run between bursts.

Sending is a plain non-blocking ``sendto``: media is not worth queueing. When the kernel's send
buffer is full (``EAGAIN``) the datagram is dropped and counted, where asyncio would buffer it
without bound and send it late; other errors (an ICMP port unreachable from a previous send)
are counted too and never raised into a session.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

MAX_READS_PER_WAKE = 64  # datagrams per wake-up, then the loop runs its other work
MAX_DATAGRAM_BYTES = 65535
# Reasons given to ``on_drop`` (rtcedge_transceiver_dropped_datagrams_total{reason}).
SEND_BUFFER_FULL = "send_buffer_full"
SEND_ERROR = "send_error"
RECEIVE_ERROR = "receive_error"


class DrainingTransport(asyncio.DatagramTransport):
    """A datagram transport for one bound, non-blocking UDP socket (see the module's doc)."""

    def __init__(
        self,
        sock: socket.socket,
        protocol: asyncio.DatagramProtocol,
        on_drop: Callable[[str], None] = lambda reason: None,
    ) -> None:
        super().__init__()
        self._on_drop = on_drop
        sock.setblocking(False)
        self._sock = sock
        self._protocol = protocol
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    def start(self) -> None:
        """Start reading (on the running loop) and tell the protocol it has a transport."""
        self._loop = asyncio.get_running_loop()
        self._protocol.connection_made(self)
        self._loop.add_reader(self._sock.fileno(), self._read_ready)

    def _read_ready(self) -> None:
        recvfrom, deliver = self._sock.recvfrom, self._protocol.datagram_received
        for _ in range(MAX_READS_PER_WAKE):
            try:
                data, addr = recvfrom(MAX_DATAGRAM_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. ECONNREFUSED for an earlier send: read on
                self._on_drop(RECEIVE_ERROR)
                continue
            deliver(data, addr)

    def sendto(self, data: Any, addr: Any = None) -> None:
        if self._closing:
            return
        try:
            self._sock.sendto(data, addr)
        except (BlockingIOError, InterruptedError):
            self._on_drop(SEND_BUFFER_FULL)
        except OSError:
            self._on_drop(SEND_ERROR)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "sockname":
            return self._sock.getsockname()
        if name == "socket":
            return self._sock
        return default

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._protocol.connection_lost(None)

    def abort(self) -> None:
        self.close()
