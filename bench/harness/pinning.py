"""CPU pinning of whole processes: a benchmark puts what it measures on a core of its own.

``sched_setaffinity`` acts on one thread, and threads started later inherit their creator's
mask; so pinning a process means pinning every thread it has now, and again after it may have
started new ones.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator


def pin_process(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` to ``cpus`` (a thread that exits meanwhile is skipped)."""
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), cpus)


def thread_affinities(pid: int) -> set[frozenset[int]]:
    """The distinct CPU sets the threads of ``pid`` may run on: one set if all are pinned alike."""
    out = set()
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                out.add(frozenset(os.sched_getaffinity(int(tid))))
    return out


def cpus_of(pids: Iterable[int]) -> set[int]:
    """Every CPU any of ``pids`` (their main threads) may run on."""
    cpus: set[int] = set()
    for pid in pids:
        cpus |= os.sched_getaffinity(pid)
    return cpus


@contextlib.contextmanager
def own_cpus_restored() -> Iterator[set[int]]:
    """This process's CPUs (yielded), given back to all its threads on the way out: a benchmark
    pins itself while it measures, and ``rtcedge bench`` may run it in a longer-lived process."""
    allowed = set(os.sched_getaffinity(0))
    try:
        yield allowed
    finally:
        pin_process(os.getpid(), allowed)
