"""``rtcedge up`` says ``ready`` only for its own processes (real processes).

With another server on the HTTP port, ``up``'s readiness probe used to be answered by that
server: ``up`` printed ``ready - open http://...`` and only then ``transceiver exited with
status 2``. It now fails before starting anything, naming ``--http`` and the port, and its
transceiver counts as ready only while it holds the HTTP listener itself.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

from testbed.ports import free_port
from testbed.processes import TransceiverProcess
from tests.support.up import READY_TIMEOUT_S, REPO, up_command, up_env


def test_up_on_an_http_port_in_use_fails_naming_it_without_ready():
    with socket.socket() as other:  # any server on the port, e.g. another `rtcedge up`
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        http_port = other.getsockname()[1]
        result = subprocess.run(
            up_command("--http", f"127.0.0.1:{http_port}",
                       "--relay", f"127.0.0.1:{free_port('127.0.0.1')}"),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=up_env(), cwd=REPO,
            timeout=READY_TIMEOUT_S,
        )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert not re.search(r"\bready\b", output), output  # ("already in use" is fine)
    assert f"--http: 127.0.0.1:{http_port} is in use" in output, output


def test_the_readiness_probe_counts_only_its_own_listener():
    """The check behind ``ready`` that no port check can race: a listener on the HTTP port
    counts only when it is the transceiver process's own."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        theirs = other.getsockname()[1]
        trx = TransceiverProcess(relay=None)  # type: ignore[arg-type]  # only its process
        ours = free_port("127.0.0.1", socket.SOCK_STREAM)
        trx.proc = subprocess.Popen(
            [sys.executable, "-c", LISTENER, str(ours)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert trx.proc.stdout is not None and trx.proc.stdout.readline() == "listening\n"
            assert trx.listens_on(ours)
            assert not trx.listens_on(theirs)
        finally:
            trx.proc.kill()
            trx.proc.wait()
            trx.proc.stdout.close()  # type: ignore[union-attr]


LISTENER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
time.sleep(30)
"""
