"""relay.coalescing.Coalescing, the worker loop's decision to sleep briefly before a round:
sparse traffic never waits, dense traffic with few per round does, a loaded worker never
sleeps, and a wait that gathered one stops the waiting."""

from __future__ import annotations

from relay.coalescing import Coalescing


def dense(coalesce_us: int = 1000, batch_size: int = 64) -> Coalescing:
    """A decision whose recent idle spells were short (250 us, as at 40 echo calls)."""
    c = Coalescing(coalesce_us, batch_size)
    for _ in range(60):  # the moving average starts at 1 s idle
        c.idled(250e-6)
    return c


def test_sparse_traffic_never_waits():
    c = Coalescing(1000, 64)
    for _ in range(20):
        c.idled(0.02)  # a datagram every 20 ms: one call
        assert not c.wait_after(1)


def test_one_short_gap_in_sparse_traffic_does_not_start_waiting():
    c = Coalescing(1000, 64)
    for _ in range(10):
        c.idled(0.02)
    c.idled(10e-6)
    assert not c.wait_after(1)


def test_dense_traffic_with_few_per_round_waits_for_the_wait():
    c = dense()
    assert c.wait_s == 0.001 and c.few == 8
    assert c.wait_after(1)
    assert c.wait_after(4)  # the wait gathered several: keep waiting


def test_a_loaded_worker_never_sleeps():
    c = dense()
    assert not c.wait_after(8)
    assert not c.wait_after(64)


def test_a_wait_that_gathered_one_stops_the_waiting_until_idle_again():
    c = dense()
    assert c.wait_after(1)
    assert not c.wait_after(1)  # the wait gathered one: not dense enough
    assert not c.wait_after(3)
    c.idled(250e-6)  # dense again after the next idle spell
    assert c.wait_after(1)


def test_zero_turns_the_wait_off():
    c = dense(coalesce_us=0)
    assert c.few == 0
    assert not c.wait_after(1)
