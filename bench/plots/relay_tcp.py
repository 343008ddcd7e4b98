"""The ICE-over-TCP benchmark's picture: the worker's CPU per frame over UDP and TCP (bars are
medians, whiskers min-max, dots the windows, hollow where a window did not count), the TCP/UDP
ratio per round against its bound, and the accept designs' server CPU per connection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = {"udp": "tab:gray", "tcp": "tab:blue", "reuseport": "tab:blue", "acceptor": "tab:gray"}


def relay_tcp_figure(result: dict[str, Any]) -> Figure:
    cfg = result["config"]
    frames = result["frames"]
    accept = result.get("accept") or {"skipped": "not in this result"}
    fig, axes = new_figure(
        run_title(
            result,
            f"ICE-TCP vs UDP through one relay worker: {cfg['rate_fps']:,} frames/s, "
            f"{cfg['flows']} flows each, {cfg['rounds']} rounds x {cfg['window_s']:g} s",
        ),
        2 if "skipped" in accept else 3,
    )
    transports = in_order(frames["transports"], ("udp", "tcp"))
    windows = {
        t: [(w["cpu_us_per_frame"], w["counted"]) for w in v["windows"]]
        for t, v in transports.items()
    }
    bars(
        axes[0],
        {t: v["summary"]["cpu_us_per_frame"] for t, v in transports.items()},
        windows,
        "worker CPU µs per frame (lower is better)",
    )
    axes[0].set_xlabel("bars: medians, whiskers: min-max\ndots: windows (hollow: not counted)")
    ratio_per_round(axes[1], frames["tcp_over_udp"], frames.get("tcp_over_udp_max"))
    if "skipped" not in accept:
        designs = in_order(accept["designs"], ("reuseport", "acceptor"))
        bars(
            axes[2],
            designs,
            {d: [(x, True) for x in v["samples_us"]] for d, v in designs.items()},
            "server CPU µs per connection",
        )
        axes[2].set_xlabel(
            f"{accept['workers']} workers, {accept['connections_per_round']} connections "
            f"per round\nacceptor/reuseport: {num(accept['acceptor_over_reuseport']['median']):.2f}"
        )
    return fig


def in_order(by_name: dict[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
    """``first`` in that order, then the rest (the file sorts its keys by name)."""
    rank = {name: i for i, name in enumerate(first)}
    return dict(sorted(by_name.items(), key=lambda item: rank.get(item[0], len(rank))))


def bars(
    ax: Axes,
    spreads: dict[str, dict[str, Any]],
    dots: dict[str, list[tuple[Any, bool]]],
    title: str,
) -> None:
    """A bar per name at its median, whiskers min-max, and its samples as dots."""
    for x, name in enumerate(spreads):
        s = spreads[name]
        median = num(s["median"])
        ax.bar(x, median, width=0.6, color=COLORS.get(name, "tab:gray"), alpha=0.6)
        ax.errorbar(
            x,
            median,
            yerr=[[median - num(s["min"])], [num(s["max"]) - median]],
            color="black",
            capsize=4,
        )
        points = dots[name]
        for i, (value, counted) in enumerate(points):
            dx = x + 0.25 * (i / max(1, len(points) - 1) - 0.5)
            ax.plot(
                dx,
                num(value),
                "o",
                markersize=4,
                markeredgecolor="black",
                markerfacecolor="black" if counted else "none",
            )
    ax.set_xticks(range(len(spreads)), list(spreads))
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def ratio_per_round(ax: Axes, ratio: dict[str, Any], bound: float | None) -> None:
    """The TCP/UDP ratio of every round, its median and min-max band, and the bound."""
    rounds = [x["round"] + 1 for x in ratio["per_round"]]
    values = [num(x["ratio"]) for x in ratio["per_round"]]
    ax.plot(rounds, values, "o-", color=COLORS["tcp"], label="per round")
    if ratio["n"]:
        ax.axhspan(num(ratio["min"]), num(ratio["max"]), color=COLORS["tcp"], alpha=0.15)
        ax.axhline(
            num(ratio["median"]),
            color=COLORS["tcp"],
            linestyle="--",
            label=f"median {num(ratio['median']):.2f}",
        )
    if bound is not None:
        ax.axhline(bound, color="tab:red", linestyle=":", label=f"bound {bound:g}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylim(0, max([bound or 1.0, *[v for v in values if v == v]]) * 1.15)
    ax.set_xticks(rounds)
    ax.set_xlabel("round (band: min-max)")
    ax.set_title("CPU per frame, TCP / UDP, same offered load", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
