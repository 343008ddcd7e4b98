"""Tests for common.resumetoken: the one-offer token a draining transceiver gives a caller."""

import base64
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.hint import Keyring
from common.resumetoken import (
    NONCE_LEN,
    RESUME_TOKEN_ERROR_REASONS,
    RESUME_TOKEN_LEN_CHARS,
    ResumeToken,
    ResumeTokenError,
    sign_resume_token,
    verify_resume_token,
)
from common.sessionid import SessionIdError, sign_session_id, verify_session_id

RING = Keyring({0: bytes(range(32)), 1: bytes(range(100, 132))}, signing_key_id=1)
NOW_S = 1_750_000_000.0
CALL_ID = "0123456789abcdef0123456789abcdef"
NONCE = bytes(range(NONCE_LEN))
TTL_S = 10.0
URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def _sign(ring: Keyring = RING, expires_s: float = NOW_S + TTL_S, tid: int = 517) -> str:
    return sign_resume_token(ring, 3, tid, expires_s, CALL_ID, NONCE)


def _reason(text: str, ring: Keyring = RING, now_s: float = NOW_S) -> str:
    with pytest.raises(ResumeTokenError) as exc:
        verify_resume_token(ring, text, now_s, TTL_S)
    assert exc.value.reason in RESUME_TOKEN_ERROR_REASONS
    return exc.value.reason


def test_a_token_names_owner_call_expiry_and_nonce_and_is_url_safe():
    text = _sign()
    assert len(text) == RESUME_TOKEN_LEN_CHARS == 60
    assert URL_SAFE.fullmatch(text)
    got = verify_resume_token(RING, text, NOW_S + 1, TTL_S)
    assert got == ResumeToken(1, 3, 517, int(NOW_S + TTL_S), CALL_ID, NONCE)
    assert got.owner == (3, 517)


def test_every_single_character_change_is_refused():
    text = _sign()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i in range(len(text)):
        other = alphabet[(alphabet.index(text[i]) + 1) % 64]
        assert _reason(text[:i] + other + text[i + 1 :]) in ("bad_tag", "version", "unknown_key")


def test_owner_call_or_expiry_cannot_be_changed_without_the_keyring():
    assert _reason(_sign(Keyring({1: b"x" * 32}, 1))) == "bad_tag"
    for offset in (3, 5, 9):  # the owner, the expiry, the call id
        raw = bytearray(base64.urlsafe_b64decode(_sign()))
        raw[offset] ^= 1
        assert _reason(base64.urlsafe_b64encode(bytes(raw)).decode()) == "bad_tag"


def test_expired_and_too_far_ahead():
    assert _reason(_sign(expires_s=NOW_S - 1)) == "expired"
    assert _reason(_sign(expires_s=NOW_S + TTL_S + 121)) == "future"
    assert verify_resume_token(RING, _sign(expires_s=NOW_S), NOW_S, TTL_S).call_id == CALL_ID


def test_a_session_id_and_a_token_never_verify_as_each_other():
    """Same keyring, own domain strings (and lengths): a resource URL is no resume token."""
    sid = sign_session_id(RING, 3, 517, NOW_S, CALL_ID)
    assert _reason(sid) == "malformed"
    assert _reason(sid + "A" * (RESUME_TOKEN_LEN_CHARS - len(sid))) in ("bad_tag", "malformed")
    with pytest.raises(SessionIdError):
        verify_session_id(RING, _sign()[:48], NOW_S, 600)


def test_malformed_tokens_are_refused():
    text = _sign()
    for bad in ("", text[:-1], text + "A", text[:-2] + "==", text[:-1] + "+", " " + text[1:]):
        assert _reason(bad) == "malformed", bad
    assert _reason(text[:-1] + "\u00e9") == "malformed"


def test_bad_arguments_to_sign_raise():
    for args in (
        (256, 0, NOW_S, CALL_ID, NONCE),
        (0, 65536, NOW_S, CALL_ID, NONCE),
        (0, 0, NOW_S, CALL_ID.upper(), NONCE),
        (0, 0, NOW_S, CALL_ID, b"short"),
        (0, 0, -1, CALL_ID, NONCE),
    ):
        with pytest.raises(ValueError):
            sign_resume_token(RING, *args)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=70))
def test_any_text_is_refused_with_a_reason_never_an_exception(text):
    _reason(text)
