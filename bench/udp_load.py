"""Load through a UDP forwarder, and where what it forwarded is counted.

``Generator``: client sockets, one per flow, that offer a forwarder more datagrams than it can
take (per socket one sendmmsg of a batch, round robin). ``sink_socket``: a socket that is never
read and has a minimal receive buffer, so it costs no CPU and the kernel counts every datagram
sent to it (drops + queued, /proc/net/udp); ``skb_truesize`` turns its queued bytes into
datagrams. Used by the relay benchmark (``bench/relay_pps.py``) for every forwarder alike.

The generator's send loop is a hot path; the rest is written for reading.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import TypeVar

from relay.mmsg import SendBatch, sockaddr_bytes
from testbed.procfs import UdpPortStats, udp_key, udp_sockets

HOST = "127.0.0.1"
SO_RCVBUF_MIN = 1  # the kernel rounds it up to its minimum: a handful of datagrams

S = TypeVar("S")


def rtp_like_payload(size_bytes: int) -> bytes:
    """An RTP-looking datagram (version 2, PCMU): first byte 0x80 as RFC 7983 classifies RTP."""
    header = struct.pack("!BBHII", 0x80, 0, 1, 160, 0x1234ABCD)
    return (header + os.urandom(max(0, size_bytes - len(header))))[:size_bytes]


class Generator:
    """Client sockets, one per flow, that offer a forwarder more datagrams than it can take."""

    def __init__(self, flows: int, payload: bytes, batch: int) -> None:
        self.socks: list[socket.socket] = []
        for _ in range(flows):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((HOST, 0))
            s.setblocking(False)
            self.socks.append(s)
        self.batch = batch
        self._payload = ctypes.create_string_buffer(payload, len(payload))
        self._payload_len = len(payload)
        self._batches: dict[tuple[str, int], SendBatch] = {}

    def _batch_to(self, dest: tuple[str, int]) -> SendBatch:
        sb = self._batches.get(dest)
        if sb is None:
            sb = SendBatch(socket.AF_INET, self.batch, iovs=1)
            raw = sockaddr_bytes(socket.AF_INET, *dest)
            for k in range(self.batch):
                sb.names[k * sb.name_stride : k * sb.name_stride + len(raw)] = raw
                sb.iov[k * 2] = ctypes.addressof(self._payload)
                sb.iov[k * 2 + 1] = self._payload_len
            self._batches[dest] = sb
        return sb

    def offer(
        self,
        dest: tuple[str, int],
        warmup_s: float,
        window_s: float,
        max_packets: int,
        snapshot: Callable[[], S],
    ) -> tuple[S, S, int]:
        """Flood ``dest`` for a warm-up, then for a measured window between two snapshots.

        Hot path: per socket one sendmmsg of ``batch`` datagrams, round robin. Bounded by time
        and by ``max_packets`` in the window (and as many in the warm-up).
        """
        send = self._batch_to(dest).send
        batch = self.batch
        fds = [s.fileno() for s in self.socks]
        per_sweep = batch * len(fds)
        max_sweeps = 2 * (max_packets // per_sweep + 1)
        mark_at = time.monotonic() + warmup_s
        end_at = mark_at + window_s
        before: S | None = None
        offered = offered_at_mark = 0
        for _ in range(max_sweeps):
            failed = 0
            for fd in fds:
                failed += send(fd, batch)
            offered += per_sweep - failed
            now = time.monotonic()
            if before is None:
                if now >= mark_at:
                    before = snapshot()
                    offered_at_mark = offered
            elif now >= end_at or offered - offered_at_mark >= max_packets:
                break
        if before is None:  # the packet bound ended the warm-up
            before = snapshot()
            offered_at_mark = offered
        return before, snapshot(), offered - offered_at_mark

    def close(self) -> None:
        for s in self.socks:
            s.close()


def sink_socket() -> socket.socket:
    """A bound socket that is never read: every datagram sent to it is counted as a drop."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SO_RCVBUF_MIN)
    s.bind((HOST, 0))
    return s


def skb_truesize(datagram_bytes: int) -> int:
    """Receive-queue bytes one loopback datagram of this size occupies, to turn rx_queue into a
    datagram count."""
    count = 4
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
    ):
        rx.bind((HOST, 0))
        for _ in range(count):
            tx.sendto(bytes(datagram_bytes), rx.getsockname())
        stats = udp_sockets().get(udp_key(rx.getsockname()), UdpPortStats(0, 0))
        return max(1, stats.queued_bytes // count)
