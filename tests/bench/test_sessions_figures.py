"""The sessions benchmark's derived figures, from steps as its result holds them."""

from __future__ import annotations

import pytest

from bench.sessions import cpu_slope_pct, rss_slope_mb


def step(n: int, cpu: float, rss: float = 100.0, ok: bool = True) -> dict[str, object]:
    return {
        "sessions": n,
        "connected": n,
        "transceiver_cpu_pct": cpu,
        "transceiver_rss_mb": rss,
        "ok": ok,
    }


def test_the_cpu_slope_is_what_one_more_call_adds_over_the_steps_that_passed():
    # 6 % of fixed share plus 0.35 % per call; a failed step past the core is left out.
    steps = [step(n, 6.0 + 0.35 * n) for n in (10, 20, 40, 80)] + [step(100, 99.0, ok=False)]
    assert cpu_slope_pct(steps) == pytest.approx(0.35)
    assert 100 / cpu_slope_pct(steps) > 100 / (steps[3]["transceiver_cpu_pct"] / 80)


def test_no_cpu_slope_from_one_step():
    assert cpu_slope_pct([step(20, 30.0), step(40, 99.0, ok=False)]) is None


def test_memory_per_call_counts_the_idle_process_as_no_call():
    steps = [step(20, 10.0, rss=90.0), step(40, 20.0, rss=100.0)]
    assert rss_slope_mb(80.0, steps) == pytest.approx(0.5)
