"""Percentiles and spreads of a run's samples, as the results have recorded them."""

from __future__ import annotations

import math
import statistics


def percentile(sorted_values: list, q: float) -> float:
    """Nearest-rank percentile of sorted values; NaN if there are none."""
    if not sorted_values:
        return math.nan
    return float(sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)])


def percentile_nearest_index(sorted_values: list, q: float) -> float:
    """The value at the index nearest to ``q * (n - 1)``: the recovery benchmark's p95 since its
    first results (for some counts it picks one rank lower than ``percentile``)."""
    return float(sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))])


def spread(values: list[float]) -> dict[str, float | int]:
    """Median, min, max and count; NaN figures if there are no values."""
    if not values:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def median_worst(values: list[float]) -> dict[str, float]:
    """Median and largest of values where larger is worse (loss, lag); empty if none."""
    if not values:
        return {}
    return {"median": statistics.median(values), "worst": max(values)}
