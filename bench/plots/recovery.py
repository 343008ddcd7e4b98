"""The recovery benchmark's picture: the audio gap of every trial per scenario (a dot each over
a box of its quartiles, whiskers min-max), the p95 target where a scenario has one, and scenarios
that could not run named. The baseline (the measurement's noise floor) comes first, then the
scenarios by median gap. Gaps span milliseconds (a worker's restart) to seconds (a relay without
Redis), so the axis is logarithmic above 1 ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num

if TYPE_CHECKING:
    from matplotlib.figure import Figure

JITTER = 0.12  # dots of one scenario spread this far either side, so that equal gaps show


def recovery_figure(result: dict[str, Any]) -> Figure:
    ran = {n: s for n, s in result.items() if "skipped" not in s}
    names = sorted(ran, key=lambda n: (n != "baseline", num(ran[n]["p50_ms"])))
    names += [n for n in result if n not in ran]
    trials = max((s["trials"] for s in ran.values()), default=0)
    buffers = {s["caller_jitter_buffer"] for s in ran.values()}
    fig, axes = new_figure(
        f"recovery: audio gap a caller hears per fail-over, {trials} trial(s) per scenario"
        f" (caller's jitter buffer: {', '.join(sorted(buffers)) or '-'})",
        1,
    )
    fig.set_size_inches(7.5, 4.5)
    ax = axes[0]
    positions = [i for i, n in enumerate(names) if n in ran]
    gaps = [[num(g) for g in ran[names[i]]["gap_ms"]] for i in positions]
    if gaps:
        ax.boxplot(gaps, positions=positions, widths=0.5, whis=(0, 100))
    for i, values in zip(positions, gaps, strict=True):
        spread = [i + JITTER * (2 * k / max(1, len(values) - 1) - 1) for k in range(len(values))]
        ax.plot(spread, values, "o", color="tab:blue", alpha=0.6, markersize=4)
        s = ran[names[i]]
        if s["target_p95_ms"] is not None:
            ax.hlines(s["target_p95_ms"], i - 0.35, i + 0.35, color="tab:red", linestyles="--")
        ax.annotate(
            f"p95 {num(s['p95_ms']):,.0f}",
            (i, max(values)),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
        )
    ax.plot([], [], "--", color="tab:red", label="target p95")
    ax.set_xticks(
        range(len(names)), [n if n in ran else f"{n}\n(skipped)" for n in names], fontsize=8
    )
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_yscale("symlog", linthresh=1, linscale=0.3)
    highest = [num(g) for s in ran.values() for g in s["gap_ms"]]
    highest += [s["target_p95_ms"] for s in ran.values() if s["target_p95_ms"] is not None]
    ax.set_ylim(0, 2 * max(highest, default=1))
    ax.set_ylabel("gap, ms")
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")
    return fig
