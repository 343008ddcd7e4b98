"""How much of a core this process gets now, measured in the run: what the progress estimates
scale their a-priori durations by before a step has finished.

The a-priori durations are guesses made on a quiet machine. On a busy one (others' work on the
same cores, as on a shared CI machine or a laptop) every step that starts processes, connects
calls or waits for work to drain takes longer, and a quick run's estimate was off by about 2x.
A busy loop's wall time over its CPU time says how contended the core is, with no reference to
calibrate against: 1.0 on an idle core, about 2 beside one neighbour of equal priority.
"""

from __future__ import annotations

import time

PROBE_S = 0.2  # wall time of the probe: a few of the scheduler's slices either way
MAX_SLOWDOWN = 5.0  # a probe descheduled for a while says little about the next minutes


def measured_slowdown(probe_s: float = PROBE_S) -> float:
    """Wall time over this thread's CPU time across a busy loop of ``probe_s``, >= 1."""
    wall_start, cpu_start = time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall_start < probe_s:
        sum(range(1000))
    wall_s = time.perf_counter() - wall_start
    cpu_s = time.thread_time() - cpu_start
    if cpu_s <= 0:
        return MAX_SLOWDOWN
    return min(MAX_SLOWDOWN, max(1.0, wall_s / cpu_s))
