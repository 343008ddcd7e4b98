"""A transceiver stand-in, and the first packet of a flow that a relay admits to it.

- ``StandInTransceiver`` is the transceiver end of the encapsulation, minus WebRTC: it answers
  every Binding request with a Binding success (which confirms the flow at the relay) and echoes
  every other payload back, prefixed with its own id so a test can tell who answered.
- ``hint_request`` builds the first packet of a flow: a Binding request whose USERNAME carries a
  signed hint.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time

from common import encap, stun
from common.hint import NONCE_LEN, Keyring, sign_hint
from common.sockets import set_buffers
from testbed.ports import family_of


def hint_request(
    keyring: Keyring,
    cluster: int,
    transceiver_id: int,
    now_s: float | None = None,
    client_ufrag: str = "cli0",
) -> tuple[bytes, str]:
    """A Binding request to the transceiver's signed ufrag; returns (packet, ufrag)."""
    ufrag = sign_hint(
        keyring,
        cluster,
        transceiver_id,
        time.time() if now_s is None else now_s,
        secrets.token_bytes(NONCE_LEN),
    )
    packet = stun.binding_request(f"{ufrag}:{client_ufrag}", secrets.token_bytes(12))
    return packet, ufrag


class StandInTransceiver:
    """A transceiver stand-in on a real UDP socket, served by a thread.

    Replies go back to the relay address each packet came from, as a real transceiver's do.
    Set ``reading = False`` to stop reading (the socket then becomes a sink that costs no CPU).
    """

    def __init__(self, tid: int, host: str = "127.0.0.1", echo: bool = True, port: int = 0) -> None:
        self.tid = tid
        self.sock = socket.socket(family_of(host), socket.SOCK_DGRAM)
        set_buffers(self.sock, 4 << 20)  # bursts in tests must not be lost in the kernel
        self.sock.bind((host, port))
        self.sock.settimeout(0.05)
        self.address: tuple[str, int] = self.sock.getsockname()[:2]
        self.echo = echo
        self.reading = True
        self.received: list[tuple[str, int, bytes]] = []  # (client ip, client port, payload)
        self.received_flags: list[int] = []  # the header's flags of each, e.g. encap.FLAG_TCP
        self.relay_addresses: set[tuple[str, int]] = set()
        self.relay_of_client: dict[tuple[str, int], tuple[str, int]] = {}  # the latest path
        self.stun_requests = 0
        self.malformed: list[tuple[str, int, bytes]] = []  # STUN that did not parse
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"standin-{tid}")

    def start(self) -> StandInTransceiver:
        self._thread.start()
        return self

    def _serve(self) -> None:
        prefix = f"T{self.tid}:".encode()
        while not self._stop.is_set():
            if not self.reading:
                time.sleep(0.01)
                continue
            try:
                data, relay = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            hdr, off = encap.decode_header(data)
            payload = data[off:]
            self.relay_addresses.add(relay[:2])
            self.relay_of_client[(hdr.client_ip, hdr.client_port)] = relay[:2]
            self.received_flags.append(hdr.flags)
            self.received.append((hdr.client_ip, hdr.client_port, payload))
            if payload[:1] and payload[0] < 4:
                try:
                    msg = stun.parse(payload)
                except stun.StunError:
                    self.malformed.append((hdr.client_ip, hdr.client_port, payload))
                    continue
                if msg.msg_type == stun.BINDING_REQUEST:
                    self.stun_requests += 1
                    reply = stun.binding_success(
                        msg.transaction_id, (hdr.client_ip, hdr.client_port)
                    )
                    self.sock.sendto(data[:off] + reply, relay)
                continue
            if self.echo:
                self.sock.sendto(data[:off] + prefix + payload, relay)

    def send_to_client(
        self, relay: tuple[str, int], client: tuple[str, int], payload: bytes, flags: int = 0
    ) -> None:
        """``flags=encap.FLAG_TCP``: to a client's TCP connection at the relay."""
        self.sock.sendto(encap.encapsulate(payload, client[0], client[1], flags=flags), relay)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

    def __enter__(self) -> StandInTransceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
