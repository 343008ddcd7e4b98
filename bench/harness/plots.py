"""A benchmark's picture: drawn from its result file and saved beside it, with the same stem
(``relay_pps-<stamp>.json`` -> ``relay_pps-<stamp>.png``).

matplotlib is an optional extra (``pip install 'rtcedge[plot]'``): without it a benchmark still
writes its JSON and says in one line how to get the picture. A drawing function takes the result
as the file holds it (a figure that could not be measured is None) and returns a matplotlib
Figure; it imports matplotlib when called, so importing it costs nothing and needs nothing.
Figures are rendered by matplotlib's Agg renderer (``Figure.savefig`` to PNG, no pyplot, no
display).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Draw = Callable[[dict[str, Any]], "Figure"]

PLOT_EXTRA = "pip install 'rtcedge[plot]'"
NO_MATPLOTLIB = f"no plot: matplotlib is not installed ({PLOT_EXTRA})"
DPI = 100  # about 1000 x 450 pixels, well under 150 KB: small enough to keep in docs/img/


class PlotsUnavailable(Exception):
    """matplotlib is not installed: the message says how to get it."""


def write_plot(json_path: Path, draw: Draw, png_path: Path | None = None) -> Path:
    """Draw the result in ``json_path`` into a PNG (default: beside it, same stem); its path.
    Raises PlotsUnavailable without matplotlib."""
    result = json.loads(json_path.read_text())
    try:
        figure = draw(result)
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "matplotlib":
            raise
        raise PlotsUnavailable(NO_MATPLOTLIB) from None
    path = png_path or json_path.with_suffix(".png")
    figure.savefig(path, dpi=DPI)
    return path
