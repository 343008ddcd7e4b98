"""The backends (and realtime) benchmark's picture, per N concurrent calls: the latency per
direction, p95, of each backend, the transceiver's own part (socket in -> socket out, from the
loopback capture) against the 2 ms limit and end to end (the measuring ends included); the
transceiver's CPU per call for each backend and echo reference, and each backend's ratio to its
reference against the 1.2 x limit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Steps = list[dict[str, Any]]

DIRECTIONS = {"uplink": "tab:blue", "downlink": "tab:orange"}
MAX_P95_MS, MAX_CPU_RATIO = 2.0, 1.2


MARKERS = {"realtime": "o", "websocket": "^", "media-streams": "D"}  # else "v"


def is_reference(name: str) -> bool:
    return name == "echo" or name.startswith("echo-")


def per_backend(summary_field: Any) -> dict[str, Any]:
    """A summary field by backend; a result of before the backends benchmark (one realtime
    backend, its fields by N directly) as the realtime one's."""
    if not summary_field:
        return {}
    if all(isinstance(v, dict) for v in summary_field.values()):
        return summary_field
    return {"realtime": summary_field}


def realtime_figure(result: dict[str, Any]) -> Figure:
    cfg = result["config"]
    backends = cfg.get("backends") or ["realtime"]
    what = (
        f"{cfg.get('name', 'realtime')}: calls to {', '.join(backends)} vs echo calls, "
        f"{cfg['window_s']:g} s window"
    )
    fig, axes = new_figure(run_title(result, what), 3)
    steps = result["steps"]
    latency(axes[0], steps)
    cpu_per_call(axes[1], steps)
    summary = result.get("summary") or {}
    ratio(
        axes[2],
        per_backend(summary.get("cpu_ratio_by_n")),
        per_backend(summary.get("cpu_ratios_by_round")),
    )
    for ax in axes:
        ax.set_xlabel("concurrent calls")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def latency(ax: Axes, steps: Steps) -> None:
    """Every backend step (rounds and attempts) as points: its p95 per direction, the
    transceiver's part and end to end."""
    names = dict.fromkeys(s["backend"] for s in steps if not is_reference(s["backend"]))
    for name in names:
        of = [s for s in steps if s["backend"] == name]
        ns = [s["sessions"] + 0.6 * (s.get("round", 1) - 1) for s in of]
        marker = MARKERS.get(name, "v")
        for direction, color in DIRECTIONS.items():
            own = [
                num((s.get(f"{direction}_stages_ms") or {}).get("transceiver", {}).get("p95"))
                for s in of
            ]
            ax.plot(ns, own, marker, color=color, label=f"{name} {direction}: transceiver's")
            raw = [num(s[f"{direction}_ms"].get("p95")) for s in of]
            ax.plot(ns, raw, marker, color=color, alpha=0.25, label=f"{name} {direction}: e2e")
    ax.axhline(MAX_P95_MS, color="tab:red", linestyle="--", label="limit")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.set_title("latency per direction, p95, ms (each step)", fontsize=9)


def cpu_per_call(ax: Axes, steps: Steps) -> None:
    for name in dict.fromkeys(s["backend"] for s in steps):
        of = [s for s in steps if s["backend"] == name]
        per_call = [num(s["cpu_per_session_pct"]) for s in of]
        style = "x" if is_reference(name) else MARKERS.get(name, "v")
        ax.plot([s["sessions"] for s in of], per_call, style, label=name)
    ax.set_ylim(bottom=0)
    ax.set_title("transceiver CPU per call, % of a core", fontsize=9)


def ratio(ax: Axes, ratios: dict[str, Any], by_round: dict[str, Any]) -> None:
    for name, of in ratios.items():
        for n, values in (by_round.get(name) or {}).items():
            ax.plot([int(n)] * len(values), [num(r) for r in values], ".", color="tab:gray")
        marker = MARKERS.get(name, "v")
        ax.plot([int(n) for n in of], [num(r) for r in of.values()], f"{marker}-", label=name)
    ax.axhline(MAX_CPU_RATIO, color="tab:red", linestyle="--", label="limit")
    ax.set_ylim(bottom=0)
    ax.set_title("CPU per call, backend / echo at its rate", fontsize=9)
