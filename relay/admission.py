"""Where a packet is admitted: the relay's rule for a datagram from a client without a flow.

A confirmed client's packets never come here (the worker forwards them unread). Every other
datagram from the public socket is judged by ``Admission.accepts``, in this order, cheapest and
least trusting first (docs/relay.md, "Packets"):

1. size: empty, or filling the receive slot (maybe truncated)  -> ``empty_or_oversize``
2. class by first byte (RFC 7983): only STUN may start a flow   -> ``not_confirmed`` (the client
   is pending) or ``no_flow``
3. the client address (relay.addresspolicy)                     -> ``denied_address``
4. the source prefix's first-packet budget (before any parsing) -> ``first_packet_rate``, or
   ``first_packet_overflow`` when the prefix table is full
5. a well-formed, fingerprinted Binding request with a USERNAME -> ``stun_malformed``
6. USERNAME is "<server ufrag>:<client ufrag>"                  -> ``bad_username``
7. the server ufrag is a valid hint (common.hint)               -> ``hint_<reason>``
8. for this cluster, or another one with a route (--route)     -> ``unknown_cluster``
9. naming an allowlisted transceiver (this cluster)             -> ``unknown_transceiver``
10. the transceiver's budget of checks at this worker           -> ``transceiver_stun_rate``
11. the flow table's limits for new pending flows (relay.flows) -> ``pending_ufrag_limit``

Step 10 bounds what one transceiver receives from the clients without a flow, whichever
prefixes they come from (the per-prefix budget of step 4 bounds one network only): a token
bucket per transceiver id (a verified one: only allowlisted ids get one, so the table holds at
most the allowlist), ``--transceiver-stun-rate`` per second, bursts of as many. Routes are not
budgeted here (another cluster's relay budgets its own transceivers).

Steps 5-9 (``hint_target``) are shared with the peer ingress of a cluster relay
(relay.edgeflows): a datagram an edge relays without a flow is judged by the same rule. The first
frame of a TCP connection (ICE over TCP, relay.tcpfront) is judged by all of it, by an instance
of its own: the same policy, budgets and routing, a flow table of its own; and every later
frame of an admitted connection its transceiver has not answered yet by ``rechecks``, as a
pending UDP flow's packets are judged by steps 2, 4-10 (a frame cannot be empty, the address
was judged at accept, and the connection is the flow, so no new one is made).

An accepted datagram has made (or kept) a pending flow and is forwarded to the returned target
(a transceiver, or a route to another cluster's relays).
Sans-I/O: a decision over bytes, a flow key and the time passed in; its state is the objects it
is given (the first-packet budget and the flow table change as it decides). The worker counts
the drop it returns by its reason; each drop is a constant below (``common.verdict.Drop``).
"""

from __future__ import annotations

from collections.abc import Hashable

from common.hint import HINT_ERROR_REASONS, HintError
from common.packet_class import CLASS_BY_FIRST_BYTE, PacketClass
from common.stun import StunError, binding_request_username, server_ufrag
from common.verdict import Drop, drop
from relay.addresspolicy import AddressPolicy
from relay.addrkey import AddressKeys
from relay.flows import FlowTable
from relay.ratelimit import KeyedBuckets
from relay.routing import Routing, Target

_STUN = int(PacketClass.STUN)
# The verdicts, made once: a drop is returned, never built, per packet (common.verdict).
EMPTY_OR_OVERSIZE = drop("empty_or_oversize")
NOT_CONFIRMED = drop("not_confirmed")
NO_FLOW = drop("no_flow")
DENIED_ADDRESS = drop("denied_address")
FIRST_PACKET_RATE = drop("first_packet_rate")
FIRST_PACKET_OVERFLOW = drop("first_packet_overflow")
STUN_MALFORMED = drop("stun_malformed")
BAD_USERNAME = drop("bad_username")
HINT = {reason: drop("hint_" + reason) for reason in HINT_ERROR_REASONS}
UNKNOWN_CLUSTER = drop("unknown_cluster")
UNKNOWN_TRANSCEIVER = drop("unknown_transceiver")
TRANSCEIVER_STUN_RATE = drop("transceiver_stun_rate")
OTHER_HINT = drop("other_hint")


