"""The input language of the demultiplexer targets, and the model they are checked against.

An input is a script of datagrams and control steps, so that one input can authenticate a client,
then send media, move it, end a session... The first byte is the configuration (``flags & 1``:
the transceiver knows its relays' networks, ``--relay-network``); then each step is
``op arg source len body[len]``:

- ``op & 0x07``: the kind of step (``RAW`` .. ``CONTROL``); all but RAW and CONTROL build a STUN
  message for session ``arg % len(UFRAGS)`` with the builders of common.stun, because a mutator
  cannot forge an HMAC: without them no address would ever be learned;
- ``op & 0x08``: through a relay (``RELAYS[(op >> 4) & 1]``), else straight from the client;
- ``source``: the client address, ``SOURCES[source % len(SOURCES)]``.

The model is the security property, computed independently of the code under test: a client
address is *proven* for a session once a datagram from it carried a MESSAGE-INTEGRITY that
verifies with the session's password (fuzz.stunref). Deliveries may go only to a session that the
client address was proven for; replies only to whoever authenticated (see ``may_send``). Relays
are trusted to deliver to the client in the header: the two ``RELAYS`` when the transceiver knows
its relays' networks, any source of an encapsulated datagram when it does not (documented:
docs/security.md, "Spoofing a client through the media port").

Import this module after the modules under test (it imports common.stun and common.hint), so
that ``atheris.instrument_imports`` sees them first.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field

from common import encap, hint, stun
from fuzz import stunref

MAX_STEPS = 64

SOURCES: tuple[tuple, ...] = (
    ("198.51.100.1", 40000),
    ("198.51.100.1", 40001),  # the same host after NAT rebindings (more than MAX_ADDRESSES)
    ("198.51.100.1", 40002),
    ("198.51.100.1", 40003),
    ("198.51.100.1", 40004),
    ("198.51.100.1", 40005),
    ("198.51.100.2", 40000),
    ("203.0.113.9", 3478),
    ("2001:db8::7", 5000, 0, 0),  # asyncio gives IPv6 sources as 4-tuples
    ("::ffff:198.51.100.1", 40000),  # source 0 as a dual-stack socket would see it
    ("10.0.0.1", 4000),  # a client at the address of relay 0
    ("0.0.0.0", 0),
)
RELAYS: tuple[tuple[str, int], ...] = (("10.0.0.1", 4000), ("10.0.0.2", 4000))

RELAY_KEYS = frozenset((ipaddress.ip_address(h).packed, p) for h, p in RELAYS)

RAW, CHECK, CROSS, FLIP, NO_FINGERPRINT, RESPONSE, ATTRIBUTES, CONTROL = range(8)
KIND_NAMES = ("raw", "check", "cross", "flip", "no_fp", "response", "attributes", "control")
# CONTROL actions, from (arg >> 2) & 3.
SEND, REMOVE, READD, FORGET = range(4)

_RING = hint.Keyring({1: b"fuzz-demux-hint-key-0123456789ab"}, 1)
UFRAGS = tuple(
    hint.sign_hint(_RING, 0, 7, 1_750_000_000, bytes([i]) * hint.NONCE_LEN) for i in range(3)
)

AddrKey = tuple[bytes, int]
"""An address as the model compares them: packed IP bytes and port (text forms differ)."""
PathKey = tuple[AddrKey, AddrKey | None]


@functools.cache
def addr_key(addr: tuple) -> AddrKey:
    return ipaddress.ip_address(addr[0]).packed, addr[1]


@dataclass(slots=True)
class Step:
    source: int
    relay: int | None
    kind: int
    arg: int
    body: bytes

    def describe(self) -> str:
        via = f"relay {self.relay}" if self.relay is not None else "direct"
        name = KIND_NAMES[self.kind]
        return f"{name} src={self.source} {via} arg={self.arg} body={self.body.hex()}"


@dataclass(frozen=True, slots=True)
class Config:
    relay_networks: bool
    """The transceiver knows its relays (``--relay-network``); else any source may encapsulate."""

    def trusted_relay(self, relay: AddrKey | None) -> bool:
        """A relay: it delivers to the client address in the header and nowhere else."""
        return relay is not None and (relay in RELAY_KEYS or not self.relay_networks)


def config(data: bytes) -> Config:
    return Config(relay_networks=bool(data[:1] and data[0] & 1))


def steps(data: bytes) -> Iterator[Step]:
    i, count = 1, 0  # byte 0 is the configuration
    while i + 4 <= len(data) and count < MAX_STEPS:
        op, arg, source, n = data[i : i + 4]
        body = data[i + 4 : i + 4 + n]
        i += 4 + n
        count += 1
        relay = (op >> 4) & 1 if op & 0x08 else None
        yield Step(source % len(SOURCES), relay, op & 0x07, arg, body)


@dataclass
class Slot:
    """One session of the model: its credentials and what has been proven for it."""

    index: int
    ufrag: str
    generation: int = 0
    present: bool = True
    session: object = None
    proven: set[PathKey] = field(default_factory=set)
    """(client, relay) pairs proven in this generation, less the forgotten client addresses."""
    ever: set[PathKey] = field(default_factory=set)
    """Every pair proven in this generation: where replies may go."""

    @property
    def password(self) -> str:
        return self.password_of(self.generation)

    def password_of(self, generation: int) -> str:
        return f"fuzz-s{self.index}-g{generation}-password-0123456789"

    def clients(self) -> set[AddrKey]:
        return {client for client, _ in self.proven}

    def clients_ever(self) -> set[AddrKey]:
        return {client for client, _ in self.ever}

    def renew(self) -> None:
        self.generation += 1
        self.present = True
        self.proven = set()
        self.ever = set()


def make_slots() -> list[Slot]:
    return [Slot(i, ufrag) for i, ufrag in enumerate(UFRAGS)]


def learn(slots: list[Slot], payload: bytes, path: PathKey) -> None:
    """Record ``path`` as proven for every live session whose password signs ``payload``."""
    if not payload or payload[0] > 3:
        return
    for slot in slots:
        if slot.present and stunref.integrity_valid(payload, slot.password.encode()):
            slot.proven.add(path)
            slot.ever.add(path)


def may_send(config: Config, slot: Slot, client: AddrKey, relay: AddrKey | None) -> bool:
    """Whether a datagram of ``slot`` may leave toward ``client`` through ``relay``: whoever
    receives it must have authenticated for the session.

    Direct, or through one of our relays, the receiver is the client: its address must have been
    proven, by any path. Encapsulated to any other address, that address receives it and is not a
    relay: it must itself have relayed a proof for that client.
    """
    if relay is None or config.trusted_relay(relay):
        return client in slot.clients_ever()
    return (client, relay) in slot.ever


def path_allowed(config: Config, slot: Slot, client: AddrKey, relay: AddrKey | None) -> bool:
    """Whether the session's media path may be (client, relay): an address that authenticated
    for the session (docs/design.md: media moves only to an address proved by a round trip, which
    the harness models with ``select``). One relaxation is by design: the path's client heard
    through another of our relays is followed at once (transceiver/socket/demux.py)."""
    if (client, relay) in slot.ever:
        return True
    if client not in slot.clients_ever():
        return False
    return config.trusted_relay(relay)


def stun_payload(step: Step, slots: list[Slot]) -> bytes:
    """The STUN message a non-RAW datagram step sends (built, so its HMAC is right)."""
    slot = slots[step.arg % len(slots)]
    txid = step.body[:12].ljust(12, b"\0")
    username = f"{slot.ufrag}:fz{step.arg:02x}"
    key = slot.password.encode()
    try:
        if step.kind == CROSS:
            signer = slots[(step.arg >> 2) % len(slots)]
            generation = signer.generation - 1 if step.arg & 0x40 else signer.generation
            key = signer.password_of(generation).encode()  # generation -1: never valid
            return stun.binding_request(username, txid, key)
        if step.kind == FLIP:
            message = bytearray(stun.binding_request(username, txid, key))
            position = step.body[12] if len(step.body) > 12 else 0
            mask = step.body[13] if len(step.body) > 13 else 1
            message[position % len(message)] ^= mask
            return bytes(message)
        if step.kind == NO_FINGERPRINT:
            attrs = [(stun.ATTR_USERNAME, username.encode())]
            return stun.build(stun.BINDING_REQUEST, txid, attrs, key, fingerprint=False)
        if step.kind == RESPONSE:
            return stun.binding_success(txid, ("198.51.100.1", 40000), key)
        if step.kind == ATTRIBUTES:
            attrs = [(stun.ATTR_USERNAME, username.encode()), *_attributes(step.body[12:])]
            fingerprint = not step.arg & 0x80
            return stun.build(stun.BINDING_REQUEST, txid, attrs, key, fingerprint)
        return stun.binding_request(username, txid, key)
    except stun.StunError:  # e.g. an attribute list the builder refuses: send the body
        return step.body


def _attributes(data: bytes) -> list[tuple[int, bytes]]:
    """type (2) | length (1) | value, repeated: attributes the fuzzer chooses, signed for it."""
    found = []
    i = 0
    while i + 3 <= len(data):
        attr_type, n = int.from_bytes(data[i : i + 2], "big"), data[i + 2]
        found.append((attr_type, data[i + 3 : i + 3 + n]))
        i += 3 + n
    return found


def datagram(step: Step, slots: list[Slot]) -> tuple[bytes, tuple]:
    """(datagram, source address) as the media socket receives it."""
    payload = step.body if step.kind == RAW else stun_payload(step, slots)
    if step.relay is None:
        return payload, SOURCES[step.source]
    return _HEADERS[step.source] + payload, RELAYS[step.relay]


_HEADERS = tuple(encap.encode_header(host, port) for host, port, *_ in SOURCES)


def received(data: bytes, addr: tuple) -> tuple[AddrKey, AddrKey | None, bytes] | None:
    """The model's reading of a datagram: (client, relay, payload), None if not decodable.

    Written from the layout in common/encap.py's docstring, independently of its decoder.
    """
    if data[:1] != b"\xff":
        return addr_key(addr), None, data
    if len(data) < 6:
        return None
    version_family, port = data[1], int.from_bytes(data[4:6], "big")
    ip_len = {0x14: 4, 0x16: 16}.get(version_family)
    if ip_len is None or len(data) < 6 + ip_len:
        return None
    return (data[6 : 6 + ip_len], port), addr_key(addr), data[6 + ip_len :]
