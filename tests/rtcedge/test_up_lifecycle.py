"""``rtcedge up``'s children end whenever ``up`` ends, however it ends (real processes).

A relay that outlives ``up`` keeps its UDP port: the next ``up`` on that port joins its
SO_REUSEPORT group without a word and loses a share of the calls to the orphan. Each case starts
``up`` on free loopback ports, waits for ``ready``, collects every descendant (relay supervisor,
relay workers, transceiver), signals ``up``, and checks that all of them are gone and that the
relay's port can be bound again without SO_REUSEPORT.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from testbed.ports import free_port
from testbed.procfs import descendants
from tests.support.processes import alive, identities, udp_port_free
from tests.support.up import READY_TIMEOUT_S, REPO, end_up, wait_ready
from tests.support.waits import wait_for

GONE_TIMEOUT_S = 15.0  # bound, not a speed claim: the transceiver drains for 2 s on SIGTERM


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
