"""``rtcedge up`` takes the backend's URL from RTCEDGE_BACKEND_URL and hands it to the
transceiver by its environment: a URL holding a token is on no command line of the processes it
starts (issue 21 #7). A real ``up``, its children read from /proc."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from testbed.ports import free_port
from testbed.procfs import descendants
from tests.support.up import running_up

TOKEN = "sk-backend-5e2d91"
URL = f"ws://bot:{TOKEN}@127.0.0.1:9/call"


def test_the_backend_url_goes_by_the_environment_only(monkeypatch):
    monkeypatch.setenv("RTCEDGE_BACKEND_URL", URL)
    http = f"127.0.0.1:{free_port('127.0.0.1', socket.SOCK_STREAM)}"
    relay = f"127.0.0.1:{free_port('127.0.0.1')}"
    with running_up("--http", http, "--relay", relay, "--backend", "websocket") as ready:
        assert "ready" in ready
        children = descendants(os.getpid())
        cmdlines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children}
        servers = [pid for pid, line in cmdlines.items() if b"transceiver\x00serve" in line]
        assert len(servers) == 1, cmdlines
        assert all(TOKEN.encode() not in line for line in cmdlines.values())
        environ = Path(f"/proc/{servers[0]}/environ").read_bytes().split(b"\x00")
        assert f"RTCEDGE_BACKEND_URL={URL}".encode() in environ
