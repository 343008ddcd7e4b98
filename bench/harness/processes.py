"""Child processes of a benchmark: each stopped by its PID, its captured stderr kept flowing."""

from __future__ import annotations

import collections
import subprocess
import threading


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drain_stderr(proc: subprocess.Popen[bytes], tail: collections.deque[str]) -> None:
    """Keep reading a child's captured stderr so that a full pipe never blocks it; the last
    lines stay in ``tail`` for a report."""

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.decode(errors="replace").rstrip())

    threading.Thread(target=pump, daemon=True, name=f"stderr-{proc.pid}").start()
