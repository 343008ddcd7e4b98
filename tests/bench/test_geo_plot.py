"""The geo figure draws every measured call of every variant, and skips what was not measured."""

from __future__ import annotations

from pathlib import Path

from bench.plots.geo import PANELS, call_values, geo_figure
from tests.support.bench_output import assert_png


def result() -> dict:
    def call(connect_s: float, rtt_ms: float | None) -> dict:
        return {"offer_to_connected_s": connect_s, "offer_to_first_echo_s": connect_s + 0.2,
                "frame_loss_pct": 1.0, "jitter_ms": 5.0, "rtt_ms": rtt_ms}  # fmt: skip

    return {
        "config": {"callers": 3, "window_s": 4.0},
        "variants": {
            "direct": {"calls": [call(0.5, 180.0), call(0.6, None), call(0.7, 190.0)]},
            "edge": {"calls": [call(0.3, 150.0), call(0.35, 151.0), call(0.4, float("nan"))]},
        },
    }


def test_values_in_ms_and_unmeasured_left_out() -> None:
    r = result()
    assert call_values(r["variants"]["direct"], "connect_ms") == [500.0, 600.0, 700.0]
    assert call_values(r["variants"]["direct"], "rtt_ms") == [180.0, 190.0]
    assert call_values(r["variants"]["edge"], "rtt_ms") == [150.0, 151.0]


def test_a_panel_per_metric_with_a_dot_per_measured_call(tmp_path: Path) -> None:
    fig = geo_figure(result())
    axes = fig.get_axes()
    assert len(axes) == len(PANELS)
    rtt = axes[[m for m, _ in PANELS].index("rtt_ms")]
    dots = sum(len(c.get_offsets()) for c in rtt.collections if hasattr(c, "get_offsets"))
    assert dots >= 4  # 2 + 2 measured RTTs (the median bars are collections too)
    fig.savefig(tmp_path / "geo.png")
    assert_png(tmp_path / "geo.png")
