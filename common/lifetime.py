"""A child process that ends when its parent does, however the parent ends (Linux only).

A relay left behind by a parent that was SIGKILLed, or that died of a closed terminal, keeps its
public port's SO_REUSEPORT group: the next relay on that port silently shares the traffic with it.
The kernel's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) ends such a child even when the
parent had no chance to run any cleanup.

Caveat: the signal fires when the *thread* that forked the child exits, not the whole process. Use
it only for children started by a thread that lives as long as they should (a main thread; not a
``ThreadPoolExecutor`` or ``asyncio.to_thread`` worker).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h

# Looked up once, in the parent: a forked child only calls it (no dlopen between fork and exec).
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> None:
    """In a freshly forked child: receive ``signum`` when the parent (thread) exits.

    ``parent_pid`` is the parent's PID read before forking: if the parent died before the prctl
    took effect, the child has already been adopted by another process and exits at once.
    """
    if _prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() != parent_pid:
        os._exit(0)


def parent_death_preexec(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``subprocess.Popen`` ``preexec_fn``: the child gets ``signum`` when the caller exits."""
    parent_pid = os.getpid()
    return lambda: die_with_parent(parent_pid, signum)
