"""The media socket's edge: it drains a burst in wake-ups of a bounded size, and a send that
fails is counted, never raised."""

from __future__ import annotations

import asyncio
import socket

from transceiver.socket.transport import MAX_READS_PER_WAKE, SEND_ERROR, DrainingTransport


class Recorder(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.lost = False

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.got.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def test_a_burst_is_delivered_in_order_over_bounded_wake_ups_and_close_stops_reading():
    async def go() -> tuple[list[bytes], list[int], bool]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        burst = [b"%d" % i for i in range(3 * MAX_READS_PER_WAKE + 5)]
        for data in burst:
            sender.sendto(data, sock.getsockname())
        proto = Recorder()
        edge = DrainingTransport(sock, proto)
        sizes: list[int] = []
        edge.start()
        for _ in range(50):  # one wake-up per loop iteration at most
            before = len(proto.got)
            await asyncio.sleep(0)
            sizes.append(len(proto.got) - before)
            if len(proto.got) == len(burst):
                break
        edge.close()
        sender.close()
        return proto.got, sizes, proto.lost

    got, sizes, lost = asyncio.run(go())
    assert got == [b"%d" % i for i in range(3 * MAX_READS_PER_WAKE + 5)]
    assert max(sizes) <= MAX_READS_PER_WAKE and sizes.count(MAX_READS_PER_WAKE) >= 3
    assert lost


def test_a_failed_send_is_counted_not_raised():
    async def go() -> list[str]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        drops: list[str] = []
        edge = DrainingTransport(sock, Recorder(), on_drop=drops.append)
        edge.start()
        edge.sendto(b"x" * 70000, ("127.0.0.1", 9))  # EMSGSIZE: larger than any datagram
        edge.close()
        edge.sendto(b"late", ("127.0.0.1", 9))  # closed: ignored
        return drops

    assert asyncio.run(go()) == [SEND_ERROR]
