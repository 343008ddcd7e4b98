"""A loopback NAT in front of one client, whose outside address can move (a NAT rebinding)."""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import threading


class NatProxy:
    """A loopback NAT for one client: it sends on through an outside socket it can move.

    The client talks to ``inside`` (advertise it to the client as the relay's address); the
    proxy forwards to ``upstream`` from its outside socket and relays the answers back.
    ``rebind()`` moves the outside socket to a new address and port, as a NAT rebinding does.
    """

    def __init__(self, upstream: tuple[str, int], outside_hosts: tuple[str, ...] = ()) -> None:
        self.upstream = upstream
        self.inside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.inside.bind(("127.0.0.1", 0))
        self._hosts = list(outside_hosts or ("127.0.0.2", "127.0.0.3", "127.0.0.4"))
        self.outside = self._new_outside()
        self.client: tuple[str, int] | None = None
        self.captured: collections.deque[bytes] = collections.deque(maxlen=64)  # client's STUN
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="nat-proxy")

    @property
    def address(self) -> tuple[str, int]:
        return self.inside.getsockname()[:2]

    @property
    def outside_address(self) -> tuple[str, int]:
        return self.outside.getsockname()[:2]

    def _new_outside(self) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((self._hosts.pop(0), 0))
        return s

    def start(self) -> NatProxy:
        self._thread.start()
        return self

    def rebind(self) -> tuple[str, int]:
        with self._lock:
            old, self.outside = self.outside, self._new_outside()
        old.close()
        return self.outside_address

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                outside = self.outside
            try:
                ready, _, _ = select.select([self.inside, outside], [], [], 0.05)
            except (OSError, ValueError):
                continue  # the outside socket was just replaced
            for s in ready:
                try:
                    data, src = s.recvfrom(4096)
                except OSError:
                    continue
                if s is self.inside:
                    self.client = src[:2]
                    if data[:1] and data[0] < 4:  # what an eavesdropper on the path would see
                        self.captured.append(data)
                    with contextlib.suppress(OSError):
                        outside.sendto(data, self.upstream)
                elif self.client is not None:
                    self.inside.sendto(data, self.client)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.inside.close()
        self.outside.close()
