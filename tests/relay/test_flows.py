"""The flow tables as plain objects: limits, TTLs and who may extend a flow."""

from __future__ import annotations

import random

from relay.flows import PENDING_UFRAG_LIMIT, FlowLimits, FlowTable

KEY_A, KEY_B, KEY_C = (
    b"\x10\x00\x7f\x00\x00\x01",
    b"\x10\x01\x7f\x00\x00\x01",
    b"\x10\x02\x0a\x00\x00\x01",
)
PREFIX = b"\x7f\x00\x00"


def table(**kw) -> FlowTable:
    return FlowTable(FlowLimits(**kw))


def keys(n: int, base: int = 0) -> list[int]:
    return [base + i for i in range(n)]


def test_pending_flow_is_created_once_per_client_and_ufrag():
    t = table()
    t.admit(KEY_A, PREFIX, "ufrag1", 3, now=100)
    t.admit(KEY_A, PREFIX, "ufrag1", 3, now=101)  # ICE retransmission
    assert len(t.pending) == 1 and t.created_pending == 1
    assert t.pending[KEY_A].expires_at == 100 + t.limits.pending_ttl_s, "retransmits never extend"


def test_a_hint_opens_its_burst_of_pending_flows_then_one_per_refill_interval():
    t = table(max_pending_per_ufrag=3, pending_ufrag_refill_s=10, pending_ttl_s=5)
    for key in keys(3):
        assert t.admit(key, PREFIX, "u", 1, now=0) is None
    refused = t.admit(3, PREFIX, "u", 1, now=0)
    assert refused is PENDING_UFRAG_LIMIT and refused.reason == "pending_ufrag_limit"
    assert 3 not in t.pending
    t.expire_pending(6)  # the flows are gone, the hint's budget is not back
    assert not t.pending
    assert t.admit(3, PREFIX, "u", 1, now=6) is PENDING_UFRAG_LIMIT
    assert t.admit(3, PREFIX, "u", 1, now=10) is None  # one more after 10 s: a NAT rebinding
    assert t.admit(4, PREFIX, "u", 1, now=10) is PENDING_UFRAG_LIMIT
    assert t.admit(4, PREFIX, "other hint", 1, now=10) is None  # budgets are per hint


def test_retransmissions_of_a_pending_flow_cost_nothing_from_the_hint_budget():
    t = table(max_pending_per_ufrag=1)
    for now in range(5):
        t.admit(KEY_A, PREFIX, "u", 1, now=now)
    assert t.created_pending == 1


def test_a_full_prefix_evicts_its_own_oldest_pending_flow():
    t = table(max_pending_per_prefix=2)
    t.admit(1, b"p", "a", 1, now=0)
    t.admit(2, b"other", "b", 1, now=1)
    t.admit(3, b"p", "c", 1, now=2)
    t.admit(4, b"p", "d", 1, now=3)
    assert list(t.pending) == [2, 3, 4] and t.evicted["pending", "prefix"] == 1


def test_a_full_table_evicts_from_the_hint_holding_the_most_never_refuses_the_newcomer():
    """Issue 8 #5: harvested hints x spoofed sources filled the table and refused every caller."""
    t = table(max_pending_flows=64, max_pending_per_ufrag=8)
    spoofed = iter(range(10_000, 20_000))
    for hint in range(8):  # 8 harvested hints x 8 spoofed sources: the table is full
        for _ in range(8):
            t.admit(next(spoofed), b"s%d" % hint, f"harvested{hint}", 1, now=0)
    assert len(t.pending) == 64
    t.admit(KEY_A, PREFIX, "caller", 2, now=1)  # a caller's first check
    t.admit(KEY_B, PREFIX, "caller", 2, now=1)  # and its second address
    assert t.evicted["pending", "worker"] == 2
    assert t.count_pending_of_hint("harvested0") == 7, "the oldest of the busiest hint went"
    assert t.count_pending_of_hint("harvested1") == 7
    for hint in range(8, 24):  # more harvested hints, each with its whole burst
        for _ in range(8):
            t.admit(next(spoofed), b"s%d" % hint, f"harvested{hint}", 1, now=2)
    assert len(t.pending) == 64 and t.evicted["pending", "worker"] == 2 + 16 * 8
    assert KEY_A in t.pending and KEY_B in t.pending, "the caller (2 flows) was never the busiest"
    held = sorted(t.count_pending_of_hint(f"harvested{h}") for h in range(24))
    assert held[0] >= 2 and held[-1] <= 4, "the busiest hints lost theirs first"


