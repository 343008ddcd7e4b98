"""The peer forwarder's slots as a pure object (transceiver.signaling.forward_budget): owners,
clients and ``now`` in, a slot or a reason out."""

from __future__ import annotations

from common.verdict import Refuse
from transceiver.signaling.forward_budget import PeerBudget, PeerLimits, Slot

LIMITS = PeerLimits(max_forwards=6, max_per_owner=4, max_per_client=2, max_claims=3,
                    fail_fast_s=3.0, max_failing_owners=3)  # fmt: skip


def take(budget: PeerBudget, owner: int, client: str, now: float = 0.0) -> Slot:
    slot = budget.take_forward(owner, client, now)
    assert isinstance(slot, Slot), slot
    return slot


def test_one_owner_holds_at_most_its_own_slots():
    budget = PeerBudget(LIMITS)
    held = [take(budget, 9, f"c{i}") for i in range(4)]
    assert budget.take_forward(9, "c9", 0.0) == Refuse("owner_busy")
    take(budget, 1, "c9")  # another owner still gets its slot
    budget.release(held[0], timed_out=False, now=1.0)
    take(budget, 9, "c9")
    assert budget.in_flight(owner=9) == 4 and budget.in_flight() == 5


def test_one_client_holds_at_most_two_slots():
    budget = PeerBudget(LIMITS)
    take(budget, 1, "a")
    take(budget, 2, "a")
    assert budget.take_forward(3, "a", 0.0) == Refuse("client_busy")
    take(budget, 3, "b")


def test_the_total_is_bounded_across_owners_and_clients():
    budget = PeerBudget(LIMITS)
    for i in range(LIMITS.max_forwards):
        take(budget, i, f"c{i}")
    assert budget.take_forward(99, "new", 0.0) == Refuse("busy")


def test_claims_have_a_budget_of_their_own():
    budget = PeerBudget(LIMITS)
    for i in range(LIMITS.max_forwards):
        take(budget, i, f"c{i}")
    assert budget.take_forward(0, "new", 0.0) == Refuse("busy")
    claims = [budget.take_claim(0, 0.0) for _ in range(LIMITS.max_claims)]
    assert all(isinstance(c, Slot) for c in claims), "forwards spent: claims still go"
    assert budget.take_claim(0, 0.0) == Refuse("busy")
    budget.release(claims[0], timed_out=False, now=0.0)  # type: ignore[arg-type]
    assert isinstance(budget.take_claim(5, 0.0), Slot)


def test_an_owner_that_timed_out_fails_fast_for_a_while_then_is_tried_again():
    budget = PeerBudget(LIMITS)
    slot = take(budget, 7, "a", now=10.0)
    budget.release(slot, timed_out=True, now=15.0)
    assert budget.take_forward(7, "b", 15.1) == Refuse("owner_failing")
    assert budget.take_claim(7, 17.9) == Refuse("owner_failing")
    take(budget, 8, "b", now=16.0)  # other owners are untouched
    assert budget.in_flight() == 1, "no slot held for the failing owner"
    take(budget, 7, "b", now=18.0)  # fail_fast_s later
    assert budget.failing_owners == 0


def test_a_slot_released_in_time_does_not_open_the_owner():
    budget = PeerBudget(LIMITS)
    budget.release(take(budget, 7, "a"), timed_out=False, now=1.0)
    take(budget, 7, "a", now=1.0)


def test_the_failing_table_is_bounded():
    budget = PeerBudget(LIMITS)
    for owner in range(10):
        budget.release(take(budget, owner, "a", now=owner), timed_out=True, now=float(owner))
        assert budget.failing_owners <= LIMITS.max_failing_owners
    assert budget.failing(9, 9.5) and budget.failing(8, 9.5)
    assert not budget.failing(0, 9.5), "the oldest entries were evicted"


def test_tables_empty_once_every_slot_is_back():
    budget = PeerBudget(LIMITS)
    slots = [take(budget, i % 3, f"c{i}") for i in range(6)]
    for slot in slots:
        budget.release(slot, timed_out=False, now=0.0)
    assert budget.in_flight() == 0
    assert budget._per_owner == {} and budget._per_client == {}
