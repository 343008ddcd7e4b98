"""The connect benchmark's picture: a single call's steps as the caller saw them (p50 bars, p95
marks) and as the transceiver saw them (means), every call of the bursts sorted by its connect
time against the criterion's limit, and the transceiver's memory over connected calls with its
least-squares line."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title
from transceiver.metrics import CONNECT_PHASES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CALLER_STEPS = {
    "post_to_answer": "POST->answer",
    "answer_to_ice": "->ICE",
    "ice_to_connected": "->connected",
    "connected_to_first_echo": "->1st echo",
}
BURST_LIMIT_MS = 100.0
BURST_COLORS = {"burst": "tab:blue", "burst_more": "tab:gray"}


def connect_figure(result: dict[str, Any]) -> Figure:
    fig, axes = new_figure(run_title(result, "connect: calls into one transceiver"), 4)
    stages = {s["name"]: s for s in result["stages"]}
    caller_steps(axes[0], stages.get("single"))
    transceiver_phases(axes[1], (stages.get("single") or {}).get("transceiver_phases_ms") or {})
    bursts(axes[2], [s for s in result["stages"] if s["name"] in BURST_COLORS])
    memory(axes[3], result.get("memory") or {})
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig


def caller_steps(ax: Axes, single: dict[str, Any] | None) -> None:
    ms = (single or {}).get("ms", {})
    labels = list(CALLER_STEPS.values())
    p50 = [num(ms.get(k, {}).get("p50")) for k in CALLER_STEPS]
    p95 = [num(ms.get(k, {}).get("p95")) for k in CALLER_STEPS]
    xs = range(len(labels))
    ax.bar(xs, p50, color="tab:blue", label="p50")
    ax.plot(xs, p95, "_", color="black", markersize=14, label="p95")
    ax.set_xticks(list(xs), labels, fontsize=7, rotation=20)
    n = len((single or {}).get("calls", []))
    ax.set_title(f"single call, caller's view ({n} calls), ms", fontsize=9)
    ax.legend(fontsize=7)


def transceiver_phases(ax: Axes, phases: dict[str, Any]) -> None:
    names = [p for p in CONNECT_PHASES if p in phases]  # in the order they happen
    ax.bar(range(len(names)), [num(phases[k]) for k in names], color="tab:orange")
    ax.set_xticks(list(range(len(names))), names, fontsize=7, rotation=30)
    ax.set_title("single call, transceiver's view: mean ms per step", fontsize=9)


def bursts(ax: Axes, stages: list[dict[str, Any]]) -> None:
    for s in stages:
        times = sorted(
            (c["offer_to_connected_s"] or math.nan) * 1000
            for c in s["calls"]
            if c.get("offer_to_connected_s") is not None
        )
        ax.plot(
            range(1, len(times) + 1),
            times,
            "o-",
            markersize=3,
            color=BURST_COLORS[s["name"]],
            label=f"{s['name']} ({bursts_of(s)} at once)",
        )
    ax.axhline(BURST_LIMIT_MS, color="tab:red", linestyle="--", label="p95 limit")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("calls, sorted (bursts pooled)")
    ax.set_title("POST -> connected per call, ms", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


def bursts_of(stage: dict[str, Any]) -> str:
    """ "20" for one burst of 20 calls, "3 x 20" for three (their calls pooled)."""
    count = len(stage.get("p95_per_burst_ms") or [None])
    size = len(stage["calls"]) // count
    return f"{count} x {size}" if count > 1 else f"{size}"


def memory(ax: Axes, mem: dict[str, Any]) -> None:
    points = mem.get("points") or []
    xs = [num(p.get("sessions_active")) for p in points]
    ys = [num(p.get("rss_mb")) for p in points]
    ax.plot(xs, ys, "o", color="tab:green", label="transceiver RSS")
    slope = mem.get("mb_per_call")
    if slope is not None and points:
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        ends = [min(xs), max(xs)]
        line = [mean_y + slope * (x - mean_x) for x in ends]
        ax.plot(ends, line, "-", color="tab:green", label=f"{slope:.2f} MB per call")
    ax.set_xlabel("connected calls")
    ax.set_title("transceiver memory (VmRSS), MB", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
