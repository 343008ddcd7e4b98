"""What every benchmark's picture shares: a figure of a few panels under a title saying which
run it shows, and figures that could not be measured (None in the file) drawn as gaps."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PANEL_WIDTH_IN = 3.6
HEIGHT_IN = 4.2
QUICK_NOTE = "quick run: a smoke test, not a measurement"


def new_figure(title: str, panels: int, rows: int = 1) -> tuple[Figure, list[Axes]]:
    """A figure of ``panels`` side by side (in ``rows``), titled; matplotlib imported here."""
    from matplotlib.figure import Figure

    cols = math.ceil(panels / rows)
    fig = Figure(figsize=(PANEL_WIDTH_IN * cols, HEIGHT_IN * rows), layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for extra in axes[panels:]:
        extra.remove()
    fig.suptitle(title, fontsize=10)
    return fig, axes[:panels]


def run_title(result: dict[str, Any], what: str) -> str:
    """``what``, then when and where the run was (from the result's header, where it has one)."""
    parts: list[str] = []
    if "started_utc" in result:
        parts.append(f"run {result['started_utc']}")
    host = result.get("host") or {}
    if host.get("cpus_allowed") is not None:
        parts.append(f"{len(host['cpus_allowed'])} CPUs, Linux {host.get('kernel', '?')}")
    title = "\n".join([what, ", ".join(parts)] if parts else [what])
    if (result.get("config") or {}).get("quick"):
        title += f" ({QUICK_NOTE})"
    return title


def num(value: Any) -> float:
    """A figure as a float; None (not measured) as NaN, which matplotlib leaves out."""
    return math.nan if value is None else float(value)
