"""Which session a datagram on the shared media socket belongs to, and where replies go.

Sans-I/O, in the shape of pion's udp_mux: one table, one lookup order, named here:

1. by client address (IP, port) — every packet after a session's first successful check;
2. else, only for a STUN Binding request: by the server ufrag in its USERNAME, and only if its
   MESSAGE-INTEGRITY verifies with that session's password (so an address is learned only from a
   peer that proved it knows the session's credentials) and it is not a replay (its transaction
   id was not seen from another address);
3. else: dropped, with a reason.

A session may be reached at several client addresses over its life (several client candidates
during ICE checks, NAT rebinding, a new relay). STUN goes back to the address it answers (if that
address authenticated for the session); media and DTLS go to the newest address that passed a
check ("latching"), through the relay it was last heard through (any packet of the latched
address moves the relay: a replaced relay is followed at once), or directly when the client
talks to the socket without a relay. At most ``MAX_ADDRESSES`` are kept per session, oldest
dropped first, and ``expire`` forgets those the session left behind once they fall silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from common import stun

Addr = tuple[str, int]
S = TypeVar("S")
MAX_ADDRESSES = 8
MAX_TRANSACTIONS = 256  # remembered per session, to refuse replayed checks
ADDRESS_TTL_S = 30.0  # an address left behind and silent this long is forgotten (RFC 7675's 30 s)


@dataclass
class Path:
    """Where a client is reached: its address, and the relay in front of it (None = direct)."""

    client: Addr
    relay: Addr | None


@dataclass
class Route(Generic[S]):
    session: S | None
    reason: str = ""  # why it was dropped, when session is None
    learned: bool = False  # this packet authenticated a new client address for the session


@dataclass
class _Entry(Generic[S]):
    session: S
    password: bytes
    addresses: dict[Addr, Addr | None] = field(default_factory=dict)  # client -> its relay
    transactions: dict[bytes, Addr] = field(default_factory=dict)  # check id -> its sender
    path: Path | None = None
    heard: set[Addr] = field(default_factory=set)  # older addresses heard since the last sweep
    quiet_since: dict[Addr, float] = field(default_factory=dict)  # older address -> silent since


class Demux(Generic[S]):
    """Sessions keyed by their server ufrag; client addresses learned from authenticated checks."""

    def __init__(self) -> None:
        self._by_ufrag: dict[str, _Entry[S]] = {}
        self._by_addr: dict[Addr, _Entry[S]] = {}

    def __len__(self) -> int:
        return len(self._by_ufrag)

    def __contains__(self, ufrag: str) -> bool:
        return ufrag in self._by_ufrag

    @property
    def addresses(self) -> int:
        return len(self._by_addr)

    def add(self, ufrag: str, password: str, session: S) -> None:
        if ufrag in self._by_ufrag:
            raise ValueError("ufrag already in use")
        self._by_ufrag[ufrag] = _Entry(session, password.encode())

    def remove(self, ufrag: str) -> None:
        entry = self._by_ufrag.pop(ufrag, None)
        if entry is not None:
            for addr in entry.addresses:
                if self._by_addr.get(addr) is entry:
                    del self._by_addr[addr]

    def route(self, data: bytes, client: Addr, relay: Addr | None) -> Route[S]:
        """Decide the session of one datagram from ``client`` (arrived through ``relay``)."""
        entry = self._by_addr.get(client)
        if entry is not None:
            path = entry.path
            latched = path is not None and path.client == client
            if path is not None and latched and path.relay is not None and relay is not None:
                # The latched client, now through another relay (a relay was replaced): follow
                # at once. Relays are trusted and forward only what that address really sent.
                # (Between relayed and direct, as below, only an authenticated check moves it.)
                if path.relay != relay:
                    entry.path = Path(client, relay)
                    entry.addresses[client] = relay
            else:
                if not latched:
                    entry.heard.add(client)  # an older address, still in use: not stale
                if data[:1] and data[0] < 4 and self._fresh_check(data, client, entry):
                    # An older address: only an authenticated check moves back to it.
                    entry.path = Path(client, relay)
                    entry.addresses[client] = relay
            return Route(entry.session)
        if not data or data[0] > 3:
            return Route(None, "unknown_address")
        try:
            ufrag = stun.server_ufrag(stun.binding_request_username(data))
        except stun.StunError:
            return Route(None, "not_a_check")
        entry = self._by_ufrag.get(ufrag)
        if entry is None:
            return Route(None, "unknown_ufrag")
        if not self._authenticated(data, entry):
            return Route(None, "bad_integrity")
        if not self._fresh_check(data, client, entry):
            return Route(None, "replayed")
        entry.addresses.pop(client, None)
        entry.addresses[client] = relay
        if len(entry.addresses) > MAX_ADDRESSES:
            self._forget(entry, next(iter(entry.addresses)))
        self._by_addr[client] = entry
        entry.path = Path(client, relay)
        return Route(entry.session, learned=True)

    def _fresh_check(self, data: bytes, client: Addr, entry: _Entry[S]) -> bool:
        """Authenticated, and not a copy of a check seen from another address.

        STUN has no replay protection: a captured check, resent from a spoofed address, verifies.
        Retransmissions reuse their transaction id from the same address, so a known id from a
        different address is a replay and would make us answer (and latch to) its victim.
        """
        if not self._authenticated(data, entry):
            return False
        txid = bytes(data[8:20])
        sender = entry.transactions.get(txid)
        if sender is not None:
            return sender == client
        if len(entry.transactions) >= MAX_TRANSACTIONS:
            del entry.transactions[next(iter(entry.transactions))]
        entry.transactions[txid] = client
        return True

    @staticmethod
    def _authenticated(data: bytes, entry: _Entry[S]) -> bool:
        try:
            return stun.check_integrity(data, entry.password)
        except stun.StunError:
            return False

    def path(self, ufrag: str) -> Path | None:
        """The newest authenticated way to the session's client, or None before the first."""
        entry = self._by_ufrag.get(ufrag)
        return entry.path if entry else None

    def path_to(self, ufrag: str, client: Addr) -> Path | None:
        """The way to one authenticated address of the session (for STUN replies), else None."""
        entry = self._by_ufrag.get(ufrag)
        if entry is None or client not in entry.addresses:
            return None
        return Path(client, entry.addresses[client])

    def expire(self, now: float, ttl_s: float = ADDRESS_TTL_S) -> int:
        """Forget addresses a session moved away from and has not heard from for ``ttl_s``.

        Called periodically (``now`` from a monotonic clock). After a NAT rebinding or a move to
        another relay the old address is no longer the session's; once forgotten, a datagram
        from it is unknown again, so whoever holds that address next (a NAT reuses ports)
        reaches nothing. Returns how many were forgotten.
        """
        forgotten = 0
        for entry in self._by_ufrag.values():
            current = entry.path.client if entry.path is not None else None
            for addr in list(entry.addresses):
                if addr == current or addr in entry.heard:
                    entry.quiet_since.pop(addr, None)
                elif now - entry.quiet_since.setdefault(addr, now) >= ttl_s:
                    self._forget(entry, addr)
                    forgotten += 1
            entry.heard.clear()
        return forgotten

    def _forget(self, entry: _Entry[S], client: Addr) -> None:
        del entry.addresses[client]
        entry.quiet_since.pop(client, None)
        if self._by_addr.get(client) is entry:
            del self._by_addr[client]
