"""``rtcedge bench realtime``: the backends benchmark (``bench/backends.py``) for the realtime
backend alone, against the example agent's beep stand-in: issue 23's acceptance, kept under
its name (its results are ``realtime-*.json``)."""

from __future__ import annotations

from typing import Any

import click

from bench.backends import REALTIME, bench_config, measure_options, print_report, run
from bench.harness.cli import run_and_report
from bench.plots.realtime import realtime_figure

EXAMPLES = """
\b
Examples:
  rtcedge bench realtime                      # N = 1, 20, 40; realtime then echo, twice each
  rtcedge bench realtime --sessions 20 --rounds 4 --seconds 20
  rtcedge bench realtime --quick              # smoke test: N = 1, 3 s window
\b
The same as `rtcedge bench backends --backend realtime`: PASS/FAIL for the transceiver's part
of the uplink and downlink, p95 <= 2 ms at 20 calls, and CPU per realtime call <= 1.2 x a
pcm16 echo call at 24 kHz (a --quick run does not judge them).
"""


@click.command("realtime", epilog=EXAMPLES)
@measure_options
def realtime_bench(quick: bool, **given: Any) -> None:
    """Latency the transceiver adds per direction to a Realtime model server, and CPU per call
    against an echo call."""
    cfg = bench_config((REALTIME,), "realtime", quick, **given)
    run_and_report(cfg.name, lambda: run(cfg), print_report, cfg.out_dir, realtime_figure)


if __name__ == "__main__":
    realtime_bench()
