"""The demultiplexer as a plain object: authenticated learning, latching, no cross-delivery."""

from __future__ import annotations

import secrets

from common import stun
from transceiver.socket.demux import MAX_ADDRESSES, Demux, Path

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


def test_authenticated_check_learns_the_address_but_only_a_round_trip_carries_media():
    d = table()
    route = d.route(check("ufragA", "passwordA-0123456789abcd"), CLIENT, RELAY_A)
    assert route.session == "A" and route.learned
    assert d.route(b"\x80rtp", CLIENT, RELAY_A).session == "A", "inbound media passes"
    assert d.path_to("ufragA", CLIENT) == Path(CLIENT, RELAY_A), "STUN may answer it"
    assert d.path("ufragA") is None, "no media toward an address that only sent a check"
    assert d.select("ufragA", CLIENT)
    assert d.path("ufragA") == Path(CLIENT, RELAY_A)
    assert d.path("ufragB") is None
    assert not d.select("ufragB", CLIENT), "only a learned address of the session is selected"


def test_a_session_never_receives_another_sessions_packets():
    d = table()
    d.route(check("ufragA", "passwordA-0123456789abcd"), CLIENT, RELAY_A)
    # B's credentials from A's address: not B's (the address is A's), and not A's check.
    wrong = d.route(check("ufragB", "passwordB-0123456789abcd"), CLIENT, RELAY_A)
    assert wrong.session is None and wrong.reason == "bad_integrity"
    other = ("203.0.113.9", 1234)
    assert d.route(check("ufragB", "passwordB-0123456789abcd"), other, RELAY_A).session == "B"
    assert d.route(b"\x80x", other, RELAY_A).session == "B"
    assert d.route(b"\x80x", CLIENT, RELAY_A).session == "A"


def test_a_check_from_a_new_address_never_moves_media_by_itself():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.select("ufragA", CLIENT)
    assert d.route(check("ufragA", pw), MOVED, RELAY_A).learned  # NAT rebinding, or a replay
    assert d.path("ufragA").client == CLIENT, "media stays until a round trip to MOVED"
    assert d.select("ufragA", MOVED)
    assert d.path("ufragA").client == MOVED
    d.route(b"\x80late packet from the old port", CLIENT, RELAY_A)
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    assert d.path("ufragA").client == MOVED, "only select() moves it back"
    d.route(b"\x80x", MOVED, RELAY_B)  # the relay in front was replaced: followed at once
    assert d.path("ufragA").relay == RELAY_B
    d.route(b"\x80x", CLIENT, RELAY_A)
    assert d.path("ufragA").client == MOVED and d.path("ufragA").relay == RELAY_B


def test_every_check_id_is_remembered_even_from_the_current_address():
    """A check from the path's own address, captured and resent from elsewhere, is a replay."""
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.select("ufragA", CLIENT)
    consent = check("ufragA", pw)
    assert d.route(consent, CLIENT, RELAY_A).session == "A"
    replay = d.route(consent, ("192.0.2.66", 4444), RELAY_A)
    assert replay.session is None and replay.reason == "replayed"
    # The same capture from a known address off the path is refused too.
    d.route(check("ufragA", pw), MOVED, RELAY_A)
    assert d.route(consent, MOVED, RELAY_A).reason == "replayed"


def test_our_checks_toward_an_unproven_address_are_bounded():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    sent = [d.request_path("ufragA", CLIENT) for _ in range(10)]
    assert sum(p is not None for p in sent) == 2, "two checks toward an address never proven"
    assert d.path_to("ufragA", CLIENT) is not None, "answers to its own checks still go"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)  # each fresh check of its own earns one
    assert d.request_path("ufragA", CLIENT) is not None
    assert d.request_path("ufragA", CLIENT) is None
    d.select("ufragA", CLIENT)
    assert all(d.request_path("ufragA", CLIENT) for _ in range(50)), "consent on the path"
    d.route(check("ufragA", pw), MOVED, RELAY_A)
    d.select("ufragA", MOVED)
    assert d.request_path("ufragA", CLIENT) is None, "the address left keeps no credit"


def test_an_address_left_behind_expires_once_no_check_comes_from_it():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.select("ufragA", CLIENT)
    d.route(check("ufragA", pw), MOVED, RELAY_A)  # NAT rebinding: CLIENT is left behind
    d.select("ufragA", MOVED)
    assert d.expire(100.0, ttl_s=30) == 0  # the sweep right after the move: just left
    assert d.expire(101.0, ttl_s=30) == 0  # silent from now on
    d.route(check("ufragA", pw), CLIENT, RELAY_A)  # a check from it: the clock starts again
    assert d.expire(120.0, ttl_s=30) == 0
    assert d.expire(121.0, ttl_s=30) == 0
    d.route(b"\x80straggler", CLIENT, RELAY_A)  # media proves nothing about its source
    assert d.expire(150.0, ttl_s=30) == 0  # silent for 29 s
    assert d.path_to("ufragA", CLIENT) is not None, "kept while it may still be in use"
    assert d.expire(151.0, ttl_s=30) == 1
    assert d.addresses == 1
    dropped = d.route(b"\x80x", CLIENT, RELAY_A)
    assert dropped.session is None and dropped.reason == "unknown_address"
    assert d.route(b"\x80x", MOVED, RELAY_A).session == "A"
    assert d.expire(10_000.0, ttl_s=30) == 0 and d.path("ufragA").client == MOVED
    # An authenticated check from the old address makes it known again.
    assert d.route(check("ufragA", pw), CLIENT, RELAY_A).learned


def test_forgotten_addresses_are_reported_to_the_owner():
    forgotten: list[tuple[str, tuple[str, int]]] = []
    d: Demux[str] = Demux(on_forget=lambda s, a: forgotten.append((s, a)))
    pw = "passwordA-0123456789abcd"
    d.add("ufragA", pw, "A")
    for port in range(1, 7):
        d.route(check("ufragA", pw), ("198.51.100.1", port), RELAY_A)
    assert forgotten == [("A", ("198.51.100.1", 1)), ("A", ("198.51.100.1", 2))]


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


def test_addresses_per_session_are_capped_and_the_path_is_never_evicted():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), ("198.51.100.1", 1), RELAY_A)
    d.select("ufragA", ("198.51.100.1", 1))
    for port in range(2, 2000):  # one session owner, many source ports
        d.route(check("ufragA", pw), ("198.51.100.1", port), RELAY_A)
    assert d.addresses == MAX_ADDRESSES
    assert d.path("ufragA").client == ("198.51.100.1", 1), "the call's path is kept"
    assert d.path_to("ufragA", ("198.51.100.1", 1999)) is not None
    assert d.path_to("ufragA", ("198.51.100.1", 2)) is None


def test_moving_between_relayed_and_direct_needs_a_round_trip():
    d = table()
    pw = "passwordA-0123456789abcd"
    d.route(check("ufragA", pw), CLIENT, RELAY_A)
    d.select("ufragA", CLIENT)
    d.route(b"\x80spoofed, straight to the socket", CLIENT, None)
    assert d.path("ufragA").relay == RELAY_A
    d.route(check("ufragA", pw), CLIENT, None)
    assert d.path("ufragA").relay == RELAY_A, "a check alone proves nothing"
