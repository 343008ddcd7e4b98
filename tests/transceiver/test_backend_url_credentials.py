"""A backend URL holding a credential is refused on the transceiver's (and ``rtcedge up``'s)
command line, where every local user reads it, and accepted from the environment (issue 21 #7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rtcedge.cli import main as rtcedge_main
from testbed.processes import RelayProcess, TransceiverProcess
from transceiver.cli import main as transceiver_main

TOKEN = "sk-backend-7c1f0e9a"
BASE = ["serve", "--id", "0", "--advertise", "127.0.0.1:3478", "--backend", "websocket"]
CREDENTIAL_URLS = [
    (f"wss://{TOKEN}@inference:8765/call", "a user or password"),
    (f"ws://bot:{TOKEN}@inference:8765/call", "a user or password"),
    (f"wss://inference/call?token={TOKEN}", "the token= parameter"),
    (f"wss://inference/call?model=x&API_KEY={TOKEN}", "the API_KEY= parameter"),
]


@pytest.mark.parametrize(("url", "what"), CREDENTIAL_URLS)
def test_a_backend_url_with_a_credential_on_the_command_line_is_refused(url, what):
    result = CliRunner().invoke(
        transceiver_main, [*BASE, "--backend-url", url], env={"RTCEDGE_KEYRING_JSON": "{}"}
    )
    assert result.exit_code == 2, result.output
    assert "--backend-url" in result.output and what in result.output
    assert "RTCEDGE_BACKEND_URL" in result.output
    assert TOKEN not in result.output


@pytest.mark.parametrize(("url", "what"), CREDENTIAL_URLS)
def test_rtcedge_up_refuses_it_too(url, what):
    # --workers 0 as well: whatever happens, nothing starts (refused first, or invalid).
    args = ["up", "--workers", "0", "--backend", "websocket", "--backend-url", url]
    result = CliRunner().invoke(rtcedge_main, args)
    assert result.exit_code == 2, result.output
    assert "--backend-url" in result.output and "RTCEDGE_BACKEND_URL" in result.output


def test_a_real_transceiver_refuses_it_in_argv_and_starts_with_it_from_the_environment():
    url = f"ws://bot:{TOKEN}@127.0.0.1:9/call"
    relay = RelayProcess({}, workers=1, pin=False)
    websocket = ["--backend", "websocket", "--relay-network", "127.0.0.1/32"]
    argv = TransceiverProcess(relay, extra_args=[*websocket, "--backend-url", url])
    with pytest.raises(RuntimeError, match="RTCEDGE_BACKEND_URL"):
        argv.start()
    assert argv.proc is not None and argv.proc.returncode == 2
    env = TransceiverProcess(relay, extra_args=websocket, extra_env={"RTCEDGE_BACKEND_URL": url})
    with env as trx:
        assert trx.http("/readyz")[0] == 200
        assert trx.proc is not None
        assert TOKEN.encode() not in Path(f"/proc/{trx.proc.pid}/cmdline").read_bytes()
