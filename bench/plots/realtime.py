"""The realtime benchmark's picture, per N concurrent calls: the latency per direction, p95, the
transceiver's own part (socket in -> socket out, from the loopback capture) against the 2 ms
limit and end to end (the measuring ends included); the transceiver's CPU per call for realtime
and echo calls, and their ratio against the 1.2 x limit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Steps = list[dict[str, Any]]

DIRECTIONS = {"uplink": "tab:blue", "downlink": "tab:orange"}
MAX_P95_MS, MAX_CPU_RATIO = 2.0, 1.2


def realtime_figure(result: dict[str, Any]) -> Figure:
    cfg = result["config"]
    what = f"realtime: calls to a Realtime model server vs echo calls, {cfg['window_s']:g} s window"
    fig, axes = new_figure(run_title(result, what), 3)
    steps = result["steps"]
    latency(axes[0], [s for s in steps if s["backend"] == "realtime"])
    cpu_per_call(axes[1], steps)
    summary = result.get("summary") or {}
    ratio(axes[2], summary.get("cpu_ratio_by_n") or {}, summary.get("cpu_ratios_by_round") or {})
    for ax in axes:
        ax.set_xlabel("concurrent calls")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def latency(ax: Axes, realtime: Steps) -> None:
    """Every realtime step (rounds and attempts) as points: its p95 per direction, the
    transceiver's part and end to end."""
    ns = [s["sessions"] + 0.6 * (s.get("round", 1) - 1) for s in realtime]
    for direction, color in DIRECTIONS.items():
        own = [
            num((s.get(f"{direction}_stages_ms") or {}).get("transceiver", {}).get("p95"))
            for s in realtime
        ]
        ax.plot(ns, own, "o", color=color, label=f"{direction}: transceiver's part")
        raw = [num(s[f"{direction}_ms"].get("p95")) for s in realtime]
        ax.plot(ns, raw, "s", color=color, alpha=0.4, label=f"{direction}: end to end")
    ax.axhline(MAX_P95_MS, color="tab:red", linestyle="--", label="limit")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.set_title("latency per direction, p95, ms (each step)", fontsize=9)


def cpu_per_call(ax: Axes, steps: Steps) -> None:
    for backend, color in (("realtime", "tab:blue"), ("echo", "tab:gray")):
        of = [s for s in steps if s["backend"] == backend]
        per_call = [num(s["cpu_per_session_pct"]) for s in of]
        ax.plot([s["sessions"] for s in of], per_call, "o", color=color, label=backend)
    ax.set_ylim(bottom=0)
    ax.set_title("transceiver CPU per call, % of a core", fontsize=9)


def ratio(ax: Axes, ratios: dict[str, Any], by_round: dict[str, list[Any]]) -> None:
    for n, values in by_round.items():
        ax.plot([int(n)] * len(values), [num(r) for r in values], ".", color="tab:gray")
    ax.plot(
        [int(n) for n in ratios], [num(r) for r in ratios.values()], "o-", label="median of rounds"
    )
    ax.axhline(MAX_CPU_RATIO, color="tab:red", linestyle="--", label="limit")
    ax.set_ylim(bottom=0)
    ax.set_title("CPU per call, realtime / echo", fontsize=9)
