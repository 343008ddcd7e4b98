"""relay.admission without sockets: every reason a client's first packet is dropped for, and the
order of the checks, with bytes, flow keys and the time passed in."""

from __future__ import annotations

import base64
import socket
from collections.abc import Callable

import pytest

from common import stun
from common.hint import NONCE_LEN, Keyring, sign_hint
from common.verdict import Drop
from relay.addresspolicy import DEFAULT_DENY_NETWORKS, AddressPolicy
from relay.addrkey import AddressKeys
from relay.admission import FIRST_PACKET_RATE, Admission
from relay.config import parse_networks
from relay.control import RoutingConfig
from relay.counters import DROP_REASONS
from relay.flows import FlowLimits, FlowTable
from relay.mmsg import sockaddr_bytes
from relay.ratelimit import KeyedBuckets
from relay.routing import Routing

KEYRING = Keyring.generate(1)
KEYS = AddressKeys(socket.AF_INET)
SLOT_BYTES = 2048
MAX_HINT_AGE_S = 3600
NOW = 1000  # the worker's coarse monotonic second
UNIX_NOW = 1_750_000_000.0
TRANSCEIVER = ("127.0.0.1", 5000)
# The drops of the other direction and of sending, which admission never decides.
# Drops of the internal and peer-ingress paths (relay.worker), not of a client's first packet.
NOT_ADMISSION = {
    "unknown_peer",
    "encap_malformed",
    "wrong_family",
    "send_error",
    "hop_limit",
    "peer_denied",
}
# Drops of an ICE-TCP connection's later frames: relay.tcpconns's budgets and floors, and
# ``rechecks`` (its own tests below).
TCP_FRAMES = {"frame_too_short", "byte_rate", "other_hint"}


def key(host: str = "93.184.216.34", port: int = 40000) -> object:
    return KEYS.from_sockaddr(sockaddr_bytes(socket.AF_INET, host, port))


def admission(
    limits: FlowLimits | None = None,
    rate_per_s: int = 100,
    prefixes: int = 16,
    checks_per_s: int = 1000,
):
    """Admission for cluster 0, transceiver 1 allowlisted, the built-in denied ranges."""
    routing = Routing(socket.AF_INET, MAX_HINT_AGE_S)
    routing.apply(RoutingConfig(KEYRING, {1: TRANSCEIVER}))
    return Admission(
        cluster=0,
        keys=KEYS,
        policy=AddressPolicy(parse_networks("--deny-network", DEFAULT_DENY_NETWORKS)),
        first_packets=KeyedBuckets(rate_per_s, 2 * rate_per_s, prefixes, overflow=True),
        transceiver_checks=KeyedBuckets(checks_per_s, checks_per_s, 16),
        flows=FlowTable(limits or FlowLimits()),
        routing=routing,
        slot_bytes=SLOT_BYTES,
    )


def hint(cluster: int = 0, tid: int = 1, issued_s: float = UNIX_NOW, ring=KEYRING) -> str:
    return sign_hint(ring, cluster, tid, issued_s, bytes(NONCE_LEN))


def check(ufrag: str) -> bytes:
    """A browser's connectivity check to the server ufrag ``ufrag``."""
    return stun.binding_request(f"{ufrag}:cli", bytes(12))


def with_byte(ufrag: str, index: int, value: int) -> str:
    """The hint ``ufrag`` with one byte of its wire form replaced."""
    raw = bytearray(base64.b64decode(ufrag))
    raw[index] = value
    return base64.b64encode(raw).decode()


def as_reason(verdict: object) -> object:
    """A drop as its reason (the counter's label); a target as it is."""
    return verdict.reason if isinstance(verdict, Drop) else verdict


def verdicts(adm: Admission, *datagrams: bytes, client: object = None) -> list:
    client = key() if client is None else client
    return [as_reason(adm.accepts(memoryview(d), client, NOW, UNIX_NOW)) for d in datagrams]


# -- each drop reason: a scenario whose last verdict is that reason -------------------------------
def _overflow() -> list:
    """Prefix A fills the one-entry table; B and C share the overflow budget (a burst of 2)."""
    adm = admission(rate_per_s=1, prefixes=1)
    request = check(hint())
    verdicts(adm, request, client=key("93.184.1.1"))
    verdicts(adm, request, request, client=key("93.184.2.1"))
    return verdicts(adm, request, client=key("93.184.3.1"))


def _second_client_of_one_hint() -> list:
    adm = admission(FlowLimits(max_pending_per_ufrag=1))
    request = check(hint())
    verdicts(adm, request, client=key("93.184.1.1"))
    return verdicts(adm, request, client=key("93.184.2.1"))


