"""Signed WHIP tokens: the documented format verifies, everything else is refused by reason."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from pathlib import Path

import pytest

from common.config import ConfigError
from transceiver.signaling.tokens import (
    AUDIENCE,
    MAX_TOKEN_CHARS,
    TokenError,
    TokenVerifier,
    mint,
    parse_secrets,
)

SECRET = b"k" * 32
OTHER = b"o" * 32
NOW = 1_767_225_600.0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def by_the_docs(claims: dict, header: dict | None = None, secret: bytes = SECRET) -> str:
    """A token built from docs/transceiver.md alone, as an app backend in any language would."""
    head = b64(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    tag = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(tag)}"


def reason(token: str, verifier: TokenVerifier | None = None, **kw) -> str:
    with pytest.raises(TokenError) as err:
        (verifier or TokenVerifier((SECRET,), 3600)).verify(token, NOW, **kw)
    return err.value.reason


def test_a_token_built_from_the_docs_verifies_and_names_its_subject():
    verifier = TokenVerifier((SECRET,), 3600)
    token = by_the_docs({"aud": AUDIENCE, "exp": NOW + 60, "sub": "alice"})
    claims = verifier.verify(token, NOW)
    assert (claims.subject, claims.expires_at) == ("alice", NOW + 60)
    listed = by_the_docs({"aud": ["other", AUDIENCE], "exp": int(NOW) + 60, "iat": int(NOW)})
    assert verifier.verify(listed, NOW).subject is None
    assert verifier.verify(mint(SECRET, NOW, 60, "bob"), NOW).subject == "bob"


def test_every_secret_of_the_ring_verifies_so_secrets_rotate():
    ring = TokenVerifier((OTHER, SECRET), 3600)
    assert ring.verify(mint(SECRET, NOW, 60), NOW)
    assert ring.verify(mint(OTHER, NOW, 60), NOW)
    assert reason(mint(b"x" * 32, NOW, 60), ring) == "bad_signature"


def test_expiry_lifetime_and_clock_skew():
    assert reason(mint(SECRET, NOW - 61, 60)) == "expired"
    assert reason(by_the_docs({"aud": AUDIENCE, "exp": NOW})) == "expired", "exp is exclusive"
    assert reason(mint(SECRET, NOW, 3601)) == "lives_too_long"
    early = {"aud": AUDIENCE, "exp": NOW + 300}
    assert reason(by_the_docs({**early, "nbf": NOW + 120})) == "not_yet_valid"
    assert reason(by_the_docs({**early, "iat": NOW + 120})) == "not_yet_valid"
    assert TokenVerifier((SECRET,), 3600).verify(by_the_docs({**early, "nbf": NOW + 30}), NOW)
    # Ending a call (DELETE) needs a good signature, not a live token.
    expired = mint(SECRET, NOW - 600, 60, "alice")
    assert TokenVerifier((SECRET,), 3600).verify(expired, NOW, allow_expired=True).subject
    tampered = expired[:-2] + ("AA" if not expired.endswith("AA") else "BB")
    assert reason(tampered, allow_expired=True) == "bad_signature"


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (by_the_docs({"aud": AUDIENCE, "exp": NOW + 60}, {"alg": "none"}), "bad_header"),
        (by_the_docs({"aud": AUDIENCE, "exp": NOW + 60}, {"alg": "HS512"}), "bad_header"),
        (
            by_the_docs({"aud": AUDIENCE, "exp": NOW + 60}, {"alg": "HS256", "typ": "x"}),
            "bad_header",
        ),
        (
            by_the_docs({"aud": AUDIENCE, "exp": NOW + 60}, {"alg": "HS256", "crit": ["b64"]}),
            "bad_header",
        ),
        (by_the_docs({"exp": NOW + 60}), "wrong_audience"),
        (by_the_docs({"aud": "my-app-session", "exp": NOW + 60}), "wrong_audience"),
        (by_the_docs({"aud": AUDIENCE}), "bad_claims"),
        (by_the_docs({"aud": AUDIENCE, "exp": True}), "bad_claims"),
        (by_the_docs({"aud": AUDIENCE, "exp": "soon"}), "bad_claims"),
        (by_the_docs({"aud": AUDIENCE, "exp": 10**400}), "bad_claims"),
        (by_the_docs({"aud": AUDIENCE, "exp": NOW + 60, "sub": 42}), "bad_claims"),
        (by_the_docs({"aud": AUDIENCE, "exp": NOW + 60, "sub": "x" * 257}), "bad_claims"),
        (by_the_docs({"aud": AUDIENCE, "exp": NOW + 60}, secret=OTHER), "bad_signature"),
        ("", "malformed"),
        ("a.b", "malformed"),
        ("a.b.c.d", "malformed"),
        ("é.b.c", "malformed"),
        ("\udcff\udcfe.b.c", "malformed"),  # a non-UTF-8 header, as aiohttp decodes it
        ("a=.b.c", "malformed"),
        ("a" * MAX_TOKEN_CHARS + ".b.c", "malformed"),
    ],
)
def test_bad_tokens_are_refused_with_a_reason(token, why):
    assert reason(token) == why


def test_a_signed_non_object_is_malformed():
    head = b64(json.dumps({"alg": "HS256"}).encode())
    body = b64(b"[1, 2]")
    tag = hmac.new(SECRET, f"{head}.{body}".encode(), hashlib.sha256).digest()
    assert reason(f"{head}.{body}.{b64(tag)}") == "malformed"


def test_secret_files_need_long_secrets_and_at_least_one():
    assert parse_secrets(f"# rotated 2026-12-01\n{'a' * 32}\n\n{'b' * 40}\n") == (
        b"a" * 32,
        b"b" * 40,
    )
    with pytest.raises(ConfigError, match=r"--token-secret-file.*line 1.*32 bytes"):
        parse_secrets("short\n")
    with pytest.raises(ConfigError, match="RTCEDGE_TOKEN_SECRET: no secret"):
        parse_secrets("# nothing\n", "RTCEDGE_TOKEN_SECRET")


def test_the_minting_example_of_the_docs_makes_tokens_we_accept():
    text = (Path(__file__).parents[2] / "docs" / "transceiver.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    names: dict = {}
    exec(code, names)
    token = names["whip_token"](SECRET, "alice")
    claims = TokenVerifier((SECRET,), 3600).verify(token, time.time())
    assert claims.subject == "alice"
