"""The geo benchmark's figure: per-call distributions of each metric, one strip per variant.

A pure function of the result dict (as bench/geo.py writes it) to a matplotlib ``Figure``, so
that the shared plot writer can save it next to the JSON. matplotlib is optional: ``figure``
returns None without it and ``save`` prints a one-line note instead.

``python -m bench.geo_plot RESULT.json OUT.png`` draws a saved result.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from typing import Any

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


def figure(result: dict[str, Any]) -> Any:
    """A Figure with a panel per metric: each call a dot, the median a bar; None without
    matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    variants = list(result["variants"])
    fig = Figure(figsize=(3.0 * len(PANELS), 3.4), layout="constrained")
    axes = fig.subplots(1, len(PANELS))
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
    cfg = result.get("config", {})
    fig.suptitle(f"rtcedge bench geo: {cfg.get('callers', '?')} callers per variant, "
                 f"{cfg.get('window_s', '?')} s window (dots: calls, bars: medians)",
                 fontsize=10)  # fmt: skip
    return fig


def save(result: dict[str, Any], path: str) -> bool:
    """Draw ``result`` to ``path``; False (and a note on stderr) without matplotlib."""
    fig = figure(result)
    if fig is None:
        print("note: matplotlib not installed: geo plot skipped", file=sys.stderr)
        return False
    fig.savefig(path, dpi=110)
    return True


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        save(json.load(f), sys.argv[2])
