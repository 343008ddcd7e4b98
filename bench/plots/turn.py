"""The turn benchmark's picture: every turn of every step as a bar of its parts (VAD wait,
recognition, synthesis, transport, the agent's waits) stacked up to its total, the end of the
caller's speech to the first audio it heard; and per step the p50 and p95 of each part."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PARTS = {
    "vad_wait": "tab:blue",
    "recognition": "tab:orange",
    "synthesis": "tab:green",
    "transport": "tab:red",
    "agent_waits": "tab:gray",
}


def turn_figure(result: dict[str, Any]) -> Figure:
    what = "turn: the caller's end of speech -> the first audio of the agent's answer"
    fig, axes = new_figure(run_title(result, what), 2)
    turns(axes[0], result["steps"])
    percentiles(axes[1], result["steps"])
    for ax in axes:
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=6)
    return fig


def turns(ax: Axes, steps: list[dict[str, Any]]) -> None:
    """Each turn split, the steps one after the other (a gap between them)."""
    x, labels, position = [], [], 0
    bars: dict[str, list[float]] = {p: [] for p in PARTS}
    for step in steps:
        for t in step["turns"]:
            if "parts_ms" not in t:
                continue
            x.append(position)
            labels.append(f"N={step['calls']}" if t["turn"] == 1 and t["call"] == 0 else "")
            for part in PARTS:
                bars[part].append(num(t["parts_ms"].get(part)))
            position += 1
        position += 1
    bottom = [0.0] * len(x)
    for part, color in PARTS.items():
        ax.bar(x, bars[part], bottom=bottom, color=color, label=part.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, bars[part], strict=True)]
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("ms")
    ax.set_title("each turn, its parts stacked (total = its height)", fontsize=9)


def percentiles(ax: Axes, steps: list[dict[str, Any]]) -> None:
    """Per step, each part's p50 (bar) and p95 (tick above it)."""
    width = 0.8 / len(PARTS)
    for i, (part, color) in enumerate(PARTS.items()):
        xs = [k + i * width for k in range(len(steps))]
        spreads = [(s["summary"].get("parts_ms") or {}).get(part) or {} for s in steps]
        p50 = [num(d.get("p50")) for d in spreads]
        ax.bar(xs, p50, width, color=color, label=part.replace("_", " "))
        ax.plot(xs, [num(d.get("p95")) for d in spreads], "_", color="black", markersize=8)
    ax.set_xticks(
        [k + 0.4 - width / 2 for k in range(len(steps))],
        [f"N={s['calls']}" for s in steps],
    )
    ax.set_ylabel("ms")
    ax.set_title("each part per step: p50 (bars), p95 (ticks)", fontsize=9)
