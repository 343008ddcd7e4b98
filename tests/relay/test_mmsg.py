"""Batched receive/send over real loopback sockets."""

from __future__ import annotations

import ctypes
import socket

from relay.mmsg import (
    MMSGHDR_WORDS,
    W_LEN,
    W_NAME,
    W_NAMELEN,
    RecvBatch,
    SendBatch,
    sockaddr_bytes,
    sockaddr_to_host_port,
)


def udp(host: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    return s


def test_recv_batch_returns_each_datagram_with_length_and_source():
    rx, a, b = udp(), udp(), udp()
    rb = RecvBatch(socket.AF_INET, 8, slot_size=256)
    assert rb.recv(rx.fileno()) == 0, "nothing queued: no blocking, no error"
    a.sendto(b"one", rx.getsockname())
    b.sendto(b"second!", rx.getsockname())
    a.sendto(b"x" * 300, rx.getsockname())  # longer than a slot: truncated to the slot
    n = rb.recv(rx.fileno())
    assert n == 3
    assert [rb.length(i) for i in range(n)] == [3, 7, 256]
    assert bytes(rb.data[256 : 256 + 7]) == b"second!"
    sources = [
        sockaddr_to_host_port(socket.AF_INET, rb.names[i * 16 : i * 16 + 16]) for i in range(n)
    ]
    assert sources == [a.getsockname(), b.getsockname(), a.getsockname()]
    assert rb.hdrs[2 * MMSGHDR_WORDS + W_LEN] == 256


def test_send_batch_gathers_two_iovecs_to_per_entry_destinations():
    tx, d1, d2 = udp(), udp(), udp()
    sb = SendBatch(socket.AF_INET, 4, iovs=2)
    parts = [ctypes.create_string_buffer(x) for x in (b"HEAD", b"payload-1", b"payload-2")]
    dests = [
        ctypes.create_string_buffer(sockaddr_bytes(socket.AF_INET, *d.getsockname()))
        for d in (d1, d2)
    ]
    for k, (dest, body) in enumerate(((dests[0], parts[1]), (dests[1], parts[2]))):
        sb.hdrs[k * MMSGHDR_WORDS + W_NAME] = ctypes.addressof(dest)
        sb.hdrs[k * MMSGHDR_WORDS + W_NAMELEN] = 16
        sb.iov[k * 4 : k * 4 + 4] = (
            memoryview(
                (ctypes.c_uint64 * 4)(ctypes.addressof(parts[0]), 4, ctypes.addressof(body), 9)
            )
            .cast("B")
            .cast("Q")
        )
    assert sb.send(tx.fileno(), 2) == 0
    assert d1.recv(100) == b"HEADpayload-1"
    assert d2.recv(100) == b"HEADpayload-2"


def test_ipv6_sockaddr_round_trip():
    raw = sockaddr_bytes(socket.AF_INET6, "::1", 3478)
    assert len(raw) == 28
    assert sockaddr_to_host_port(socket.AF_INET6, raw) == ("::1", 3478)
