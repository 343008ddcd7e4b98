"""Tests for common.hint: the signed routing hint carried as the server's ICE ufrag."""

import base64
import hmac
import json
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.hint import (
    DOMAIN,
    HINT_ERROR_REASONS,
    HINT_LEN_CHARS,
    NONCE_LEN,
    TAG_LEN,
    VERSION,
    HintError,
    HintVerifier,
    Keyring,
    KeyringError,
    RoutingHint,
    sign_hint,
    verify_hint,
)

ICE_UFRAG = re.compile(r"^[A-Za-z0-9+/]{24,64}$")  # RFC 8839 ice-char, our length bounds
BASE64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

SECRET_0 = bytes(range(32))
SECRET_1 = bytes(range(100, 132))
RING = Keyring({0: SECRET_0, 1: SECRET_1}, signing_key_id=1)
NOW_S = 1_750_000_000.0
NONCE = b"\x01\x02\x03\x04\x05\x06\x07"
MAX_AGE_S = 3600.0


def _sign(ring: Keyring = RING, now_s: float = NOW_S, nonce: bytes = NONCE) -> str:
    return sign_hint(ring, cluster=3, transceiver_id=4242, now_s=now_s, nonce=nonce)


def _forge(ver_key: int, secret: bytes, issued_at_min: int = int(NOW_S // 60)) -> str:
    """A hint built by hand (independently of sign_hint), with a correct tag for ``secret``."""
    body = struct.pack("!BBHI7s", ver_key, 3, 4242, issued_at_min, NONCE)
    tag = hmac.digest(secret, DOMAIN + body, "sha256")[:TAG_LEN]
    return base64.b64encode(body + tag).decode()


def _reason(ufrag: str, ring: Keyring = RING, now_s: float = NOW_S, **kwargs) -> str:
    with pytest.raises(HintError) as caught:
        verify_hint(ring, ufrag, now_s, MAX_AGE_S, **kwargs)
    assert caught.value.reason in HINT_ERROR_REASONS
    return caught.value.reason


# --- format ---


def test_constants_describe_a_27_byte_hint_in_36_base64_characters():
    assert (HINT_LEN_CHARS, NONCE_LEN, TAG_LEN, VERSION) == (36, 7, 12, 1)
    assert DOMAIN == b"rtcedge/ice-hint/v1\x00"


def test_signed_hint_is_a_valid_ice_ufrag():
    ufrag = _sign()
    assert len(ufrag) == HINT_LEN_CHARS
    assert ICE_UFRAG.match(ufrag)
    assert "=" not in ufrag and ":" not in ufrag


def test_signed_hint_matches_an_independent_encoding_of_the_layout():
    assert _sign() == _forge((VERSION << 4) | 1, SECRET_1)


def test_sign_then_verify_round_trips():
    hint = verify_hint(RING, _sign(), NOW_S, MAX_AGE_S)
    assert hint == RoutingHint(
        key_id=1, cluster=3, transceiver_id=4242, issued_at_min=int(NOW_S // 60), nonce=NONCE
    )
    assert hint.issued_at_s == int(NOW_S // 60) * 60


def test_different_nonces_give_different_ufrags_in_the_same_minute():
    assert _sign(nonce=NONCE) != _sign(nonce=b"\x00" * 7)


# --- rejection reasons ---


def test_error_reasons_are_the_fixed_metric_labels():
    assert HINT_ERROR_REASONS == (
        "malformed",
        "version",
        "unknown_key",
        "bad_tag",
        "expired",
        "future",
    )
    assert issubclass(HintError, ValueError)


@pytest.mark.parametrize(
    "ufrag",
    [
        "",
        "evtj",
        "A" * 35,
        "A" * 37,
        "A" * 35 + "-",  # not in the base64 alphabet
        "A" * 35 + "\u00e9",  # not ASCII
        "A" * 34 + "==",  # padding makes it decode short
        "A" * 17 + "=" + "A" * 18,  # padding in the middle
        "A" * 35 + " ",
    ],
)
def test_malformed_ufrag_is_rejected_as_malformed(ufrag):
    assert _reason(ufrag) == "malformed"


def test_other_version_is_rejected_as_version():
    assert _reason(_forge((2 << 4) | 1, SECRET_1)) == "version"
    assert _reason(_forge((0 << 4) | 1, SECRET_1)) == "version"


def test_key_id_not_in_ring_is_rejected_as_unknown_key():
    assert _reason(_forge((VERSION << 4) | 7, SECRET_1)) == "unknown_key"


def test_tag_made_with_another_secret_is_rejected_as_bad_tag():
    assert _reason(_forge((VERSION << 4) | 1, SECRET_0)) == "bad_tag"


def test_hint_older_than_max_age_is_rejected_as_expired():
    ufrag = _sign()
    issued_s = int(NOW_S // 60) * 60
    verify_hint(RING, ufrag, issued_s + MAX_AGE_S, MAX_AGE_S)  # exactly at the limit: accepted
    assert _reason(ufrag, now_s=issued_s + MAX_AGE_S + 0.001) == "expired"


def test_hint_issued_beyond_clock_skew_in_the_future_is_rejected_as_future():
    issued_s = int(NOW_S // 60) * 60
    ufrag = _sign()
    verify_hint(RING, ufrag, issued_s - 120.0, MAX_AGE_S)  # default skew, at the limit: accepted
    assert _reason(ufrag, now_s=issued_s - 120.001) == "future"
    assert _reason(ufrag, now_s=issued_s - 30.0, max_skew_s=10.0) == "future"


def test_tampering_any_single_character_is_rejected():
    ufrag = _sign()
    for i, char in enumerate(ufrag):
        for replacement in (
            BASE64_ALPHABET[(BASE64_ALPHABET.index(char) + 1) % 64],
            BASE64_ALPHABET[(BASE64_ALPHABET.index(char) + 32) % 64],
        ):
            tampered = ufrag[:i] + replacement + ufrag[i + 1 :]
            with pytest.raises(HintError):
                verify_hint(RING, tampered, NOW_S, MAX_AGE_S)


# --- rotation ---


def test_key_rotation_accepts_every_key_in_the_ring_and_nothing_else():
    old_ring = Keyring({0: SECRET_0}, signing_key_id=0)
    both_signing_new = Keyring({0: SECRET_0, 1: SECRET_1}, signing_key_id=1)
    new_only = Keyring({1: SECRET_1}, signing_key_id=1)

    signed_with_old = _sign(old_ring)
    signed_with_new = _sign(both_signing_new)

    # During rotation every node accepts both keys.
    assert verify_hint(both_signing_new, signed_with_old, NOW_S, MAX_AGE_S).key_id == 0
    assert verify_hint(both_signing_new, signed_with_new, NOW_S, MAX_AGE_S).key_id == 1
    # A node that has not yet received the new key rejects hints signed with it.
    assert _reason(signed_with_new, ring=old_ring) == "unknown_key"
    # Once the old key is dropped, hints signed with it stop working.
    assert _reason(signed_with_old, ring=new_only) == "unknown_key"
    assert verify_hint(new_only, signed_with_new, NOW_S, MAX_AGE_S).key_id == 1


# --- signing input ---


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cluster": 256},
        {"cluster": -1},
        {"transceiver_id": 65536},
        {"transceiver_id": -1},
        {"nonce": b"\x00" * 6},
        {"nonce": b"\x00" * 8},
        {"now_s": -60.0},
        {"now_s": 2.0**32 * 60},
    ],
)
def test_sign_hint_rejects_values_that_do_not_fit(kwargs):
    args = {"cluster": 0, "transceiver_id": 0, "now_s": NOW_S, "nonce": NONCE} | kwargs
    with pytest.raises(ValueError):
        sign_hint(RING, **args)


# --- keyring ---


@pytest.mark.parametrize(
    ("keys", "signing_key_id", "problem"),
    [
        ({}, 0, "no keys"),
        ({16: SECRET_0}, 16, "outside 0..15"),
        ({-1: SECRET_0}, -1, "outside 0..15"),
        ({"1": SECRET_0}, 1, "must be an int"),
        ({0: b"short"}, 0, "shorter than 16"),
        ({0: "not bytes" * 4}, 0, "must be bytes"),
        ({0: SECRET_0}, 1, "signing key id 1 not in keyring"),
    ],
)
def test_keyring_rejects_unusable_keys_naming_the_problem(keys, signing_key_id, problem):
    with pytest.raises(KeyringError, match=problem):
        Keyring(keys, signing_key_id)


def test_keyring_json_round_trips():
    text = RING.to_json()
    doc = json.loads(text)
    assert doc["signing_key_id"] == 1
    assert doc["keys"] == {
        "0": base64.b64encode(SECRET_0).decode(),
        "1": base64.b64encode(SECRET_1).decode(),
    }
    assert Keyring.from_json(text) == RING


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "not JSON"),
        ("[]", "must be an object"),
        ('{"keys": {}}', "signing_key_id"),
        ('{"signing_key_id": true, "keys": {}}', "signing_key_id"),
        ('{"signing_key_id": 0, "keys": []}', "keys must be an object"),
        ('{"signing_key_id": 0, "keys": {"zero": "AAAA"}}', "not a decimal"),
        ('{"signing_key_id": 0, "keys": {"0": 5}}', "base64 string"),
        ('{"signing_key_id": 0, "keys": {"0": "not base64!"}}', "not base64"),
        ('{"signing_key_id": 0, "keys": {"0": "AAAA"}}', "shorter than 16"),
        ('{"signing_key_id": 3, "keys": {"0": "' + "A" * 44 + '"}}', "not in keyring"),
    ],
)
def test_keyring_from_json_rejects_bad_documents(text, problem):
    with pytest.raises(KeyringError, match=problem):
        Keyring.from_json(text)


def test_keyring_loads_from_a_file(tmp_path):
    path = tmp_path / "hint-keys.json"
    path.write_text(RING.to_json(), encoding="utf-8")
    assert Keyring.load(path) == RING
    assert Keyring.load(str(path)) == RING


def test_generated_keyring_has_one_random_32_byte_signing_key():
    first, second = Keyring.generate(key_id=5), Keyring.generate(key_id=5)
    assert first.signing_key_id == 5 and list(first.keys) == [5]
    assert len(first.keys[5]) == 32
    assert first.keys[5] != second.keys[5]
    assert verify_hint(first, _sign(first), NOW_S, MAX_AGE_S).key_id == 5


def test_keyring_repr_never_shows_secrets():
    text = repr(RING)
    assert "key_ids=[0, 1]" in text
    assert SECRET_0.hex() not in text and repr(SECRET_0) not in text


def test_keyring_error_is_a_value_error():
    assert issubclass(KeyringError, ValueError)


# --- verifier with cache ---


def test_verifier_caches_verified_hints():
    verifier = HintVerifier(RING, MAX_AGE_S)
    ufrag = _sign()
    first = verifier.verify(ufrag, NOW_S)
    assert len(verifier) == 1
    assert verifier.verify(ufrag, NOW_S + 5) is first


def test_verifier_does_not_cache_failures():
    verifier = HintVerifier(RING, MAX_AGE_S)
    with pytest.raises(HintError):
        verifier.verify("A" * 36, NOW_S)
    assert len(verifier) == 0


def test_verifier_cache_never_returns_a_hint_that_has_since_expired():
    verifier = HintVerifier(RING, MAX_AGE_S)
    ufrag = _sign()
    verifier.verify(ufrag, NOW_S)
    with pytest.raises(HintError) as caught:
        verifier.verify(ufrag, NOW_S + MAX_AGE_S + 60)
    assert caught.value.reason == "expired"
    assert len(verifier) == 0


def test_verifier_cache_rechecks_future_skew():
    verifier = HintVerifier(RING, MAX_AGE_S, max_skew_s=60.0)
    ufrag = _sign()
    verifier.verify(ufrag, NOW_S)
    with pytest.raises(HintError) as caught:
        verifier.verify(ufrag, NOW_S - 600)
    assert caught.value.reason == "future"


def test_verifier_cache_is_bounded():
    verifier = HintVerifier(RING, MAX_AGE_S, cache_capacity=3)
    for i in range(10):
        verifier.verify(_sign(nonce=bytes([i]) * NONCE_LEN), NOW_S)
        assert len(verifier) <= 3


def test_verifier_forgets_cached_hints_when_keyring_is_replaced():
    verifier = HintVerifier(RING, MAX_AGE_S)
    signed_with_old = _sign(Keyring({0: SECRET_0}, signing_key_id=0))
    verifier.verify(signed_with_old, NOW_S)
    new_only = Keyring({1: SECRET_1}, signing_key_id=1)
    verifier.replace_keyring(new_only)
    assert verifier.keyring is new_only
    with pytest.raises(HintError) as caught:
        verifier.verify(signed_with_old, NOW_S)
    assert caught.value.reason == "unknown_key"


def test_verifier_rejects_zero_capacity():
    with pytest.raises(ValueError):
        HintVerifier(RING, MAX_AGE_S, cache_capacity=0)


# --- properties ---


@settings(max_examples=300)
@given(
    st.text(max_size=80)
    | st.text(alphabet=BASE64_ALPHABET + "=", min_size=36, max_size=36)
    | st.binary(min_size=27, max_size=27).map(lambda b: base64.b64encode(b).decode())
)
def test_arbitrary_strings_raise_only_hint_error(ufrag):
    try:
        verify_hint(RING, ufrag, NOW_S, MAX_AGE_S)
    except HintError as exc:
        assert exc.reason in HINT_ERROR_REASONS


@settings(max_examples=300)
@given(
    cluster=st.integers(0, 255),
    transceiver_id=st.integers(0, 65535),
    nonce=st.binary(min_size=NONCE_LEN, max_size=NONCE_LEN),
    now_s=st.floats(0, (2**32 - 1) * 60, allow_nan=False),
    key_id=st.integers(0, 15),
)
def test_sign_then_verify_round_trips_for_any_fields(cluster, transceiver_id, nonce, now_s, key_id):
    ring = Keyring({key_id: SECRET_0}, signing_key_id=key_id)
    ufrag = sign_hint(ring, cluster, transceiver_id, now_s, nonce)
    assert ICE_UFRAG.match(ufrag)
    hint = verify_hint(ring, ufrag, now_s, max_age_s=60.0)
    assert hint == RoutingHint(key_id, cluster, transceiver_id, int(now_s // 60), nonce)
