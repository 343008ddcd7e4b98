"""Realtime client secrets: OpenAI's request and response shapes, our signed key inside."""

from __future__ import annotations

import json

import pytest
from openai.types.realtime import ClientSecretCreateResponse

from common.verdict import Refuse
from transceiver.signaling.gate import Caller, Gate
from transceiver.signaling.realtime_secrets import (
    DEFAULT_TTL_S,
    MAX_KEY_CHARS,
    client_secret_response,
    parse_secret_request,
)
from transceiver.signaling.tokens import AUDIENCE, REALTIME_AUDIENCE, TokenError, TokenVerifier

SECRET = b"a signing secret of at least 32 bytes!!"
NOW = 1_800_000_000.0


def test_a_request_becomes_a_key_that_carries_the_apps_session() -> None:
    body = {
        "expires_after": {"anchor": "created_at", "seconds": 120},
        "session": {
            "type": "realtime",
            "instructions": "be brief",
            "audio": {"output": {"voice": "marin"}},
        },
    }
    request = parse_secret_request(json.dumps(body).encode())
    response = client_secret_response(SECRET, NOW, request, max_ttl_s=600)
    parsed = ClientSecretCreateResponse.model_validate(response)  # OpenAI's own type
    assert parsed.expires_at == int(NOW) + 120 and parsed.session.instructions == "be brief"
    verifier = TokenVerifier((SECRET,), 600, audience=REALTIME_AUDIENCE, max_chars=MAX_KEY_CHARS)
    claims = verifier.verify(response["value"], NOW + 1)
    assert claims.session == {"instructions": "be brief", "audio": {"output": {"voice": "marin"}}}
    with pytest.raises(TokenError, match="expired"):
        verifier.verify(response["value"], NOW + 121)
    # A Realtime key is not a WHIP token, and a WHIP token is not a Realtime key.
    with pytest.raises(TokenError, match="wrong_audience"):
        TokenVerifier((SECRET,), 600, audience=AUDIENCE, max_chars=MAX_KEY_CHARS).verify(
            response["value"], NOW
        )


def test_defaults_and_the_ttl_cap() -> None:
    request = parse_secret_request(b"")
    assert (request.ttl_s, request.session) == (DEFAULT_TTL_S, {})
    response = client_secret_response(SECRET, NOW, request, max_ttl_s=300)
    assert response["expires_at"] == int(NOW) + 300  # never longer than the verifier accepts


@pytest.mark.parametrize(
    "body, why",
    [
        (b"{", "not JSON"),
        (b"[]", "object"),
        (b'{"other": 1}', "unknown"),
        (b'{"expires_after": {"seconds": 5}}', "10..7200"),
        (b'{"expires_after": {"anchor": "now"}}', "anchor"),
        (b'{"session": {"type": "transcription"}}', "only realtime"),
        (b'{"session": {"audio": {"input": {"format": {"type": "audio/pcmu"}}}}}', "formats"),
        (json.dumps({"session": {"instructions": "x" * 9000}}).encode(), "over 8192"),
        (b" " * 20000, "over 16384"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(body: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_secret_request(body)


def test_operator_keys_match_exactly() -> None:
    gate = Gate(None, None, (b"sk-operator-1", b"sk-operator-2"))
    assert gate.caller("Bearer sk-operator-2", 0.0) == Caller(operator=True)
    for wrong in ("Bearer sk-operator-", "Bearer sk-operator-2x", "sk-operator-2", ""):
        assert isinstance(gate.caller(wrong, 0.0), Refuse), wrong
