"""The end of every benchmark's command: run, stop cleanly on SIGTERM or Ctrl-C, print the
report, write the result. A benchmark exits 0 whatever its figures are: they are for people to
read, and its PASS/FAIL lines say how they compare with the criteria."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import click

from bench.harness.results import RESULTS_DIR, write_result

Echo = Callable[[str], None]
Result = dict[str, Any]

out_option = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=str(RESULTS_DIR),
    show_default=True,
    help="Folder for the JSON result.",
)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so that every process a benchmark started is stopped by PID
    on the way out. Only the main thread may set a handler: elsewhere SIGTERM keeps its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_and_report(
    benchmark: str,
    measure: Callable[[], Result],
    report: Callable[[Result, Echo], None],
    out_dir: str,
) -> None:
    """Measure, print the report, write ``<out_dir>/<benchmark>-<stamp>.json`` and say where."""
    with sigterm_unwinds():
        result = measure()
        report(result, click.echo)
        click.echo(f"results: {write_result(result, out_dir, benchmark)}")
