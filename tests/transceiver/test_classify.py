"""The media socket's classification as a plain object: every drop reason, with bytes only."""

from __future__ import annotations

import secrets

import pytest

from common import encap, stun
from common.verdict import drop
from transceiver.socket import classify
from transceiver.socket.classify import DROP_REASONS, Classifier, Delivery
from transceiver.socket.demux import Demux

UFRAG, PASSWORD = "ufragA", "passwordA-0123456789abcd"
RELAY, STRANGER = ("10.0.0.1", 4000), ("192.0.2.50", 4000)
CLIENT, CLIENT_V6 = ("198.51.100.7", 50000), ("2001:db8::7", 50000)
RELAYS_ONLY = ("10.0.0.0/24",)
# A Binding request with a 2-byte PRIORITY: well-formed TLVs, so our parser accepts it, but
# aioice's raises struct.error (the fuzzing finding in docs/fuzzing.md).
SHORT_PRIORITY = bytes.fromhex("000100082112a442000102030405060708090a0b00240002abcd0000")


def check(ufrag: str = UFRAG, password: str | None = PASSWORD) -> bytes:
    key = password.encode() if password else None
    return stun.binding_request(f"{ufrag}:cli", secrets.token_bytes(12), integrity_key=key)


def classifier(relay_networks: tuple[str, ...] = ()) -> Classifier[str]:
    demux: Demux[str] = Demux()
    demux.add(UFRAG, PASSWORD, "A")
    return Classifier(demux, relay_networks)


def relayed(payload: bytes, client: tuple[str, int] = CLIENT) -> bytes:
    return encap.encapsulate(payload, *client)


def test_a_check_through_a_relay_is_delivered_decapsulated_and_learns_the_client():
    c = classifier(RELAYS_ONLY)
    first = check()
    verdict = c.classify(relayed(first), RELAY)
    assert verdict == Delivery("A", CLIENT, first, learned=True)
    media = b"\x80rtp"
    assert c.classify(relayed(media), RELAY) == Delivery("A", CLIENT, media, learned=False)
    assert c.demux.path_to(UFRAG, CLIENT).relay == RELAY, "answers go back through the relay"


def test_a_direct_client_is_its_source_address_and_ipv6_sources_lose_flow_and_scope():
    c = classifier()
    first = check()
    source = (*CLIENT_V6, 0, 0)  # what asyncio hands an IPv6 socket's protocol
    assert c.classify(first, source) == Delivery("A", CLIENT_V6, first, learned=True)
    assert c.demux.path_to(UFRAG, CLIENT_V6).relay is None


def test_an_ipv6_client_behind_a_relay():
    c = classifier(RELAYS_ONLY)
    first = check()
    verdict = c.classify(relayed(first, CLIENT_V6), RELAY)
    assert verdict == Delivery("A", CLIENT_V6, first, learned=True)


def test_without_relay_networks_anyone_may_encapsulate():
    c = classifier()
    assert isinstance(c.classify(relayed(check()), STRANGER), Delivery)


# One way to provoke each drop reason: (classifier, datagrams sent first, datagram, source).
def _replayed():
    captured = check()
    return classifier(), [(captured, CLIENT)], captured, ("203.0.113.9", 1)


DROPS = {
    # A header that does not decode.
    "encap_malformed": lambda: (classifier(), [], b"\xff\x99" + bytes(20), RELAY),
    # Behind relays, only their networks may encapsulate...
    "relay_not_allowed": lambda: (classifier(RELAYS_ONLY), [], relayed(check()), STRANGER),
    # ...and nobody talks to the socket directly, not even a relay.
    "direct_not_allowed": lambda: (classifier(RELAYS_ONLY), [], check(), RELAY),
    # Nothing after the header.
    "empty": lambda: (classifier(RELAYS_ONLY), [], relayed(b""), RELAY),
    # STUN our parser refuses (a truncated check).
    "stun_malformed": lambda: (classifier(), [], relayed(check()[:-3]), RELAY),
    # STUN our parser accepts and aioice's raises on, even from a learned address.
    "stun_rejected_by_aioice": lambda: (classifier(), [(check(), CLIENT)], SHORT_PRIORITY, CLIENT),
    # The demultiplexer's: media from an address no check taught it...
    "unknown_address": lambda: (classifier(), [], b"\x80rtp", CLIENT),
    # ...STUN from it that is no Binding request...
    "not_a_check": lambda: (
        classifier(),
        [],
        stun.binding_success(secrets.token_bytes(12), CLIENT),
        CLIENT,
    ),
    # ...a check for no session, one that does not verify, one seen from another address.
    "unknown_ufrag": lambda: (classifier(), [], check("nobody"), CLIENT),
    "bad_integrity": lambda: (classifier(), [], check(password=None), CLIENT),
    "replayed": _replayed,
}


@pytest.mark.parametrize("expected", DROP_REASONS)
def test_every_drop_reason(expected):
    c, before, data, source = DROPS[expected]()
    for earlier, sender in before:
        assert isinstance(c.classify(earlier, sender), Delivery)
    verdict = c.classify(data, source)
    assert verdict == drop(expected)
    assert c.demux.addresses == len(before), "a dropped datagram teaches nothing"


def test_drop_reasons_are_named_once():
    assert len(set(DROP_REASONS)) == len(DROP_REASONS) == len(DROPS)


def test_the_relay_memo_stays_bounded_under_spoofed_sources(monkeypatch):
    monkeypatch.setattr(classify, "MAX_RELAY_MEMO", 8)
    c = classifier(RELAYS_ONLY)
    for i in range(50):
        assert c.classify(relayed(b"\x80rtp"), (f"192.0.2.{i}", 4000)) == drop("relay_not_allowed")
        assert len(c._relay_allowed) <= 9
    assert isinstance(c.classify(relayed(check()), RELAY), Delivery), "a relay still passes"


def test_a_remembered_header_names_the_same_client_and_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(classify, "MAX_HEADER_MEMO", 8)
    c = classifier()
    media = b"\x80rtp"
    for client in (CLIENT, CLIENT_V6):
        assert c.classify(relayed(check(), client), RELAY).client == client
        for _ in range(2):  # the second time from the memo: the same verdict
            assert c.classify(relayed(media, client), RELAY) == Delivery("A", client, media)
    for _ in range(2):  # the flag is part of the header: a TCP client stays one
        tcp = encap.encapsulate(check(), *CLIENT, flags=encap.FLAG_TCP)
        assert c.classify(tcp, RELAY).client == (*CLIENT, "tcp")
    # Headers chosen by whoever reaches the socket: the memo never holds more than its bound.
    for port in range(1, 100):
        assert c.classify(relayed(media, ("203.0.113.9", port)), RELAY) == drop("unknown_address")
        assert len(c._clients) <= 8
    # A header cut short is never taken from the memo for a whole one.
    assert c.classify(relayed(media)[:7], RELAY) == classify.ENCAP_MALFORMED
