"""``rtcedge bench plot FILE.json``: (re-)draw the picture of results already written, e.g. one
measured where matplotlib was not installed, or after a change to how a benchmark is drawn."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.harness.plots import Draw, PlotsUnavailable, write_plot
from bench.plots.connect import connect_figure
from bench.plots.geo import geo_figure
from bench.plots.peer import peer_figure
from bench.plots.realtime import realtime_figure
from bench.plots.recovery import recovery_figure
from bench.plots.relay_pps import relay_figure
from bench.plots.relay_rate import relay_rate_figure
from bench.plots.relay_tcp import relay_tcp_figure
from bench.plots.sessions import sessions_figure
from bench.plots.turn import turn_figure

FIGURES: dict[str, Draw] = {
    "relay_pps": relay_figure,
    "relay_rate": relay_rate_figure,
    "relay_tcp": relay_tcp_figure,
    "sessions": sessions_figure,
    "recovery": recovery_figure,
    "geo": geo_figure,
    "connect": connect_figure,
    "realtime": realtime_figure,
    "turn": turn_figure,
    "backends": realtime_figure,
    "peer": peer_figure,
}


def benchmark_of(path: Path) -> str:
    """Which benchmark wrote ``path``: its header says so, or (recovery's results have no
    header) the file name does: ``<benchmark>-<UTC stamp>.json``."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path}: not a readable JSON result ({exc})") from None
    name = result.get("benchmark") if isinstance(result, dict) else None
    name = name or path.stem.partition("-")[0]
    if name not in FIGURES:
        raise click.BadParameter(
            f"{path}: not a result of {', '.join(FIGURES)} (its name or 'benchmark' key says "
            f"{name!r})"
        )
    return name


@click.command(
    "plot",
    epilog="""
\b
Examples:
  rtcedge bench plot bench/results/relay_pps-20261201T105204Z.json
  rtcedge bench plot bench/results/*.json
\b
Needs matplotlib: pip install 'rtcedge[plot]'. Every benchmark run draws its plot itself when
matplotlib is installed.
""",
)
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
def plot_command(files: tuple[Path, ...]) -> None:
    """Draw each result's plot: a PNG beside its JSON, with the same name."""
    drawers = {path: FIGURES[benchmark_of(path)] for path in files}  # every file checked first
    for path, draw in drawers.items():
        try:
            click.echo(f"plot: {write_plot(path, draw)}")
        except PlotsUnavailable as exc:
            raise click.ClickException(str(exc)) from None
