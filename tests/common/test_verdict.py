"""common.verdict: one Drop per reason (compared by identity), Refuse as a plain value."""

from __future__ import annotations

import copy
import pickle

from common.verdict import Drop, Refuse, drop


def test_a_drop_is_one_object_per_reason():
    first = drop("no_flow")
    assert first is drop("no_flow") and first.reason == "no_flow"
    assert first is not drop("no_flow_either") and isinstance(first, Drop)
    assert copy.copy(first) is first and pickle.loads(pickle.dumps(first)) is first
    assert repr(first) == "Drop('no_flow')"


def test_a_refusal_is_a_value_with_what_its_answer_says():
    busy = Refuse("max_sessions", "session limit reached", 503, 5, "capacity")
    assert busy == Refuse("max_sessions", "session limit reached", 503, 5, "capacity")
    assert Refuse("looped") == Refuse("looped", "", 0, None, "")
    assert busy != Refuse("max_sessions")