def test_hints_holding_equally_many_lose_the_oldest_first():
    t = table(max_pending_flows=3)
    t.admit(1, b"p1", "a", 1, now=0)
    t.admit(2, b"p2", "b", 1, now=1)
    t.admit(3, b"p3", "c", 1, now=2)
    t.admit(4, b"p4", "d", 1, now=3)
    assert list(t.pending) == [2, 3, 4]


def test_pending_bookkeeping_stays_consistent_through_churn():
    rng = random.Random(5)
    t = table(max_pending_flows=50, max_pending_per_prefix=7, max_pending_per_ufrag=6)
    hints = [f"h{i}" for i in range(30)]
    for now in range(300):
        for _ in range(20):
            key = rng.randrange(200)
            if key not in t.confirmed:
                t.admit(key, b"%d" % (key % 9), rng.choice(hints), 1, now)
            if rng.random() < 0.1:
                t.confirm(key, 1, now)
        t.expire_pending(now)
        assert len(t.pending) <= 50
        held: dict[str, int] = {}
        for flow in t.pending.values():
            held[flow.ufrag] = held.get(flow.ufrag, 0) + 1
        assert {h: t.count_pending_of_hint(h) for h in hints} == {h: held.get(h, 0) for h in hints}


def test_pending_flows_expire_and_release_their_prefix():
    t = table(max_pending_per_prefix=1, pending_ttl_s=10)
    t.admit(KEY_A, PREFIX, "u", 1, now=0)
    assert t.expire_pending(9) == 0
    assert t.expire_pending(10) == 1
    assert not t.pending and t.expired_pending == 1
    t.admit(KEY_B, PREFIX, "v", 1, now=11)
    assert KEY_B in t.pending and t.evicted["pending", "prefix"] == 0


def test_the_hint_budget_table_is_bounded_and_forgets_full_buckets_on_the_tick():
    t = table(max_hint_budgets=4, pending_ufrag_refill_s=10, max_pending_per_ufrag=2)
    for i in range(10):
        t.admit(i, b"p%d" % i, f"h{i}", 1, now=0)
    assert len(t.hint_budgets) == 4 and t.hint_budgets.forgotten == 6
    t.expire_pending(20)  # every bucket is full again: nothing to remember
    assert len(t.hint_budgets) == 0


def test_confirm_moves_pending_to_confirmed_and_repoints():
    t = table()
    t.admit(KEY_A, PREFIX, "u", 1, now=0)
    flow, changed, evicted = t.confirm(KEY_A, 1, now=1)
    assert changed and flow.target_id == 1 and KEY_A not in t.pending and evicted == []
    assert flow.ufrag == "u", "the hint of the pending flow is carried over"
    flow2, changed, _ = t.confirm(KEY_A, 1, now=2)
    assert flow2 is flow and not changed and flow.last_seen == 2
    _, changed, _ = t.confirm(KEY_A, 2, now=3)
    assert changed and t.confirmed[KEY_A].target_id == 2
    assert flow.ufrag is None, "the hint named the old transceiver"
    assert t.count_of_target(1) == 0 and t.count_of_target(2) == 1 and t.count_of_hint("u") == 0


def test_a_flow_confirmed_by_another_transceiver_than_its_hint_named_has_no_hint():
    t = table()
    t.admit(KEY_A, PREFIX, "u", 1, now=0)
    flow, _, _ = t.confirm(KEY_A, 2, now=1)
    assert flow.ufrag is None and not t.pending


def confirm_via_hint(t: FlowTable, key, ufrag: str, tid: int, now: int) -> list:
    t.admit(key, key.to_bytes(8, "big"), ufrag, tid, now)
    return t.confirm(key, tid, now)[2]


