"""``rtcedge up``'s children end whenever ``up`` ends, however it ends (real processes).

A relay that outlives ``up`` keeps its UDP port: the next ``up`` on that port joins its
SO_REUSEPORT group without a word and loses a share of the calls to the orphan. Each case starts
``up`` on free loopback ports, waits for ``ready``, collects every descendant (relay supervisor,
relay workers, transceiver), signals ``up``, and checks that all of them are gone and that the
relay's port can be bound again without SO_REUSEPORT.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.peers import free_port
from tests.support.processes import alive, descendants, identities, kill_all, udp_port_free
from tests.support.waits import wait_for

READY_TIMEOUT_S = 20.0
GONE_TIMEOUT_S = 15.0  # bound, not a speed claim: the transceiver drains for 2 s on SIGTERM
REPO = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [
        (signal.SIGINT, False),
        (signal.SIGTERM, False),
        (signal.SIGHUP, False),
        (signal.SIGHUP, True),  # closing the terminal: SIGHUP to the whole process group
        (signal.SIGKILL, False),
    ],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGHUP-group", "SIGKILL"],
)
def test_children_end_with_up(signum: int, to_group: bool) -> None:
    relay_port = free_port("127.0.0.1")
    http_port = free_port("127.0.0.1", socket.SOCK_STREAM)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    up = subprocess.Popen(
        [sys.executable, "-m", "rtcedge.cli", "up", "--workers", "2",
         "--http", f"127.0.0.1:{http_port}", "--relay", f"127.0.0.1:{relay_port}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )  # fmt: skip
    children: dict[int, str | None] = {}
    reader: threading.Thread | None = None
    try:
        reader = wait_ready(up, READY_TIMEOUT_S)
        children = identities(descendants(up.pid))
        # relay supervisor + 2 workers + transceiver (any extra helper is checked too)
        assert len(children) >= 4, f"expected relay, 2 workers, transceiver: {children}"
        assert not udp_port_free("127.0.0.1", relay_port)

        if to_group:
            os.killpg(up.pid, signum)
        else:
            up.send_signal(signum)
        up.wait(timeout=GONE_TIMEOUT_S)
        name = signal.Signals(signum).name
        assert wait_for(lambda: alive(children), [], GONE_TIMEOUT_S), (
            f"outlived `up` ({name}): pids {alive(children)}"
        )
        assert udp_port_free("127.0.0.1", relay_port), "the relay's port is still held"
        if signum != signal.SIGKILL:
            assert up.returncode == 0, f"`up` exited with {up.returncode}, not after a clean stop"
    finally:
        end_up(up, children, reader, term_timeout_s=0)


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
