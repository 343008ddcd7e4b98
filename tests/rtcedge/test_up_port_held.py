"""A second ``rtcedge up`` on a relay port the first one holds fails before starting anything,
naming ``--relay`` and the relay holding the port, and never says ``ready`` (real processes):
SO_REUSEPORT would have let its relay join the first one's port group silently, and the two would
have split the calls between them. So does one on a UDP port any other program holds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from testbed.ports import free_port
from testbed.procfs import children_of, descendants
from tests.support.processes import identities, kill_all
from tests.support.up import READY_TIMEOUT_S, REPO, wait_ready


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def up_command(http_port: int, relay_port: int) -> list[str]:
    return [sys.executable, "-m", "rtcedge.cli", "up", "--workers", "1",
            "--http", f"127.0.0.1:{http_port}", "--relay", f"127.0.0.1:{relay_port}"]  # fmt: skip


def test_second_up_on_the_same_relay_port_fails_without_ready():
    relay_port = free_port("127.0.0.1")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(
        up_command(free_port("127.0.0.1", socket.SOCK_STREAM), relay_port),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=env, cwd=REPO, start_new_session=True,
    )  # fmt: skip
    children: dict[int, str | None] = {}
    try:
        reader = wait_ready(first, READY_TIMEOUT_S)
        children = identities(descendants(first.pid))
        relay_pid = next(p for p in children_of(first.pid) if b"relay\0serve" in cmdline(p))
        second = subprocess.run(
            up_command(free_port("127.0.0.1", socket.SOCK_STREAM), relay_port),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=REPO,
            timeout=READY_TIMEOUT_S,
        )  # fmt: skip
        output = second.stdout + second.stderr
        assert second.returncode != 0, output
        assert "rtcedge up: ready" not in output
        assert f"--relay: UDP port {relay_port} is served by another relay (pid {relay_pid})" in (
            output
        )
        assert "python -m relay" not in output, "in up's words, not the relay's"
        assert not (set(descendants(first.pid)) - set(children)), "nothing else started"
        assert first.poll() is None, "the first `up` keeps running"
    finally:
        if first.poll() is None:
            first.terminate()
            first.wait(timeout=15)
        kill_all(children)
        if children:
            reader.join(timeout=5)
        assert first.stdout is not None
        first.stdout.close()


def test_up_on_a_udp_port_another_program_holds_fails_naming_relay():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            up_command(free_port("127.0.0.1", socket.SOCK_STREAM), port),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=REPO,
            timeout=READY_TIMEOUT_S,
        )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert f"--relay: UDP 127.0.0.1:{port} is in use" in output
    assert "rtcedge up: ready" not in output and "relay serve" not in output
