"""``common.listener.ConnectionGuard`` as a plain object: the cap, the header deadline, and the
deadline's restart after each response, with ``now`` passed in."""

from __future__ import annotations

import pytest

from common.config import ConfigError
from common.listener import ConnectionGuard, ListenerLimits


def guard(timeout_s: float = 10.0, cap: int = 3) -> ConnectionGuard[str]:
    return ConnectionGuard(ListenerLimits(header_timeout_s=timeout_s, max_connections=cap))


def test_beyond_the_cap_a_newcomer_is_refused_and_counted():
    g = guard(cap=2)
    assert g.admit("a", 0) and g.admit("b", 0)
    assert not g.admit("c", 0)
    assert g.closed == {"max_connections": 1, "header_timeout": 0}
    g.forget("a")
    assert g.admit("c", 1)
    assert g.open == 2


def test_a_connection_without_headers_expires_at_its_deadline_only():
    g = guard(timeout_s=10)
    g.admit("a", 0)
    g.admit("b", 5)
    assert g.expired(9.9) == []
    assert g.expired(10) == ["a"]
    assert g.expired(14) == []
    assert g.expired(15) == ["b"]
    assert g.closed["header_timeout"] == 2 and g.open == 0


def test_a_request_in_its_handler_has_no_deadline_and_the_next_one_gets_a_new_one():
    g = guard(timeout_s=10)
    g.admit("a", 0)
    g.admit("b", 1)
    g.request_started("a")
    assert g.expired(100) == ["b"]  # "a" is being answered
    g.request_done("a", 100)
    assert g.expired(109) == []
    assert g.expired(110) == ["a"]  # idle keep-alive, or the next request's headers too slow


def test_late_events_of_a_forgotten_connection_change_nothing():
    g = guard(timeout_s=10)
    g.admit("a", 0)
    assert g.expired(10) == ["a"]
    g.request_started("a")
    g.request_done("a", 20)
    g.forget("a")
    assert g.open == 0 and g.expired(1000) == []


def test_limits_name_the_option_of_a_bad_value():
    with pytest.raises(ConfigError, match="--t"):
        ListenerLimits(header_timeout_s=0).validate("--t", "--m")
    with pytest.raises(ConfigError, match="--m"):
        ListenerLimits(max_connections=0).validate("--t", "--m")
