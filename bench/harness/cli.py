"""The end of every benchmark's command: run, stop cleanly on SIGTERM or Ctrl-C, print the
report, write the result and its picture. A benchmark exits 0 whatever its figures are: they are
for people to read, and its PASS/FAIL lines say how they compare with the criteria."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import click

from bench.harness.plots import Draw, PlotsUnavailable, write_plot
from bench.harness.results import RESULTS_DIR, write_result
from bench.harness.verdict import QUICK_END

Echo = Callable[[str], None]
Result = dict[str, Any]
T = TypeVar("T")

out_option = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=str(RESULTS_DIR),
    show_default=True,
    help="Folder for the JSON result (and its plot, a PNG with the same name).",
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


def run_async(main: Coroutine[Any, Any, T], deadline_s: float) -> T:
    """``asyncio.run`` with a deadline, where SIGTERM cancels ``main`` as Ctrl-C does
    (asyncio.Runner): every ``finally`` on the way out runs, its awaits included, and stops what
    it started; then KeyboardInterrupt, as after Ctrl-C. (A KeyboardInterrupt raised by a plain
    signal handler would land in whichever callback runs, and skip those awaits.)"""

    async def cancelled_on_sigterm() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        handles_sigterm = threading.current_thread() is threading.main_thread()
        if handles_sigterm:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await asyncio.wait_for(main, deadline_s)
        except asyncio.CancelledError:
            if task.cancelling():  # SIGTERM or Ctrl-C
                raise KeyboardInterrupt from None
            raise
        finally:
            if handles_sigterm:
                loop.remove_signal_handler(signal.SIGTERM)

    return asyncio.run(cancelled_on_sigterm())


def run_and_report(
    benchmark: str,
    measure: Callable[[], Result],
    report: Callable[[Result, Echo], None],
    out_dir: str,
    draw: Draw,
    quick: bool | None = None,
) -> None:
    """Measure, print the report, write ``<out_dir>/<benchmark>-<stamp>.json`` and its plot
    (``.png``, drawn by ``draw`` from the file) and say where; without matplotlib, say how to get
    the plot. A quick run (``quick``, else as the result's config says) ends saying that its
    figures are not judged."""
    with sigterm_unwinds():
        result = measure()
        report(result, click.echo)
        if result.get("config", {}).get("quick") if quick is None else quick:
            click.echo(QUICK_END)
        path = write_result(result, out_dir, benchmark)
        click.echo(f"results: {path}")
        try:
            click.echo(f"plot: {write_plot(path, draw)}")
        except PlotsUnavailable as exc:
            click.echo(str(exc))
