"""The rate mode's picture (``rtcedge bench relay --rate``): CPU per forwarded packet of every
forwarder against the offered rate, its saturated figure as a dashed line; and the one-way
delay of the pings (p50 solid, p99 dotted) at each rate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.plots.figure import new_figure, num, run_title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = {
    "relay": "tab:blue",
    "relay-nowait": "tab:orange",
    "relay-500us": "tab:purple",
    "c": "tab:gray",
}


def relay_rate_figure(result: dict[str, Any]) -> Figure:
    cfg = result["config"]
    fig, (cpu_ax, delay_ax) = new_figure(
        run_title(
            result,
            f"relay at fixed offered rates: {cfg['flows']} flows, {cfg['rounds']} rounds x "
            f"{cfg['window_s']:g} s per rate",
        ),
        2,
    )
    summary = result["summary"]
    rates = sorted((key for key in summary if key != "saturated"), key=int)  # the file sorts keys
    saturated = summary.get("saturated", {}).get("variants", {})
    for name in result["variants"]:
        color = COLORS.get(name, "tab:green")
        at = [summary[r]["variants"].get(name) for r in rates]
        xs = [int(r) for r, v in zip(rates, at, strict=True) if v]
        cpu = [num(v["cpu_us_per_packet"]["median"]) for v in at if v]
        cpu_ax.plot(xs, cpu, "o-", color=color, label=name)
        if name in saturated:
            cpu_ax.axhline(
                num(saturated[name]["cpu_us_per_packet"]["median"]), color=color, ls="--", lw=1
            )
        delay_ax.plot(xs, [num(v["delay_us"]["p50"]) for v in at if v], "o-", color=color)
        delay_ax.plot(xs, [num(v["delay_us"]["p99"]) for v in at if v], "o:", color=color)
    for ax in (cpu_ax, delay_ax):
        ax.set_xscale("log")
        ax.set_xticks([int(r) for r in rates], [f"{int(r) / 1e3:g}k" for r in rates])
        ax.minorticks_off()
    cpu_ax.set_xlabel("offered packets/s (dashed: saturated)")
    cpu_ax.set_ylabel("CPU µs per forwarded packet")
    cpu_ax.set_ylim(bottom=0)
    cpu_ax.legend(fontsize=8)
    delay_ax.set_yscale("log")
    delay_ax.set_xlabel("offered packets/s")
    delay_ax.set_ylabel("one-way delay µs (p50 solid, p99 dotted)")
    return fig
