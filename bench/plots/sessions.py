"""The sessions benchmark's picture, a row per audio format, per step (N concurrent echo
calls): every call's frame loss against the criterion's limit, the CPU each party used (and
others' work on the transceiver's core: the machine may be shared), the transceiver's CPU per
call against the codec-only reference, and how long calls took to connect and to hear their
first echo. A step that failed is marked with a red x;
a repeated step (its first attempt was disturbed by others' work) sits just right of its N, and
the lines join the last attempt of each N."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Steps = list[dict[str, Any]]

CPU_SERIES = {
    "transceiver_cpu_pct": ("transceiver (its own core)", "tab:blue", "o-"),
    "clients_cpu_pct": ("callers (the test load)", "tab:gray", "o-"),
    "relay_cpu_pct": ("relay worker", "tab:green", "o-"),
    "others_on_transceiver_core_pct": ("others' work on the transceiver's core", "tab:red", "o:"),
}
TIMES = {"connect_ms": ("connected", "tab:blue"), "first_echo_ms": ("first echo", "tab:orange")}
ATTEMPT_OFFSET = 0.4  # a repeated step's x offset, in sessions


def sessions_figure(result: dict[str, Any]) -> Figure:
    """A row of four panels per audio format (results before the formats had one row)."""
    cfg = result["config"]
    what = f"sessions: echo calls into one transceiver, {cfg['window_s']:g} s window per step"
    formats = result.get("formats") or {"pcm16": {"steps": result["steps"]}}
    fig, axes = new_figure(run_title(result, what), 4 * len(formats), rows=len(formats))
    codec_pct = (result.get("summary") or {}).get("codec_cpu_per_call_pct")
    for row, (fmt, figures) in enumerate(formats.items()):
        panels = axes[4 * row : 4 * row + 4]
        format_row(panels, figures["steps"], num(cfg["max_loss_pct"]), codec_pct)
        if len(formats) > 1 or "formats" in result:
            panels[0].set_ylabel(f"audio format {fmt}", fontsize=9)
    return fig


def format_row(
    axes: list[Axes], steps: Steps, max_loss_pct: float, codec_pct: float | None
) -> None:
    """Loss, CPU by party, CPU per call (with the codec-only reference), connect times."""
    frame_loss(axes[0], steps, max_loss_pct)
    for key, (label, color, style) in CPU_SERIES.items():
        series(axes[1], steps, [num(s[key]) for s in steps], style, color=color, label=label)
    axes[1].axhline(100, color="black", linewidth=0.8)
    axes[1].set_title("CPU, % of one core", fontsize=9)
    per_call = [num(s["cpu_per_session_pct"]) for s in steps]
    series(axes[2], steps, per_call, "o-", label="transceiver")
    if codec_pct:
        axes[2].axhline(codec_pct, color="tab:purple", linestyle="--", label="codec only")
        axes[2].axhline(2.5 * codec_pct, color="tab:red", linestyle=":", label="2.5 x codec")
    axes[2].set_title("CPU per call, % of a core", fontsize=9)
    for key, (label, color) in TIMES.items():
        for q, style in (("p50", "o-"), ("p95", "o:")):
            ys = [num(s[key].get(q)) for s in steps]
            series(axes[3], steps, ys, style, color=color, label=f"{label} {q}")
    axes[3].set_title("time from offer, ms", fontsize=9)
    for ax in (axes[1], axes[2], axes[3]):
        ax.set_ylim(bottom=0)
    for ax in axes:
        ax.set_xlabel("concurrent calls (N)")
        ax.set_xticks(sorted({s["sessions"] for s in steps}))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
        mark_failed(ax, steps)


def x_of(step: dict[str, Any]) -> float:
    return step["sessions"] + ATTEMPT_OFFSET * (step["attempt"] - 1)


def last_attempts(steps: Steps) -> list[int]:
    """Indices of the steps no later attempt of the same N replaced."""
    last = {s["sessions"]: i for i, s in enumerate(steps)}
    return sorted(last.values())


def series(ax: Axes, steps: Steps, ys: list[float], style: str, **kw: Any) -> None:
    """A marker for every step; the line (and the legend entry) through the last attempts."""
    xs = [x_of(s) for s in steps]
    marker = style[0]
    ax.plot(xs, ys, marker, color=kw.get("color", "tab:blue"), markersize=4)
    final = last_attempts(steps)
    ax.plot([xs[i] for i in final], [ys[i] for i in final], style, markersize=4, **kw)


def frame_loss(ax: Axes, steps: Steps, limit_pct: float) -> None:
    """Every call's loss as a dot, the worst per step as a line, the criterion's limit dashed."""
    for s in steps:
        losses = [num(c.get("frame_loss_pct")) for c in s["calls"]]
        ax.plot([x_of(s)] * len(losses), losses, "o", color="tab:blue", alpha=0.3, markersize=3)
    worst = [num(s["frame_loss_pct"].get("worst")) for s in steps]
    series(ax, steps, worst, "o-", color="tab:blue", label="worst call")
    ax.axhline(limit_pct, color="tab:red", linestyle="--", label=f"limit {limit_pct:g}%")
    ax.set_yscale("symlog", linthresh=0.01, linscale=0.3)
    ax.set_ylim(0, 100)
    ax.set_title("frame loss per call, %", fontsize=9)


def mark_failed(ax: Axes, steps: Steps) -> None:
    """A red x on the axis under every step that failed."""
    failed = [x_of(s) for s in steps if not s["ok"]]
    if failed:
        ax.plot(failed, [0] * len(failed), "x", color="tab:red", markersize=9, clip_on=False)
