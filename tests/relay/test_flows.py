"""The flow tables as plain objects: limits, TTLs and who may extend a flow."""

from __future__ import annotations

import pytest

from relay.flows import FlowLimitError, FlowLimits, FlowTable

KEY_A, KEY_B, KEY_C = (
    b"\x10\x00\x7f\x00\x00\x01",
    b"\x10\x01\x7f\x00\x00\x01",
    b"\x10\x02\x0a\x00\x00\x01",
)
PREFIX = b"\x7f\x00\x00"


def table(**kw) -> FlowTable:
    return FlowTable(FlowLimits(**kw))


def test_pending_flow_is_created_once_per_client_and_ufrag():
    t = table()
    t.admit(KEY_A, PREFIX, "ufrag1", 3, now=100)
    t.admit(KEY_A, PREFIX, "ufrag1", 3, now=101)  # ICE retransmission
    assert len(t.pending) == 1 and t.created_pending == 1
    assert t.pending[KEY_A].expires_at == 100 + t.limits.pending_ttl_s, "retransmits never extend"


def test_pending_caps_per_ufrag_prefix_and_total():
    t = table(max_pending_per_ufrag=2, max_pending_per_prefix=3, max_pending_flows=4)
    t.admit(b"a", PREFIX, "u", 1, 0)
    t.admit(b"b", PREFIX, "u", 1, 0)
    with pytest.raises(FlowLimitError) as exc:
        t.admit(b"c", PREFIX, "u", 1, 0)
    assert exc.value.reason == "pending_ufrag_limit"
    t.admit(b"c", PREFIX, "v", 1, 0)
    with pytest.raises(FlowLimitError) as exc:
        t.admit(b"d", PREFIX, "w", 1, 0)
    assert exc.value.reason == "pending_prefix_limit"
    t.admit(b"d", b"other", "w", 1, 0)
    with pytest.raises(FlowLimitError) as exc:
        t.admit(b"e", b"third", "x", 1, 0)
    assert exc.value.reason == "pending_full"
    assert len(t.pending) == 4


def test_pending_flows_expire_and_release_their_quota():
    t = table(max_pending_per_ufrag=1, pending_ttl_s=10)
    t.admit(KEY_A, PREFIX, "u", 1, now=0)
    assert t.expire_pending(9) == 0
    assert t.expire_pending(10) == 1
    assert not t.pending and t.expired_pending == 1
    t.admit(KEY_B, PREFIX, "u", 1, now=11)  # the ufrag's quota was released
    assert KEY_B in t.pending


def test_full_pending_table_makes_room_only_from_expired_entries():
    t = table(max_pending_flows=1, pending_ttl_s=5)
    t.admit(KEY_A, PREFIX, "u", 1, now=0)
    assert t.pending_full
    with pytest.raises(FlowLimitError):
        t.admit(KEY_B, PREFIX, "v", 1, now=4)
    t.expire_pending(5)  # the worker's coarse tick
    t.admit(KEY_B, PREFIX, "v", 1, now=5)
    assert list(t.pending) == [KEY_B]


def test_confirm_moves_pending_to_confirmed_and_repoints():
    t = table()
    t.admit(KEY_A, PREFIX, "u", 1, now=0)
    flow, changed = t.confirm(KEY_A, 1, now=1)
    assert changed and flow.target_id == 1 and KEY_A not in t.pending
    flow2, changed = t.confirm(KEY_A, 1, now=2)
    assert flow2 is flow and not changed and flow.last_seen == 2
    _, changed = t.confirm(KEY_A, 2, now=3)
    assert changed and t.confirmed[KEY_A].target_id == 2


def test_confirmed_table_never_evicts_a_live_flow():
    t = table(max_confirmed_flows=2)
    t.confirm(KEY_A, 1, 0)
    t.confirm(KEY_B, 1, 0)
    with pytest.raises(FlowLimitError) as exc:
        t.confirm(KEY_C, 1, 0)
    assert exc.value.reason == "flows_full"
    assert set(t.confirmed) == {KEY_A, KEY_B}


def test_confirmed_flows_expire_after_idle_ttl_unless_refreshed():
    t = table(idle_ttl_s=30)
    t.confirm(KEY_A, 1, now=0)
    t.confirm(KEY_B, 1, now=0)
    t.confirm(KEY_B, 1, now=20)
    assert t.expire_confirmed(30) == []
    gone = t.expire_confirmed(31)
    assert [f.target_id for f in gone] == [1] and list(t.confirmed) == [KEY_B]
    assert t.expired_confirmed == 1


def test_removing_a_target_forgets_its_flows():
    t = table()
    t.confirm(KEY_A, 1, 0)
    t.confirm(KEY_B, 2, 0)
    t.admit(KEY_C, b"p", "u", 1, 0)
    assert len(t.remove_target(1)) == 1
    assert list(t.confirmed) == [KEY_B] and not t.pending


def test_restore_refuses_duplicates_and_respects_the_cap():
    t = table(max_confirmed_flows=1)
    assert t.restore(KEY_A, 1, 0) is not None
    assert t.restore(KEY_A, 1, 0) is None
    assert t.restore(KEY_B, 1, 0) is None