def _checks_from_many_prefixes(adm: Admission | None = None) -> list:
    """Each from its own /24, so no prefix budget is spent out: only the transceiver's is."""
    adm = adm or admission(checks_per_s=3)
    return [
        as_reason(adm.accepts(memoryview(check(hint())), key(f"93.184.{i}.1"), NOW, UNIX_NOW))
        for i in range(4)
    ]


def _flipped_tag() -> list:
    ufrag = hint()
    return verdicts(admission(), check(with_byte(ufrag, -1, base64.b64decode(ufrag)[-1] ^ 1)))


SCENARIOS: dict[str, Callable[[], list]] = {
    "empty_or_oversize": lambda: verdicts(admission(), b"", bytes(SLOT_BYTES)),
    "no_flow": lambda: verdicts(admission(), b"\x80rtp"),
    "not_confirmed": lambda: verdicts(admission(), check(hint()), b"\x80rtp"),
    "denied_address": lambda: verdicts(admission(), check(hint()), client=key("10.1.2.3")),
    "first_packet_rate": lambda: verdicts(admission(rate_per_s=1), *[check(hint())] * 3),
    "first_packet_overflow": _overflow,
    "stun_malformed": lambda: verdicts(admission(), b"\x00\x01\x00\x04junk"),
    "bad_username": lambda: verdicts(admission(), stun.binding_request("no-colon", bytes(12))),
    "hint_malformed": lambda: verdicts(admission(), check("tooshort")),
    "hint_version": lambda: verdicts(admission(), check(with_byte(hint(), 0, 0x21))),
    "hint_unknown_key": lambda: verdicts(admission(), check(with_byte(hint(), 0, 0x1F))),
    "hint_bad_tag": _flipped_tag,
    "hint_expired": lambda: verdicts(
        admission(), check(hint(issued_s=UNIX_NOW - MAX_HINT_AGE_S - 120))
    ),
    "hint_future": lambda: verdicts(admission(), check(hint(issued_s=UNIX_NOW + 3600))),
    "unknown_cluster": lambda: verdicts(admission(), check(hint(cluster=1))),
    "unknown_transceiver": lambda: verdicts(admission(), check(hint(tid=9))),
    "transceiver_stun_rate": _checks_from_many_prefixes,
    "pending_ufrag_limit": _second_client_of_one_hint,
}


@pytest.mark.parametrize("reason", SCENARIOS)
def test_each_drop_reason_is_returned_by_its_check(reason):
    assert SCENARIOS[reason]()[-1] == reason


def test_every_drop_reason_of_a_client_packet_has_a_scenario():
    assert set(SCENARIOS) == set(DROP_REASONS) - NOT_ADMISSION - TCP_FRAMES


def test_a_drop_is_one_object_per_reason_made_once_not_per_packet():
    adm = admission()
    first, second = (adm.accepts(memoryview(b"\x80rtp"), key(), NOW, UNIX_NOW) for _ in "ab")
    assert isinstance(first, Drop) and first is second
    forged = memoryview(check(with_byte(hint(), 0, 0x1F)))
    hint_drops = [adm.accepts(forged, key(f"93.184.{i}.1"), NOW, UNIX_NOW) for i in range(2)]
    assert hint_drops[0].reason == "hint_unknown_key" and hint_drops[0] is hint_drops[1]


# -- what is accepted ---------------------------------------------------------------------------
def test_a_valid_check_makes_a_pending_flow_and_names_its_transceiver():
    adm = admission()
    ufrag = hint()
    (target,) = verdicts(adm, check(ufrag))
    assert (target.tid, target.address) == (1, TRANSCEIVER)
    assert adm.flows.pending[key()].ufrag == ufrag


def test_retransmitted_checks_of_a_pending_client_are_forwarded_again():
    adm = admission(FlowLimits(max_pending_per_ufrag=1))
    request = check(hint())
    assert [v.tid for v in verdicts(adm, request, request, request)] == [1, 1, 1]
    assert len(adm.flows.pending) == 1


def test_a_pending_client_is_refused_media_but_not_checks():
    adm = admission()
    request = check(hint())
    assert [getattr(v, "tid", v) for v in verdicts(adm, request, b"\x80rtp", request)] == [
        1,
        "not_confirmed",
        1,
    ]


def test_the_largest_datagram_that_fits_the_slot_is_judged_not_refused_for_size():
    assert verdicts(admission(), b"\x80" * (SLOT_BYTES - 1)) == ["no_flow"]


