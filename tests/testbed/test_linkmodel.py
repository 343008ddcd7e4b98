"""The link model delivers what it is configured to (over many datagrams), reproducibly."""

from __future__ import annotations

import statistics

import pytest

from testbed.linkmodel import LinkModel, LinkSpec

N = 100_000


def run(spec: LinkSpec, seed: int = 1, gap_s: float = 0.02, n: int = N) -> list[float | None]:
    model = LinkModel(spec, seed)
    return [
        None if (at := model.schedule(i * gap_s, 100)) is None else at - i * gap_s for i in range(n)
    ]


def delivered_ms(delays: list[float | None]) -> list[float]:
    return [1000 * d for d in delays if d is not None]


@pytest.mark.parametrize(
    "spec",
    [LinkSpec(80, 15, 2.0, reorder=True), LinkSpec(10, 0, 0.5), LinkSpec(60, 1, 0.01)],
)
def test_mean_delay_jitter_and_loss_match_the_settings(spec: LinkSpec) -> None:
    delays = run(spec)
    ms = delivered_ms(delays)
    assert statistics.fmean(ms) == pytest.approx(spec.delay_ms, rel=0.02)
    assert statistics.pstdev(ms) == pytest.approx(spec.jitter_ms, rel=0.05, abs=0.05)
    lost = delays.count(None)
    # Binomial: a 5-sigma band around the expected count.
    expected = N * spec.loss_pct / 100
    assert abs(lost - expected) <= 5 * (expected**0.5) + 1


def test_in_order_by_default_and_the_cost_of_it_is_small_at_voice_rates() -> None:
    spec = LinkSpec(80, 15, 0.0)
    delays = run(spec)
    arrivals = [i * 0.02 + d for i, d in enumerate(delays) if d is not None]
    assert arrivals == sorted(arrivals)
    ms = delivered_ms(delays)
    assert statistics.fmean(ms) == pytest.approx(80, rel=0.05)  # measured: ~82 ms


def test_reorder_lets_jitter_reorder() -> None:
    delays = run(LinkSpec(80, 15, 0.0, reorder=True), n=1000)
    arrivals = [i * 0.02 + d for i, d in enumerate(delays) if d is not None]
    assert arrivals != sorted(arrivals)


def test_no_delay_is_negative_and_none_beyond_three_sigma() -> None:
    ms = delivered_ms(run(LinkSpec(5, 15, 0.0, reorder=True)))
    assert min(ms) >= 0
    assert max(ms) <= 10 + 1e-9  # the cut is min(3 * jitter, delay) = 5 ms either side


def test_same_seed_same_fates_other_seed_others() -> None:
    spec = LinkSpec(80, 15, 2.0)
    assert run(spec, seed=7, n=2000) == run(spec, seed=7, n=2000)
    assert run(spec, seed=7, n=2000) != run(spec, seed=8, n=2000)


def test_bounded_queue_drops_and_counts_a_burst() -> None:
    model = LinkModel(LinkSpec(100, 0, 0.0, queue_packets=10), 1)
    fates = [model.schedule(0.0, 100) for _ in range(15)]
    assert fates.count(None) == 5
    assert model.queue_dropped == 5 and model.lost == 0
    assert model.in_flight == 10
    assert model.schedule(0.2, 100) is not None  # delivered ones leave the queue
    assert model.in_flight == 1


def test_counters_report_what_the_model_did() -> None:
    model = LinkModel(LinkSpec(20, 0, 50.0), 3)
    for i in range(1000):
        model.schedule(i * 0.02, 50)
    c = model.counters()
    assert c["packets"] == 1000 and c["bytes"] == 50_000
    assert c["mean_delay_ms"] == pytest.approx(20)
    assert 40 < c["loss_pct"] < 60


@pytest.mark.parametrize(
    "kwargs",
    [{"delay_ms": -1}, {"delay_ms": 1, "loss_pct": 101}, {"delay_ms": 1, "queue_packets": 0}],
)
def test_bad_settings_fail_at_once(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LinkSpec(**kwargs)
