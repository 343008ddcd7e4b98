"""The sessions' table: a client address or a check's ufrag to its session, and where replies go.

Sans-I/O, in the shape of pion's udp_mux: one table, one lookup order, named here:

1. by client address (IP, port) — every packet after a session's first authenticated check;
2. else, only for a STUN Binding request: by the server ufrag in its USERNAME, and only if its
   MESSAGE-INTEGRITY verifies with that session's password (so an address is learned only from a
   peer that proved it knows the session's credentials) and it is not a replay (its transaction
   id was not seen from another address);
3. else: dropped, with a reason.

Two kinds of trust, because an incoming check proves nothing about its source: STUN has no replay
protection, so whoever sees a client's traffic can resend a captured check from any (spoofed)
address. Hence:

- a *learned* address (an authenticated, fresh check came from it) may receive STUN: answers to
  its checks, and our own checks toward it, the latter on a small credit (``REQUEST_CREDIT``) so
  that an address that never answers gets a bounded number of them (no amplification);
- the *path* (where media and DTLS go) moves only when ICE says a check round trip to an address
  succeeded (``select``: our request, answered with the client's credentials, RFC 8445 7.2.5.3 and
  RFC 7675). An address the path leaves must prove itself again before media returns to it.

The path follows the relay its address was last heard through (any packet of the path's address
from another of our relays moves it: a replaced relay is followed at once), or goes directly when
the client talks to the socket without a relay. Attacker and bounds, per session: at most
``MAX_ADDRESSES`` learned addresses (a newcomer evicts the one not heard from for longest, never
the path), ``MAX_TRANSACTIONS`` remembered check ids (every check's, whatever its address), and
``expire`` forgets the addresses the path left once no check has come from them for a while.
``on_forget`` tells the owner (ICE) so it drops its own state for that address.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from common import stun
from common.addr import Addr

S = TypeVar("S")

MAX_ADDRESSES = 4  # NAT rebinding needs 2-3 at once; a phone's Wi-Fi and cellular one more
MAX_TRANSACTIONS = 256  # check ids remembered per session, to refuse replayed checks
ADDRESS_TTL_S = 30.0  # an address off the path, with no check from it this long, is forgotten
# Our own Binding requests (checks) an address off the path may receive: two to start with, one
# more per fresh check it sends, never more than four banked. A spoofed source thus gets at most
# one answer per check "it" sent, plus a handful of retransmitted checks, ever.
REQUEST_CREDIT = 2
MAX_REQUEST_CREDIT = 4
_BINDING_REQUEST = stun.BINDING_REQUEST.to_bytes(2, "big")  # a message's first two bytes

UNKNOWN_ADDRESS = "unknown_address"  # not from a learned address, and not STUN
NOT_A_CHECK = "not_a_check"  # STUN from an unknown address, but no Binding request with a USERNAME
UNKNOWN_UFRAG = "unknown_ufrag"  # a check for no session of ours
BAD_INTEGRITY = "bad_integrity"  # a check whose MESSAGE-INTEGRITY does not verify
REPLAYED = "replayed"  # a check id already seen from another address
DROP_REASONS = (UNKNOWN_ADDRESS, NOT_A_CHECK, UNKNOWN_UFRAG, BAD_INTEGRITY, REPLAYED)


@dataclass
class Path:
    """Where a client is reached: its address, and the relay in front of it (None = direct)."""

    client: Addr
    relay: Addr | None


@dataclass(frozen=True, slots=True)
class Route(Generic[S]):
    session: S | None
    reason: str = ""  # why it was dropped, when session is None
    learned: bool = False  # this packet authenticated a new client address for the session


@dataclass
class _Address:
    relay: Addr | None  # the relay it was last heard through (None = direct)
    credit: int = REQUEST_CREDIT  # our checks it may still receive while off the path


@dataclass
class _Entry(Generic[S]):
    session: S
    password: bytes
    # Learned addresses, least recently checked first (the eviction order).
    addresses: dict[Addr, _Address] = field(default_factory=dict)
    transactions: dict[bytes, Addr] = field(default_factory=dict)  # check id -> its sender
    path: Path | None = None
    routed: Route[S] | None = None  # the verdict for its media, made once (see _route_known)
    heard: set[Addr] = field(default_factory=set)  # off-path addresses checked since last sweep
    quiet_since: dict[Addr, float] = field(default_factory=dict)  # off-path address -> since


class Demux(Generic[S]):
    """Sessions keyed by their server ufrag; client addresses learned from authenticated checks."""

    def __init__(self, on_forget: Callable[[S, Addr], None] | None = None) -> None:
        self._by_ufrag: dict[str, _Entry[S]] = {}
        self._by_addr: dict[Addr, _Entry[S]] = {}
        self._on_forget = on_forget

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
            return self._route_known(entry, data, client, relay)
        if not data or data[0] > 3:
            return Route(None, UNKNOWN_ADDRESS)
        try:
            ufrag = stun.server_ufrag(stun.binding_request_username(data))
        except stun.StunError:
            return Route(None, NOT_A_CHECK)
        entry = self._by_ufrag.get(ufrag)
        if entry is None:
            return Route(None, UNKNOWN_UFRAG)
        if not self._authenticated(data, entry):
            return Route(None, BAD_INTEGRITY)
        if not self._fresh(data, client, entry):
            return Route(None, REPLAYED)
        if len(entry.addresses) >= MAX_ADDRESSES:
            self._evict_one(entry)
        entry.addresses[client] = _Address(relay)
        self._by_addr[client] = entry
        return Route(entry.session, learned=True)

    def _route_known(
        self, entry: _Entry[S], data: bytes, client: Addr, relay: Addr | None
    ) -> Route[S]:
        """A datagram from a learned address: media passes (DTLS and SRTP authenticate
        themselves); a check must verify and be fresh, and only refreshes the address."""
        address = entry.addresses[client]
        path = entry.path
        on_path = path is not None and path.client == client
        if on_path and relay is not None and path.relay is not None and path.relay != relay:
            # The path's client, now through another of our relays (a relay was replaced):
            # follow at once. Relays are trusted and forward only what that address really
            # sent. (Between relayed and direct only a check round trip moves the path.)
            entry.path = Path(client, relay)
            address.relay = relay
        if data[:2] != _BINDING_REQUEST:
            routed = entry.routed  # the same verdict for every media packet: made once
            if routed is None:
                routed = entry.routed = Route(entry.session)
            return routed
        if not self._authenticated(data, entry):
            return Route(None, BAD_INTEGRITY)
        if not self._fresh(data, client, entry):
            return Route(None, REPLAYED)
        if relay != address.relay and not on_path:
            address.relay = relay  # answered, and checked, the way it came
        address.credit = min(address.credit + 1, MAX_REQUEST_CREDIT)
        del entry.addresses[client]  # most recently checked last
        entry.addresses[client] = address
        if not on_path:
            entry.heard.add(client)
        return Route(entry.session)

    def _evict_one(self, entry: _Entry[S]) -> None:
        """Make room for a newcomer: forget the address off the path checked longest ago."""
        current = entry.path.client if entry.path is not None else None
        for addr in entry.addresses:
            if addr != current:
                self._forget(entry, addr)
                return

    def _fresh(self, data: bytes, client: Addr, entry: _Entry[S]) -> bool:
        """Not a copy of a check seen from another address; remembers every check's id.

        STUN has no replay protection: a captured check, resent from a spoofed address, verifies.
        Retransmissions reuse their transaction id from the same address, so a known id from a
        different address is a replay. Every id is remembered, whatever address it came from
        (bounded, oldest first).
        """
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

    def select(self, ufrag: str, client: Addr) -> bool:
        """ICE proved ``client`` with a check round trip: media goes there from now on.

        Returns False (nothing changes) if the address is not a learned one of the session.
        The address the path leaves keeps no credit: to get media back it must prove itself
        again, with a check of its own and a round trip.
        """
        entry = self._by_ufrag.get(ufrag)
        if entry is None or client not in entry.addresses:
            return False
        old = entry.path
        if old is not None and old.client != client and old.client in entry.addresses:
            entry.addresses[old.client].credit = 0
            entry.heard.add(old.client)  # just left: its quiet time starts at the next sweep
        entry.path = Path(client, entry.addresses[client].relay)
        entry.quiet_since.pop(client, None)
        return True

    def path(self, ufrag: str) -> Path | None:
        """Where the session's media goes: the address ICE last proved, or None before."""
        entry = self._by_ufrag.get(ufrag)
        return entry.path if entry else None

    def path_to(self, ufrag: str, client: Addr) -> Path | None:
        """The way to one learned address of the session (for STUN answers), else None."""
        entry = self._by_ufrag.get(ufrag)
        if entry is None or client not in entry.addresses:
            return None
        if entry.path is not None and entry.path.client == client:
            return entry.path
        return Path(client, entry.addresses[client].relay)

    def request_path(self, ufrag: str, client: Addr) -> Path | None:
        """The way for one of our own checks to ``client``: as ``path_to``, but an address off
        the path spends one credit per check, and None once it has none."""
        path = self.path_to(ufrag, client)
        if path is None:
            return None
        entry = self._by_ufrag[ufrag]
        if entry.path is not None and entry.path.client == client:
            return path
        address = entry.addresses[client]
        if address.credit <= 0:
            return None
        address.credit -= 1
        return path

    def expire(self, now: float, ttl_s: float = ADDRESS_TTL_S) -> int:
        """Forget addresses off the path that sent no check for ``ttl_s``.

        Called periodically (``now`` from a monotonic clock). After a NAT rebinding or a move to
        another relay the old address is no longer the session's; once forgotten, a datagram
        from it is unknown again, so whoever holds that address next (a NAT reuses ports)
        reaches nothing. Only checks count as signs of life: media proves nothing about its
        source at this layer. Returns how many were forgotten.
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
        entry.heard.discard(client)
        if self._by_addr.get(client) is entry:
            del self._by_addr[client]
        if self._on_forget is not None:
            self._on_forget(entry.session, client)