# -- the order: cheapest and least trusting first ------------------------------------------------
def test_a_denied_address_spends_no_budget_and_makes_no_flow():
    adm = admission(rate_per_s=1)
    denied = key("127.0.0.1")
    assert verdicts(adm, *[check(hint())] * 5, client=denied) == ["denied_address"] * 5
    assert len(adm.first_packets) == 0 and not adm.flows.pending


def test_the_budget_is_spent_before_parsing_so_malformed_floods_are_cut_too():
    adm = admission(rate_per_s=1)  # a burst of 2
    assert verdicts(adm, b"\x00junk", b"\x00junk", check(hint())) == [
        "stun_malformed",
        "stun_malformed",
        "first_packet_rate",
    ]


def test_media_from_an_unknown_client_spends_no_first_packet_budget():
    adm = admission(rate_per_s=1)
    assert verdicts(adm, *[b"\x80rtp"] * 5) == ["no_flow"] * 5
    assert len(adm.first_packets) == 0


def test_a_refused_hint_makes_no_pending_flow():
    adm = admission()
    verdicts(adm, check(hint(tid=9)), check(hint(cluster=1)), check("tooshort"))
    assert not adm.flows.pending


def test_budgets_refill_with_the_time_passed_in():
    adm = admission(rate_per_s=1)
    request = check(hint())
    verdicts(adm, request, request)
    assert adm.accepts(memoryview(request), key(), NOW, UNIX_NOW) is FIRST_PACKET_RATE
    assert adm.accepts(memoryview(request), key(), NOW + 1, UNIX_NOW).tid == 1


def test_denies_judges_the_address_of_a_key_by_the_policy():
    adm = admission()
    assert adm.denies(key("10.0.0.1")) and adm.denies(key("169.254.169.254"))
    assert not adm.denies(key("93.184.216.34"))


# -- the per-transceiver budget of checks ----------------------------------------------------------
def test_a_transceivers_check_budget_spans_prefixes_and_refills_with_time():
    adm = admission(checks_per_s=3)
    assert [getattr(v, "tid", v) for v in _checks_from_many_prefixes(adm)] == [
        1,
        1,
        1,
        "transceiver_stun_rate",
    ]
    assert len(adm.flows.pending) == 3, "a refused check makes no pending flow"
    later = adm.accepts(memoryview(check(hint())), key("93.185.0.1"), NOW + 1, UNIX_NOW)
    assert later.tid == 1


def test_forged_hints_spend_no_transceiver_budget():
    adm = admission(checks_per_s=1)
    ufrag = hint()
    forged = with_byte(ufrag, -1, base64.b64decode(ufrag)[-1] ^ 1)
    assert verdicts(adm, *[check(forged)] * 5) == ["hint_bad_tag"] * 5
    assert verdicts(adm, check(ufrag))[0].tid == 1


# -- later frames of an admitted, unconfirmed ICE-TCP connection (rechecks) ----------------------
def rechecks(adm: Admission, ufrag: str, *frames: bytes, client: object = None) -> list:
    client = key() if client is None else client
    return [as_reason(adm.rechecks(memoryview(f), client, ufrag, NOW, UNIX_NOW)) for f in frames]


def test_rechecks_forward_the_connections_own_checks_and_nothing_else():
    adm = admission()
    ufrag = hint()
    assert rechecks(adm, ufrag, check(ufrag), b"\x80rtp", b"\x16dtls", check(hint(tid=9))) == [
        None,
        "not_confirmed",
        "not_confirmed",
        "unknown_transceiver",
    ]
    other = sign_hint(KEYRING, 0, 1, UNIX_NOW, b"\x01" * NONCE_LEN)
    assert rechecks(adm, ufrag, check(other)) == ["other_hint"]
    assert not adm.flows.pending, "the connection is the flow: rechecks make none"


def test_rechecks_spend_the_prefix_and_transceiver_budgets_as_first_packets_do():
    adm = admission(rate_per_s=1)  # a burst of 2 per prefix
    ufrag = hint()
    assert rechecks(adm, ufrag, *[b"\x00\x01\x00\x00junk"] * 2, check(ufrag)) == [
        "stun_malformed",
        "stun_malformed",
        "first_packet_rate",
    ]
    adm = admission(checks_per_s=2)
    got = [rechecks(adm, ufrag, check(ufrag), client=key(f"93.184.{i}.1"))[0] for i in range(3)]
    assert got == [None, None, "transceiver_stun_rate"]
