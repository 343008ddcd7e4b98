"""The peer benchmark's picture, per N concurrent calls: CPU per call of rtcedge (relay +
transceiver, and the transceiver alone) and Janus's EchoTest, every round a dot and the median a
line; the ratio rtcedge / Janus against issue 26's 1.5 x; the echo delay p50 and p95 of both;
the worst call's frame loss of both against the 1 % limit. A trial that failed is marked with
a red x under its N."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = {"rtcedge": "tab:blue", "janus": "tab:orange"}
LABELS = {"rtcedge": "rtcedge (relay + transceiver)", "janus": "Janus EchoTest"}
MAX_RATIO = 1.5
MAX_LOSS_PCT = 1.0


def peer_figure(result: dict[str, Any]) -> Figure:
    cfg = result["config"]
    what = (
        f"peer: rtcedge opus echo and Janus EchoTest, one core each in turn, "
        f"{cfg['window_s']:g} s window, {cfg['rounds']} round(s)"
    )
    fig, axes = new_figure(run_title(result, what), 4)
    by_n = (result.get("summary") or {}).get("by_n") or {}
    ns = sorted(int(n) for n in by_n)
    cpu_per_call(axes[0], result["trials"], by_n, ns)
    ratio(axes[1], by_n, ns)
    echo_delay(axes[2], by_n, ns)
    worst_loss(axes[3], result["trials"], by_n, ns)
    for ax in axes:
        ax.set_xlabel("concurrent calls (N)")
        ax.set_xticks(ns)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
        failed = [t["sessions"] for t in result["trials"] if not t["ok"]]
        if failed:
            ax.plot(failed, [0] * len(failed), "x", color="tab:red", markersize=9, clip_on=False)
    return fig


def _floor0(value: float) -> float:
    return value if math.isnan(value) else max(0.0, value)


def _row(by_n: dict[str, Any], n: int, server: str) -> dict[str, Any]:
    return by_n.get(str(n), {}).get(server) or {}


def cpu_per_call(
    ax: Axes, trials: list[dict[str, Any]], by_n: dict[str, Any], ns: list[int]
) -> None:
    for server, color in COLORS.items():
        mine = [t for t in trials if t["server"] == server]
        ax.plot(
            [t["sessions"] for t in mine],
            [num(t["cpu_per_call_pct"]) for t in mine],
            "o",
            color=color,
            alpha=0.4,
            markersize=4,
        )
        ys = [num(_row(by_n, n, server).get("cpu_per_call_pct")) for n in ns]
        ax.plot(ns, ys, "o-", color=color, label=LABELS[server], markersize=4)
    trx = [
        num(_row(by_n, n, "rtcedge").get("parts_per_call_pct", {}).get("transceiver")) for n in ns
    ]
    ax.plot(ns, trx, "o:", color=COLORS["rtcedge"], label="transceiver alone", markersize=3)
    measured = [v for t in trials if math.isfinite(v := num(t["cpu_per_call_pct"]))]
    ax.set_ylim(0, 1.2 * max(measured, default=1.0))  # room above the highest round's dot
    ax.set_title("CPU per call, % of a core", fontsize=9)


def ratio(ax: Axes, by_n: dict[str, Any], ns: list[int]) -> None:
    ax.plot(ns, [num(by_n[str(n)].get("cpu_ratio")) for n in ns], "o-", color="tab:purple",
            label="rtcedge / Janus")  # fmt: skip
    ax.axhline(MAX_RATIO, color="tab:red", linestyle="--", label=f"issue 26: {MAX_RATIO:g} x")
    ax.axhline(1.0, color="tab:green", linestyle=":", label="stretch: 1.0 x")
    ax.set_ylim(bottom=0)
    ax.set_title("CPU per call, rtcedge / Janus", fontsize=9)


def echo_delay(ax: Axes, by_n: dict[str, Any], ns: list[int]) -> None:
    for server, color in COLORS.items():
        for q, style in (("p50", "o-"), ("p95", "o:")):
            ys = [num(_row(by_n, n, server).get("echo_delay_ms", {}).get(q)) for n in ns]
            ax.plot(ns, ys, style, color=color, label=f"{server} {q}", markersize=4)
    ax.set_ylim(bottom=0)
    ax.set_title("echo delay, ms (over the calls)", fontsize=9)


def worst_loss(ax: Axes, trials: list[dict[str, Any]], by_n: dict[str, Any], ns: list[int]) -> None:
    for server, color in COLORS.items():
        # A loss a hair below 0 (the window's edges) drawn at 0, on the log scale's floor.
        ys = [_floor0(num(_row(by_n, n, server).get("worst_loss_pct"))) for n in ns]
        ax.plot(ns, ys, "o-", color=color, label=server, markersize=4)
    ax.axhline(MAX_LOSS_PCT, color="tab:red", linestyle="--", label=f"limit {MAX_LOSS_PCT:g}%")
    ax.set_yscale("symlog", linthresh=0.01, linscale=0.3)
    ax.set_ylim(-0.01, 100)
    ax.set_title("worst call's frame loss, %", fontsize=9)
