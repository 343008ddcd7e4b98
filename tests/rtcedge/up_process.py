"""``rtcedge up`` as a test runs it: a real process in its own session, its ``ready`` line, and
every process it started ended by PID afterwards, whatever the test's outcome."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

from tests.rtcedge.test_up_lifecycle import READY_TIMEOUT_S, REPO, end_up, wait_ready
from tests.support.processes import descendants, identities


def up_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def up_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rtcedge.cli", "up", "--workers", "1", *args]


@contextlib.contextmanager
def running_up(*args: str) -> Iterator[str]:
    """``rtcedge up ARGS`` until the block ends; yields its ``ready`` line."""
    up = subprocess.Popen(
        up_command(*args),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=up_env(), cwd=REPO, start_new_session=True,
    )  # fmt: skip
    children: dict[int, str | None] = {}
    reader = None
    try:
        seen: list[str] = []
        reader = wait_ready(up, READY_TIMEOUT_S, seen)
        children = identities(descendants(up.pid))
        yield seen[-1]
    finally:
        end_up(up, children, reader, term_timeout_s=15)
