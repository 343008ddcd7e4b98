"""What every benchmark shares, so that each one reads as a short script of its own steps.

- ``results``: the run's header (benchmark, start, host, config) and the JSON result file.
- ``cli``: ``--out``, and the tail every command shares: run (``run_async`` for asyncio), stop
  cleanly on SIGTERM/SIGINT, print the report, write the result and its plot.
- ``plots``: the result's picture, a PNG beside its JSON (matplotlib, an optional extra).
- ``pinning``: which CPUs a process and every one of its threads may run on.
- ``procfs``: what the kernel counts for us: CPU time of processes and CPUs, UDP socket queues
  and drops.
- ``processes``: children stopped by PID, their stderr drained.
- ``bounds``: deadlines every wait of a run is bounded by.
- ``stats``: percentiles and spreads over a run's samples.
- ``progress``: a line per finished step with the time spent and an estimate of what is left.
- ``prerequisites``: programs a run needs, checked before it starts, with an install hint.
- ``verdict``: PASS/FAIL against a criterion, or SKIP in a quick run (a smoke test).
"""
