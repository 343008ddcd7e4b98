"""Processes a test started, followed through /proc: who is still alive (the same process, not a
reused PID), whether a port they held is free again. Who descends from whom is
``testbed.procfs.descendants``, the walk the launchers use too."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), None if it is gone or a zombie.

    Together with the PID it names one process: a PID reused later has another start time.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def identities(pids: list[int]) -> dict[int, str | None]:
    """``{pid: start time}`` for ``alive`` and ``kill_all`` later."""
    return {pid: start_time(pid) for pid in pids}


def alive(processes: dict[int, str | None]) -> list[int]:
    """Those of ``processes`` (from ``identities``) still running."""
    return sorted(p for p, t in processes.items() if t and start_time(p) == t)


def kill_all(processes: dict[int, str | None]) -> None:
    """SIGKILL those still running, by PID (cleanup whatever a test's outcome)."""
    for pid in alive(processes):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def udp_port_free(host: str, port: int) -> bool:
    """Whether ``host:port`` binds without SO_REUSEPORT, i.e. nobody holds it any more."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True
