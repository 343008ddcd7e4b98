"""The reference a relay worker is measured against: the plainest Python UDP forwarder.

``python -m bench.plain_forwarder --listen H:P --to H:P`` receives on one socket and sends every
datagram on, unchanged, to one fixed destination: ``recvfrom_into`` then ``sendto`` of a
memoryview slice, one datagram per syscall, no batching, no parsing. It is what anyone would write
first, which makes it the yardstick for the relay's "at most 0.7x the CPU per packet" criterion
(`bench/relay_pps.py`).

The forwarding loop is the measured hot path, so the bounds cost it nothing per packet: the packet
bound is the ``range`` it iterates over and the time bound is a SIGALRM that interrupts the
blocking receive (a socket timeout would make CPython poll(2) before every recvfrom).
"""

from __future__ import annotations

import signal
import socket
import sys

import click

from common.sockets import set_buffers

DEFAULT_BUFFER_BYTES = (
    4 << 20
)  # the relay's --socket-buffer default, for a like-for-like kernel side


class TimeUp(Exception):
    """The forwarder's time bound passed."""


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise click.BadParameter(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def forward(sock: socket.socket, dest: tuple[str, int], max_packets: int) -> int:
    """Forward until ``max_packets`` datagrams or TimeUp; return how many were forwarded."""
    buf = bytearray(65536)
    view = memoryview(buf)
    recvfrom_into = sock.recvfrom_into
    sendto = sock.sendto
    forwarded = 0
    try:
        for forwarded in range(1, max_packets + 1):  # noqa: B007 - the count is the result
            n, _src = recvfrom_into(buf)
            try:  # noqa: SIM105 - try is free in 3.11, contextlib.suppress is not
                sendto(view[:n], dest)
            except OSError:
                pass  # ECONNREFUSED/ENOBUFS: a forwarder drops, as UDP does
    except TimeUp:
        forwarded -= 1  # the interrupted receive got nothing
    return forwarded


@click.command()
@click.option("--listen", required=True, help="HOST:PORT to receive on.")
@click.option("--to", "to", required=True, help="HOST:PORT every datagram is sent to.")
@click.option(
    "--max-seconds", type=float, default=600.0, show_default=True, help="Stop after this long."
)
@click.option(
    "--max-packets",
    type=click.IntRange(min=1),
    default=10**9,
    show_default=True,
    help="Stop after forwarding this many datagrams.",
)
@click.option(
    "--buffer-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_BUFFER_BYTES,
    show_default=True,
    help="SO_RCVBUF/SO_SNDBUF of the socket.",
)
def main(listen: str, to: str, max_seconds: float, max_packets: int, buffer_bytes: int) -> None:
    """Forward UDP datagrams from --listen to --to, one recvfrom_into/sendto pair per datagram."""
    host, port = parse_address(listen)
    dest = parse_address(to)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    set_buffers(sock, buffer_bytes)
    sock.bind((host, port))

    def time_up(signum: int, frame: object) -> None:
        raise TimeUp

    signal.signal(signal.SIGALRM, time_up)
    signal.setitimer(signal.ITIMER_REAL, max_seconds)
    print(f"plain forwarder {host}:{port} -> {dest[0]}:{dest[1]}", file=sys.stderr, flush=True)
    forwarded = forward(sock, dest, max_packets)
    signal.setitimer(signal.ITIMER_REAL, 0)
    print(f"forwarded {forwarded}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
