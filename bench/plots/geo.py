"""The geo benchmark's picture: per-call distributions of each metric, one strip per variant
(a dot per call, a bar at the median), DIRECT against EDGE."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, run_title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANELS = (
    ("connect_ms", "offer -> connected (ms)"),
    ("first_echo_ms", "offer -> first echo (ms)"),
    ("frame_loss_pct", "audio frame loss (%)"),
    ("jitter_ms", "echo jitter (ms)"),
    ("rtt_ms", "RTT, RTCP (ms)"),
)
COLOURS = {"direct": "tab:red", "edge": "tab:blue"}


def call_values(variant: dict[str, Any], metric: str) -> list[float]:
    """One metric over a variant's calls (ms for the times), measured ones only."""
    out = []
    for call in variant["calls"]:
        if metric in ("connect_ms", "first_echo_ms"):
            key = "offer_to_connected_s" if metric == "connect_ms" else "offer_to_first_echo_s"
            v = call.get(key)
            v = None if v is None else 1000 * v
        else:
            v = call.get(metric)
        if v is not None and math.isfinite(v):
            out.append(float(v))
    return out


def geo_figure(result: dict[str, Any]) -> Figure:
    variants = list(result["variants"])
    cfg = result.get("config", {})
    fig, axes = new_figure(
        run_title(
            result,
            f"geo: {cfg.get('callers', '?')} callers per variant, {cfg.get('window_s', '?')} s"
            " window (dots: calls, bars: medians)",
        ),
        len(PANELS),
    )
    fig.set_size_inches(3.0 * len(PANELS), 3.6)
    for ax, (metric, title) in zip(axes, PANELS, strict=True):
        for x, name in enumerate(variants):
            values = call_values(result["variants"][name], metric)
            colour = COLOURS.get(name, "tab:gray")
            if values:
                spread = [x + 0.15 * ((i % 5) - 2) / 2 for i in range(len(values))]
                ax.scatter(spread, values, s=14, alpha=0.7, color=colour)
                median = statistics.median(values)
                ax.hlines(median, x - 0.3, x + 0.3, color=colour, linewidth=2)
        ax.set_xticks(range(len(variants)), [v.upper() for v in variants])
        ax.set_xlim(-0.6, len(variants) - 0.4)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    return fig
