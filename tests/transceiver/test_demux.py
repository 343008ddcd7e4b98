"""The demultiplexer as a plain object: authenticated learning, latching, no cross-delivery."""

from __future__ import annotations

import secrets

from common import stun
from transceiver.demux import Demux

RELAY_A, RELAY_B = ("10.0.0.1", 4000), ("10.0.0.2", 4000)
CLIENT, MOVED = ("198.51.100.7", 50000), ("198.51.100.7", 50999)


def check(ufrag: str, password: str | None) -> bytes:
    key = password.encode() if password else None
    return stun.binding_request(f"{ufrag}:cli", secrets.token_bytes(12), integrity_key=key)


def table() -> Demux[str]:
    d: Demux[str] = Demux()
    d.add("ufragA", "passwordA-0123456789abcd", "A")
    d.add("ufragB", "passwordB-0123456789abcd", "B")
    return d


def test_unknown_address_needs_an_authenticated_check():
    d = table()
    assert d.route(b"\x80rtp", CLIENT, RELAY_A).reason == "unknown_address"
    assert d.route(b"\x16dtls", CLIENT, RELAY_A).session is None
    assert d.route(check("nobody", "x" * 22), CLIENT, RELAY_A).reason == "unknown_ufrag"
    assert d.route(check("ufragA", "wrong-password-000000000"), CLIENT, RELAY_A).reason == (
        "bad_integrity"
    )
    assert d.route(check("ufragA", None), CLIENT, RELAY_A).reason == "bad_integrity"
    assert d.path("ufragA") is None, "nothing learned from unauthenticated checks"


def test_authenticated_check_learns_the_address_then_media_follows():
    d = table()
    route = d.route(check("ufragA", "passwordA-0123456789abcd"), CLIENT, RELAY_A)
    assert route.session == "A" and route.learned
    assert d.route(b"\x80rtp", CLIENT, RELAY_A).session == "A"
    assert d.path("ufragA").client == CLIENT and d.path("ufragA").relay == RELAY_A
    assert d.path("ufragB") is None


def test_a_session_never_receives_another_sessions_packets():
    d = table()
    d.route(check("ufragA", "passwordA-0123456789abcd"), CLIENT, RELAY_A)
    # B's credentials from A's address do not move A's address to B.
    assert d.route(check("ufragB", "passwordB-0123456789abcd"), CLIENT, RELAY_A).session == "A"
    other = ("203.0.113.9", 1234)
    assert d.route(check("ufragB", "passwordB-0123456789abcd"), other, RELAY_A).session == "B"
    assert d.route(b"\x80x", other, RELAY_A).session == "B"
    assert d.route(b"\x80x", CLIENT, RELAY_A).session == "A"


def test_replies_latch_to_the_newest_authenticated_address_and_relay():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.route(check("ufragA", pw), MOVED, RELAY_A)  # NAT rebinding
    assert d.path("ufragA").client == MOVED
    d.route(b"\x80late packet from the old port", CLIENT, RELAY_A)
    assert d.path("ufragA").client == MOVED, "media alone never moves the path"
    d.route(b"\x80x", MOVED, RELAY_B)  # the relay in front was replaced: followed at once
    assert d.path("ufragA").relay == RELAY_B
    d.route(b"\x80x", CLIENT, RELAY_A)
    assert d.path("ufragA").client == MOVED and d.path("ufragA").relay == RELAY_B


def test_an_address_left_behind_expires_once_silent():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.route(check("ufragA", pw), MOVED, RELAY_A)  # NAT rebinding: CLIENT is left behind
    assert d.expire(100.0, ttl_s=30) == 0  # silent from now on
    d.route(b"\x80straggler", CLIENT, RELAY_A)  # still heard: the clock starts again
    assert d.expire(120.0, ttl_s=30) == 0
    assert d.expire(121.0, ttl_s=30) == 0
    assert d.expire(150.0, ttl_s=30) == 0  # silent for 29 s
    assert d.path_to("ufragA", CLIENT) is not None, "kept while it may still be in use"
    d.route(b"\x80x", MOVED, RELAY_A)  # the current path never expires, heard or not
    assert d.expire(151.0, ttl_s=30) == 1
    assert d.addresses == 1
    dropped = d.route(b"\x80x", CLIENT, RELAY_A)
    assert dropped.session is None and dropped.reason == "unknown_address"
    assert d.route(b"\x80x", MOVED, RELAY_A).session == "A"
    assert d.expire(10_000.0, ttl_s=30) == 0 and d.path("ufragA").client == MOVED
    # An authenticated check from the old address proves it again.
    assert d.route(check("ufragA", pw), CLIENT, RELAY_A).learned


def test_remove_forgets_every_address():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.route(check("ufragA", pw), MOVED, None)
    assert d.addresses == 2
    d.remove("ufragA")
    assert len(d) == 1 and d.addresses == 0
    assert d.route(b"\x80x", CLIENT, RELAY_A).session is None


def test_a_replayed_check_from_another_address_is_refused():
    d = table()
    request = check("ufragA", "passwordA-0123456789abcd")
    assert d.route(request, CLIENT, RELAY_A).learned
    assert d.route(request, CLIENT, RELAY_A).session == "A", "a retransmission is fine"
    victim = ("192.0.2.66", 4444)
    route = d.route(request, victim, RELAY_A)
    assert route.session is None and route.reason == "replayed"
    assert d.path_to("ufragA", victim) is None, "nothing will ever be sent to the victim"


def test_addresses_per_session_are_capped_oldest_first():
    d = table()
    pw = "passwordA-0123456789abcd"
    for port in range(1, 12):
        d.route(check("ufragA", pw), ("198.51.100.1", port), RELAY_A)
    assert d.addresses == 8
    assert d.path_to("ufragA", ("198.51.100.1", 1)) is None
    assert d.path_to("ufragA", ("198.51.100.1", 11)) == d.path("ufragA")


def test_moving_between_relayed_and_direct_needs_an_authenticated_check():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.route(b"\x80spoofed, straight to the socket", CLIENT, None)
    assert d.path("ufragA").relay == RELAY_A
    d.route(check("ufragA", pw), CLIENT, None)
    assert d.path("ufragA").relay is None