def test_a_full_worker_table_evicts_the_flow_idle_longest_never_the_newcomer():
    t = table(max_confirmed_flows=3)
    for i, key in enumerate(keys(3)):
        t.confirm(key, 1, now=i)
    t.refresh([0], now=5)  # key 0 carried traffic: key 1 is now the idlest
    _, changed, evicted = t.confirm(99, 2, now=6)
    assert changed and [f.last_seen for f in evicted] == [1]
    assert list(t.confirmed) == [2, 0, 99]
    assert t.evicted["confirmed", "worker"] == 1
    assert t.count_of_target(1) == 2 and t.count_of_target(2) == 1


def test_a_full_transceiver_evicts_its_own_idlest_flow_and_spares_the_others():
    t = table(max_flows_per_transceiver=2)
    t.confirm(10, 1, now=0)
    t.confirm(20, 2, now=0)
    t.confirm(11, 1, now=1)
    t.refresh([10], now=2)
    _, _, evicted = t.confirm(12, 1, now=3)
    assert len(evicted) == 1 and 11 not in t.confirmed
    assert set(t.confirmed) == {10, 12, 20}
    assert t.evicted["confirmed", "transceiver"] == 1 and t.evicted["confirmed", "worker"] == 0


def test_one_hint_keeps_at_most_its_cap_of_flows_however_many_addresses_it_confirms():
    """Issue 8 #3: every reply to a check from a new port made a flow that was never evicted."""
    t = table(max_flows_per_hint=8, max_pending_per_ufrag=10_000)  # the pending stage allows it
    for key in keys(8, base=10_000):
        confirm_via_hint(t, key, "victim-session", tid=1, now=0)
    t.refresh([10_000], now=5)  # that session's live address
    for i, key in enumerate(keys(2000)):
        evicted = confirm_via_hint(t, key, "attacker", tid=1, now=10 + i // 100)
        assert len(evicted) == (1 if i >= 8 else 0)
    assert t.count_of_hint("attacker") == 8 and t.count_of_hint("victim-session") == 8
    assert t.evicted["confirmed", "hint"] == 2000 - 8
    assert len(t.confirmed) == 16 and 10_000 in t.confirmed


def test_a_hint_at_its_cap_gives_up_its_idlest_address_a_rebinding_call_keeps_the_live_one():
    t = table(max_flows_per_hint=2)
    confirm_via_hint(t, 1, "s", 1, now=0)  # the address the call left behind
    confirm_via_hint(t, 2, "s", 1, now=1)
    t.refresh([2], now=4)
    _, _, evicted = t.confirm(3, 1, now=5)  # no pending flow: no hint, not counted for "s"
    assert evicted == [] and t.count_of_hint("s") == 2
    evicted = confirm_via_hint(t, 4, "s", 1, now=6)
    assert [f.last_seen for f in evicted] == [0] and set(t.confirmed) == {2, 3, 4}


def test_confirmed_order_is_last_seen_order_so_expiry_stops_at_the_first_live_flow():
    t = table(idle_ttl_s=10)
    for key in keys(5):
        t.confirm(key, 1, now=key)
    t.refresh([0, 1], now=9)
    assert [t.confirmed[k].last_seen for k in t.confirmed] == [2, 3, 4, 9, 9]
    gone = t.expire_confirmed(now=14)  # deadline 4: flows last seen before it
    assert [f.last_seen for f in gone] == [2, 3] and list(t.confirmed) == [4, 0, 1]
    assert t.count_of_target(1) == 3


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
    assert t.count_of_target(1) == 0


def test_restore_refuses_duplicates_counts_per_transceiver_only_and_evicts_at_a_cap():
    t = table(max_confirmed_flows=2, max_flows_per_hint=1)
    flow, evicted = t.restore(KEY_A, 1, 0)
    assert flow is not None and flow.ufrag is None and evicted == []
    assert t.restore(KEY_A, 1, 0) == (None, [])
    t.restore(KEY_B, 1, 1)
    flow, evicted = t.restore(KEY_C, 1, 2)
    assert flow is not None and [f.last_seen for f in evicted] == [0]
    assert list(t.confirmed) == [KEY_B, KEY_C] and t.count_of_target(1) == 2
