"""Tests for common.sessionid: the signed, routable id in a WHIP resource URL."""

import base64
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.hint import NONCE_LEN, HintError, Keyring, sign_hint, verify_hint
from common.sessionid import (
    SESSION_ID_ERROR_REASONS,
    SESSION_ID_LEN_CHARS,
    SessionId,
    SessionIdError,
    sign_session_id,
    verify_session_id,
)

RING = Keyring({0: bytes(range(32)), 1: bytes(range(100, 132))}, signing_key_id=1)
NOW_S = 1_750_000_000.0
CALL_ID = "0123456789abcdef0123456789abcdef"
MAX_AGE_S = 4 * 3600.0 + 60
URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def _sign(ring: Keyring = RING, now_s: float = NOW_S, cluster: int = 3, tid: int = 517) -> str:
    return sign_session_id(ring, cluster, tid, now_s, CALL_ID)


def _reason(text: str, ring: Keyring = RING, now_s: float = NOW_S) -> str:
    with pytest.raises(SessionIdError) as exc:
        verify_session_id(ring, text, now_s, MAX_AGE_S)
    assert exc.value.reason in SESSION_ID_ERROR_REASONS
    return exc.value.reason


def test_an_id_names_its_owner_and_call_and_is_short_and_url_safe():
    text = _sign()
    assert len(text) == SESSION_ID_LEN_CHARS == 48
    assert URL_SAFE.fullmatch(text)
    assert verify_session_id(RING, text, NOW_S + 60, MAX_AGE_S) == SessionId(
        1, 3, 517, int(NOW_S // 60), CALL_ID
    )
    assert verify_session_id(RING, text, NOW_S, MAX_AGE_S).owner == (3, 517)


def test_every_single_character_change_is_refused():
    text = _sign()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i in range(len(text)):
        other = alphabet[(alphabet.index(text[i]) + 1) % 64]
        reason = _reason(text[:i] + other + text[i + 1 :])
        assert reason in ("bad_tag", "version", "unknown_key"), (i, reason)


def test_the_owner_cannot_be_steered_without_the_keyring():
    other = Keyring({1: b"x" * 32}, signing_key_id=1)
    assert _reason(_sign(other)) == "bad_tag"
    # Swap the transceiver id in the body of a real id: the tag no longer matches.
    raw = bytearray(base64.urlsafe_b64decode(_sign()))
    raw[3] ^= 1
    assert _reason(base64.urlsafe_b64encode(bytes(raw)).decode()) == "bad_tag"


def test_a_hint_and_a_session_id_never_verify_as_each_other():
    """Same keyring, different domain strings (and sizes): no cross-use."""
    ufrag = sign_hint(RING, 3, 517, NOW_S, bytes(NONCE_LEN))
    assert _reason(ufrag) == "malformed"
    raw = base64.urlsafe_b64decode(_sign())
    as_ufrag = base64.b64encode(raw[:27]).decode()
    with pytest.raises(HintError):
        verify_hint(RING, as_ufrag, NOW_S, MAX_AGE_S)


def test_malformed_ids_are_refused_cheaply():
    text = _sign()
    for bad in ("", "0" * 32, text[:-1], text + "A", text[:-2] + "==", text[:-1] + "+"):
        assert _reason(bad) == "malformed", bad
    assert _reason(text[:-1] + "\u00e9") == "malformed"
    assert _reason(" " + text[1:]) == "malformed"


def test_unknown_key_expired_and_future():
    assert _reason(_sign(), Keyring({0: bytes(range(32))}, 0)) == "unknown_key"
    assert _reason(_sign(now_s=NOW_S - MAX_AGE_S - 120)) == "expired"
    assert _reason(_sign(now_s=NOW_S + 3600)) == "future"


def test_rotation_old_keys_still_verify():
    old = _sign(Keyring({0: bytes(range(32))}, 0))
    assert verify_session_id(RING, old, NOW_S, MAX_AGE_S).key_id == 0


def test_bad_arguments_to_sign_raise():
    with pytest.raises(ValueError):
        sign_session_id(RING, 256, 0, NOW_S, CALL_ID)
    with pytest.raises(ValueError):
        sign_session_id(RING, 0, 65536, NOW_S, CALL_ID)
    for call_id in ("00", CALL_ID.upper(), CALL_ID + "00"):
        with pytest.raises(ValueError):
            sign_session_id(RING, 0, 0, NOW_S, call_id)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_refused_with_a_reason_never_an_exception(text):
    _reason(text)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 255), st.integers(0, 0xFFFF), st.binary(min_size=16, max_size=16))
def test_round_trip(cluster, tid, call):
    text = sign_session_id(RING, cluster, tid, NOW_S, call.hex())
    got = verify_session_id(RING, text, NOW_S, MAX_AGE_S)
    assert (got.cluster, got.transceiver_id, got.call_id) == (cluster, tid, call.hex())
