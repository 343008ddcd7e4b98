"""``common.options.url_credential``: what in a URL is a credential, and what is not."""

from __future__ import annotations

import pytest

from common.options import url_credential


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("wss://TOKEN@inference/call", "a user or password"),
        ("redis://:pw@cache:6379/0", "a user or password"),
        ("redis://cache:6379/0?password=pw", "the password= parameter"),
        ("wss://inference/call?model=x&Access_Token=t", "the Access_Token= parameter"),
    ],
)
def test_a_user_a_password_or_a_token_parameter_is_a_credential(url, what):
    assert url_credential(url) == what


@pytest.mark.parametrize(
    "url",
    [
        "ws://inference:8765/call",
        "wss://inference/call?model=gpt&voice=alloy",
        "unix:///run/redis.sock",
        "rediss://[::1]:6380/0",
        "not a url",
    ],
)
def test_urls_without_a_credential_are_not_suspected(url):
    assert url_credential(url) is None
