"""transceiver.migration.Migrations: the owner's offers and claims, with time passed in."""

import pytest

from common.verdict import Refuse
from transceiver.migration import Migrations

CALL = "ab" * 16
OTHER = "cd" * 16
NONCE = bytes(9)
DEADLINE_S = 10.0


def refusal(table: Migrations, call_id: str, nonce: bytes, now: float, live: bool = True) -> str:
    refused = table.claim(call_id, nonce, now, live)
    assert isinstance(refused, Refuse), refused
    return refused.reason


def test_a_token_is_claimed_once():
    table = Migrations(DEADLINE_S)
    table.offer(CALL, NONCE, now=100.0)
    assert table.offered(CALL) and not table.claimed(CALL) and table.unclaimed() == 1
    assert table.claim(CALL, NONCE, now=101.0) == 111.0  # the old call ends by then at the latest
    assert table.claimed(CALL) and table.unclaimed() == 0
    assert refusal(table, CALL, NONCE, 101.5) == "replayed"
    assert table.forget(CALL) == "claimed"
    assert not table.claimed(CALL)
    assert refusal(table, CALL, NONCE, 102.0) == "replayed", "also once the old call ended"
    assert table.due(110.0) == [] and len(table) == 1
    assert table.due(110.1) == [] and len(table) == 0, "kept until the token expires, no longer"
    assert refusal(table, CALL, NONCE, 110.2) == "no_session"


def test_the_token_of_an_earlier_offer_does_not_claim():
    table = Migrations(DEADLINE_S)
    table.offer(CALL, b"\x01" * 9, now=100.0)
    table.offer(CALL, NONCE, now=101.0)  # offered again: only the newest token claims
    assert refusal(table, CALL, b"\x01" * 9, 102.0) == "replayed"
    table.claim(CALL, NONCE, 102.0)
    with pytest.raises(ValueError):
        table.offer(CALL, NONCE, now=103.0)  # a claimed call is not offered again


def test_no_offer_late_claim_and_the_deadline():
    table = Migrations(DEADLINE_S)
    assert refusal(table, OTHER, NONCE, 0.0) == "no_session"  # a claim never makes an entry
    table.offer(OTHER, NONCE, now=0.0)
    assert refusal(table, OTHER, NONCE, 1.0, live=False) == "no_session"  # ending, unclaimed
    assert table.forget(OTHER) == "offered"
    assert len(table) == 0
    table.offer(CALL, NONCE, now=100.0)
    assert refusal(table, CALL, NONCE, 110.5) == "expired"
    assert table.forget(CALL) == "offered"
    table.offer(CALL, NONCE, now=200.0)
    table.claim(CALL, NONCE, 201.0)
    assert table.due(210.9) == []
    assert table.due(211.0) == [CALL]
    assert table.due(212.0) == [], "named once"
    assert table.forget(CALL) == "overdue"
    assert table.forget(CALL) is None, "counted once"


def test_a_deadline_must_be_positive():
    with pytest.raises(ValueError):
        Migrations(0)
