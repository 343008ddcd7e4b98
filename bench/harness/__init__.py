"""What every benchmark shares, so that each one reads as a short script of its own steps.

What they run and read (the services as processes, callers, CPU time and UDP counters from
/proc) is the testbed's, shared with the tests: testbed/.

- ``results``: the run's header (benchmark, start, host, config) and the JSON result file.
- ``cli``: ``--out``, and the tail every command shares: run (``run_async`` for asyncio), stop
  cleanly on SIGTERM/SIGINT, print the report, write the result and its plot.
- ``plots``: the result's picture, a PNG beside its JSON (matplotlib, an optional extra).
- ``pinning``: which CPUs a process and every one of its threads may run on.
- ``bounds``: deadlines every wait of a run is bounded by.
- ``stats``: percentiles and spreads over a run's samples.
- ``progress``: a line per finished step with the time spent and an estimate of what is left.
- ``coreshare``: how much of a core this process gets now, which the plan's estimate follows.
- ``prerequisites``: programs a run needs, checked before it starts, with an install hint.
- ``verdict``: PASS/FAIL against a criterion, or SKIP in a quick run (a smoke test).
"""
