"""``rtcedge up`` as the tests run it: a real process in its own session, its ``ready`` line,
and every process it started ended by PID afterwards, whatever the test's outcome."""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.procfs import descendants
from tests.support.processes import identities, kill_all

REPO = Path(__file__).resolve().parents[2]  # the checkout

READY_TIMEOUT_S = 20.0


def wait_ready(
    proc: subprocess.Popen[str], timeout_s: float, seen: list[str] | None = None
) -> threading.Thread:
    """Wait for ``up``'s ``ready`` line; returns the thread that keeps reading its output.

    ``seen`` collects the lines up to and with the ready line."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True, name="up-stdout")
    reader.start()
    seen = [] if seen is None else seen
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if "rtcedge up: ready" in line:
            return reader
    raise AssertionError(f"`rtcedge up` printed no ready line:\n{''.join(seen)}")


def end_up(
    up: subprocess.Popen[str],
    children: dict[int, str | None],
    reader: threading.Thread | None,
    term_timeout_s: float,
) -> None:
    """Cleanup by PID whatever a test's outcome: ``up`` (SIGTERM first if ``term_timeout_s``,
    then SIGKILL), every process it started, then its output pipe."""
    if not children and up.poll() is None:  # failed before collecting them
        children = identities(descendants(up.pid))
    if up.poll() is None and term_timeout_s:
        up.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.wait(timeout=term_timeout_s)
    if up.poll() is None:
        up.kill()
        up.wait()
    kill_all(children)
    # Close the pipe only once every writer is gone: closing it under a blocked reader hangs.
    if reader is not None:
        reader.join(timeout=5)
    if up.stdout is not None and not (reader and reader.is_alive()):
        up.stdout.close()


def up_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def up_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rtcedge.cli", "up", "--workers", "1", *args]


@contextlib.contextmanager
def running_up(*args: str, seen: list[str] | None = None) -> Iterator[str]:
    """``rtcedge up ARGS`` until the block ends; yields its ``ready`` line (``seen``: filled
    with every line up to it)."""
    up = subprocess.Popen(
        up_command(*args),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=up_env(), cwd=REPO, start_new_session=True,
    )  # fmt: skip
    children: dict[int, str | None] = {}
    reader = None
    try:
        seen = [] if seen is None else seen
        reader = wait_ready(up, READY_TIMEOUT_S, seen)
        children = identities(descendants(up.pid))
        yield seen[-1]
    finally:
        end_up(up, children, reader, term_timeout_s=15)