class Admission:
    """The rule for a client's first packets, over the state it needs (see the module docstring)."""

    def __init__(
        self,
        cluster: int,
        keys: AddressKeys,
        policy: AddressPolicy,
        first_packets: KeyedBuckets,
        transceiver_checks: KeyedBuckets,
        flows: FlowTable,
        routing: Routing,
        slot_bytes: int,
    ) -> None:
        self.cluster = cluster
        self.keys = keys
        self.policy = policy
        # Before the HMAC of a hint (~9 us): per source prefix, a bounded table; a spoofed flood
        # from more prefixes than it holds shares one overflow budget (relay.ratelimit).
        self.first_packets = first_packets
        self.transceiver_checks = transceiver_checks  # step 10, by transceiver id
        self.flows = flows
        self.routing = routing
        self.slot_bytes = slot_bytes  # the receive slot: a datagram that fills it was truncated

    def denies(self, key: Hashable) -> bool:
        """Is this client's address one the relay never admits nor sends to (--deny-network)?"""
        return self.policy.denies(self.keys.address(key))

    def accepts(
        self, datagram: bytes | memoryview, key: Hashable, now: int, unix_now: float
    ) -> Target | Drop:
        """The transceiver to forward ``datagram`` from client ``key`` to, or why it is dropped.

        ``now`` is the worker's coarse monotonic second (budgets and flows), ``unix_now`` the wall
        clock a hint's issue time is checked against. A drop's reason is a label of
        relay.counters.DROP_REASONS.
        """
        if not 0 < len(datagram) < self.slot_bytes:
            return EMPTY_OR_OVERSIZE
        if CLASS_BY_FIRST_BYTE[datagram[0]] != _STUN:
            return NOT_CONFIRMED if key in self.flows.pending else NO_FLOW
        if self.denies(key):  # before any table is touched: it never gets a flow
            return DENIED_ADDRESS
        prefix = self.keys.prefix(key)
        decided = self._hint_within_budgets(datagram, prefix, None, now, unix_now)
        if isinstance(decided, Drop):
            return decided
        target, ufrag = decided
        refused = self.flows.admit(key, prefix, ufrag, target.tid, now)
        return target if refused is None else refused

    def rechecks(
        self, datagram: bytes | memoryview, key: Hashable, ufrag: str, now: int, unix_now: float
    ) -> Drop | None:
        """Why a frame of an admitted, unconfirmed TCP connection (client ``key``, admitted with
        hint ``ufrag``) is dropped, or None to forward it: steps 2, 4-10, and the hint must be
        the connection's (``other_hint``)."""
        if CLASS_BY_FIRST_BYTE[datagram[0]] != _STUN:
            return NOT_CONFIRMED
        decided = self._hint_within_budgets(datagram, self.keys.prefix(key), ufrag, now, unix_now)
        return decided if isinstance(decided, Drop) else None

    def _hint_within_budgets(
        self,
        datagram: bytes | memoryview,
        prefix: Hashable,
        ufrag: str | None,
        now: int,
        unix_now: float,
    ) -> tuple[Target, str] | Drop:
        """Steps 4 to 10, shared by a first packet and a pending TCP connection's frames: the
        prefix's first-packet budget, the hint's target and ufrag (the connection's own if
        ``ufrag`` is given, else ``other_hint``), then that transceiver's STUN budget."""
        budgets = self.first_packets
        if not budgets.allow(prefix, now):
            return FIRST_PACKET_RATE if prefix in budgets else FIRST_PACKET_OVERFLOW
        decided = hint_target(datagram, self.routing, self.cluster, unix_now)
        if isinstance(decided, Drop):
            return decided
        target, got = decided
        if ufrag is not None and got != ufrag:
            return OTHER_HINT
        if target.health is None and not self.transceiver_checks.allow(target.tid, now):
            return TRANSCEIVER_STUN_RATE
        return decided


def hint_target(
    datagram: bytes | memoryview, routing: Routing, cluster: int, unix_now: float
) -> tuple[Target, str] | Drop:
    """The target a Binding request's hint names, with the hint (the server ufrag), or why
    not: steps 5-9 of the module docstring."""
    try:
        username = binding_request_username(datagram)
    except StunError:
        return STUN_MALFORMED
    try:
        ufrag = server_ufrag(username)
    except StunError:
        return BAD_USERNAME
    verifier = routing.verifier
    assert verifier is not None, "no routing configuration applied yet"
    try:
        hint = verifier.verify(ufrag, unix_now)
    except HintError as exc:
        return HINT[exc.reason]
    if hint.cluster != cluster:
        route = routing.routes.get(hint.cluster)
        return UNKNOWN_CLUSTER if route is None else (route, ufrag)
    target = routing.targets.get(hint.transceiver_id)
    if target is None:
        return UNKNOWN_TRANSCEIVER
    return target, ufrag
