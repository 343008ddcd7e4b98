"""The relay benchmark's picture: packets/s and CPU per packet of every forwarder (the relay and
its references; bars are medians, whiskers min-max, dots the windows, hollow where a window was
not saturated), and the one-way latency of every path as a distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

RELAY_COLOR = "tab:blue"
REFERENCE_COLOR = "tab:gray"
PATH_COLORS = {"direct": "black", "plain": "tab:gray", "nginx": "tab:green", "relay": RELAY_COLOR}
WINDOWS_KEY = "bars: medians, whiskers: min-max\ndots: windows (hollow: not saturated)"
LATENCY_PERCENTILES = {"p50_us": 50, "p90_us": 90, "p99_us": 99}


def relay_figure(result: dict[str, Any]) -> Figure:
    measured = {k: v for k, v in relay_first(result["variants"]).items() if "skipped" not in v}
    paths = (result.get("latency") or {}).get("paths") or {}
    cfg = result["config"]
    fig, axes = new_figure(
        run_title(
            result,
            f"relay: {cfg['flows']} flows, {cfg['payload_bytes']}-byte datagrams, "
            f"{cfg['workers']} worker(s), {cfg['rounds']} rounds x {cfg['window_s']:g} s",
        ),
        3 if paths else 2,
    )
    variant_bars(axes[0], measured, "packets_per_s", "packets/s forwarded")
    axes[0].yaxis.set_major_formatter(lambda value, _: f"{value / 1e3:,.0f}k")
    axes[0].set_xlabel(WINDOWS_KEY)
    variant_bars(axes[1], measured, "cpu_us_per_packet", "CPU µs per packet (lower is better)")
    ratios = [
        f"{key}: {num(r['median']):.3f}" for key, r in result.get("ratios", {}).items() if r["n"]
    ]
    skipped = [f"{name}: skipped" for name, v in result["variants"].items() if "skipped" in v]
    if ratios or skipped:
        axes[1].set_xlabel("\n".join(["CPU per packet " + r for r in ratios] + skipped))
    if paths:
        latency_distribution(axes[2], relay_first(paths), result["latency"])
    return fig


def relay_first(by_name: dict[str, Any]) -> dict[str, Any]:
    """The relay, then its references (the file sorts them by name)."""
    return dict(sorted(by_name.items(), key=lambda item: item[0] != "relay"))


def variant_bars(ax: Axes, variants: dict[str, Any], key: str, label: str) -> None:
    """A bar per variant at its median over the counted windows, whiskers min-max, and a dot
    per window (hollow if the window was not saturated)."""
    names = list(variants)
    for x, name in enumerate(names):
        spread = variants[name]["summary"][key]
        color = RELAY_COLOR if name == "relay" else REFERENCE_COLOR
        median = num(spread["median"])
        ax.bar(x, median, width=0.6, color=color, alpha=0.6)
        ax.errorbar(
            x,
            median,
            yerr=[[median - num(spread["min"])], [num(spread["max"]) - median]],
            color="black",
            capsize=4,
        )
        windows = variants[name]["windows"]
        offsets = [x + 0.25 * (i / max(1, len(windows) - 1) - 0.5) for i in range(len(windows))]
        for dx, w in zip(offsets, windows, strict=True):
            ax.plot(
                dx,
                num(w[key]),
                "o",
                markersize=4,
                markeredgecolor="black",
                markerfacecolor="black" if w.get("counted") else "none",
            )
    ax.set_xticks(range(len(names)), [n if n == "relay" else f"{n}\n(reference)" for n in names])
    ax.set_title(label, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def latency_distribution(ax: Axes, paths: dict[str, Any], latency: dict[str, Any]) -> None:
    """Per path the share of pings at most so late (a CDF; log time axis, the tail shows);
    results without the distribution get their p50/p90/p99."""
    for name, path in paths.items():
        style = {"color": PATH_COLORS[name]} if name in PATH_COLORS else {}
        label = (
            name
            if path.get("added_p50_us") is None
            else (f"{name} (+{num(path['added_p50_us']):.1f} µs p50)")
        )
        if path.get("percentiles_us"):
            values = [num(v) for v in path["percentiles_us"]]
            ax.step(values, range(len(values)), where="post", label=label, **style)
        else:
            xs = [num(path[k]) for k in LATENCY_PERCENTILES]
            ax.plot(xs, list(LATENCY_PERCENTILES.values()), "o-", label=label, **style)
    ax.set_xscale("log")
    ax.set_xlabel("one-way delay, µs")
    ax.set_ylabel("percentile of pings")
    ax.set_ylim(0, 100)
    ax.set_title(
        f"latency: {latency['rate_pps']} pings/s, {num(latency['seconds']):g} s per path",
        fontsize=9,
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
