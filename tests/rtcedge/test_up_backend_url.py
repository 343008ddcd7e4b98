"""``rtcedge up`` takes the backend's URL from RTCEDGE_BACKEND_URL and hands it to the
transceiver by its environment: a URL holding a token is on no command line of the processes it
starts (issue 21 #7); so does the model server's key (RTCEDGE_BACKEND_KEY), and the options it
passes on as arguments arrive even when given by ``up``'s environment (the transceiver starts
without RTCEDGE_* variables). A real ``up``, its children read from /proc."""

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


def transceiver_of_up() -> int:
    servers = [
        pid
        for pid in descendants(os.getpid())
        if b"transceiver\x00serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert len(servers) == 1, servers
    return servers[0]


def free_addresses() -> list[str]:
    http = f"127.0.0.1:{free_port('127.0.0.1', socket.SOCK_STREAM)}"
    return ["--http", http, "--relay", f"127.0.0.1:{free_port('127.0.0.1')}"]


def test_bring_your_own_model_in_one_command(monkeypatch):
    """The README's: ``RTCEDGE_BACKEND_KEY=... rtcedge up --backend realtime --backend-url
    'ws://HOST:PORT/v1/realtime?model=...'``: the key reaches the transceiver by its
    environment only (it is started with every RTCEDGE_* variable removed)."""
    key = "sk-own-model-" + "q" * 24
    monkeypatch.setenv("RTCEDGE_BACKEND_KEY", key)
    url = "ws://127.0.0.1:9/v1/realtime?model=my-model"  # connected to per call: none here
    with running_up(*free_addresses(), "--backend", "realtime", "--backend-url", url) as ready:
        assert "/realtime" in ready and url not in ready
        trx = transceiver_of_up()
        environ = Path(f"/proc/{trx}/environ").read_bytes().split(b"\x00")
        assert f"RTCEDGE_BACKEND_KEY={key}".encode() in environ
        assert f"RTCEDGE_BACKEND_URL={url}".encode() in environ
        for pid in descendants(os.getpid()):
            assert key.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_the_audio_format_from_ups_environment_reaches_the_transceiver(monkeypatch):
    """RTCEDGE_AUDIO_FORMAT used to be dropped with the other RTCEDGE_* variables (issue 27)."""
    monkeypatch.setenv("RTCEDGE_AUDIO_FORMAT", "opus")
    with running_up(*free_addresses(), "--audio-rate", "16000"):
        args = Path(f"/proc/{transceiver_of_up()}/cmdline").read_bytes().split(b"\x00")
        assert args[args.index(b"--audio-format") + 1] == b"opus"
        assert args[args.index(b"--audio-rate") + 1] == b"16000"
