"""An example server (examples/...) as tests run it: a real process on a free loopback port that
prints ``ready URL`` once it takes connections, stopped by its PID whatever the outcome."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0  # imports and models, on a busy machine


@dataclass
class RunningServer:
    url: str  # what its ``ready`` line names
    process: subprocess.Popen
    stderr: list[str]


@contextlib.contextmanager
def running_server(script: Path, *args: str) -> Iterator[RunningServer]:
    """``script --listen 127.0.0.1:0 ARGS`` until the block ends; SIGTERM, then SIGKILL."""
    process = subprocess.Popen(
        [sys.executable, str(script), "--listen", "127.0.0.1:0", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    stderr: list[str] = []
    assert process.stderr is not None and process.stdout is not None
    threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True).start()
    try:
        url = _ready_url(process, stderr)
        yield RunningServer(url, process, stderr)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def _ready_url(process: subprocess.Popen, stderr: list[str]) -> str:
    """The URL of the server's ``ready URL`` line, read with a deadline."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT_S)
    line = found[0] if found else ""
    if not line.startswith("ready "):
        time.sleep(0.2)  # let stderr's reader catch the traceback, for the message below
        tail = "".join(stderr[-20:])
        name = Path(str(process.args[1])).name  # type: ignore[index]
        raise AssertionError(f"{name} not ready: {line!r}, exit {process.poll()}\n{tail}")
    return line.split()[1]
