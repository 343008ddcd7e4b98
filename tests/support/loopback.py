"""UDP on loopback for the tests: clients, reading what arrives within a bound, spoofed sources."""

from __future__ import annotations

import select
import socket
import struct
import time

from common.sockets import set_buffers


def udp_client() -> socket.socket:
    """A non-blocking client with 1 MiB buffers, read with ``collect`` (bursts of many flows)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    set_buffers(s, 1 << 20)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    return s


def collect(socks: list[socket.socket], want: int, timeout_s: float = 5.0) -> dict:
    """Read from ``socks`` until ``want`` datagrams arrived or the timeout passed."""
    got: dict[socket.socket, list[bytes]] = {s: [] for s in socks}
    total = 0
    deadline = time.monotonic() + timeout_s
    while total < want and time.monotonic() < deadline:
        ready, _, _ = select.select(socks, [], [], 0.05)
        for s in ready:
            while True:
                try:
                    got[s].append(s.recv(4096))
                    total += 1
                except BlockingIOError:
                    break
    return got


def udp(timeout_s: float = 0.2) -> socket.socket:
    """A blocking client whose reads give up after ``timeout_s``, read with ``drain``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(timeout_s)
    return s


def drain(sock: socket.socket) -> list[bytes]:
    """Everything queued at ``sock`` until one read times out."""
    got = []
    try:
        while True:
            got.append(sock.recv(4096))
    except TimeoutError:
        return got


class SpoofingSender:
    """Sends UDP datagrams with any IPv4 loopback source address and port (raw socket, root).

    For abuse tests: floods from thousands of "clients" without thousands of sockets.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)

    def send(self, src: tuple[str, int], dst: tuple[str, int], payload: bytes) -> None:
        udp_len = 8 + len(payload)
        udp = struct.pack("!HHHH", src[1], dst[1], udp_len, 0) + payload  # checksum 0: none
        # Version/IHL, TOS, total length (kernel fills), id (kernel fills), flags/fragment, TTL,
        # protocol UDP, checksum (kernel fills), source, destination.
        ip = struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, socket.IPPROTO_UDP, 0,
            socket.inet_aton(src[0]), socket.inet_aton(dst[0]),
        )  # fmt: skip
        self.sock.sendto(ip + udp, (dst[0], 0))

    def close(self) -> None:
        self.sock.close()


class FramedClient:
    """An ICE-TCP client's side of a relay connection: RFC 4571 frames over a real socket."""

    def __init__(self, address: tuple[str, int], rcvbuf: int | None = None) -> None:
        from relay.framing import FrameDecoder, frame

        self._frame = frame
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connecting: the window it announces follows it
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect(address)
        self.decoder = FrameDecoder(0xFFFF)

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()[:2]

    def send(self, payload: bytes) -> None:
        self.sock.sendall(self._frame(payload))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frames(self, want: int, timeout_s: float = 5.0) -> list[bytes]:
        """Frames until ``want`` arrived, the timeout passed or the relay closed."""
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not data:
                break
            got += self.decoder.feed(data)
        return got

    def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True once the relay closed (or reset) the connection; reads and discards frames."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
            try:
                if not self.sock.recv(65536):
                    return True
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return True
        return False

    def close(self) -> None:
        self.sock.close()
