"""A Redis URL holding a credential is refused on the relay's command line (every local user
reads /proc/PID/cmdline) and accepted from the environment (issue 21 #7), like --keyring-json."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from relay.cli import build_config
from relay.cli import main as relay_main
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver
from tests.relay.test_redis_auth import PASSWORD, AuthRedisServer, call_through
from tests.support.waits import wait_for

ROUTING = ["--transceiver", "0=127.0.0.1:5000", "--metrics", "off"]


@pytest.mark.parametrize(
    ("url", "what"),
    [
        (f"redis://:{PASSWORD}@cache:6379/0", "a user or password"),
        (f"rediss://default:{PASSWORD}@cache:6380/0", "a user or password"),
        (f"redis://cache:6379/0?password={PASSWORD}", "the password= parameter"),
    ],
)
def test_a_redis_url_with_a_credential_on_the_command_line_is_refused(url, what):
    result = CliRunner().invoke(
        relay_main, ["serve", *ROUTING, "--redis-url", url], env={"RTCEDGE_KEYRING_JSON": "{}"}
    )
    assert result.exit_code == 2, result.output
    assert "--redis-url" in result.output and what in result.output
    assert "RTCEDGE_REDIS_URL" in result.output  # where to put it instead
    assert "RTCEDGE_REDIS_PASSWORD" in result.output


def test_a_plain_redis_url_on_the_command_line_is_still_taken():
    serve = relay_main.commands["serve"]
    ctx = serve.make_context(
        "serve", ["--keyring-json", "{}", *ROUTING, "--redis-url", "redis://cache:6379/0"]
    )
    assert build_config(ctx.params).redis_url == "redis://cache:6379/0"


def test_a_real_relay_refuses_it_in_argv_and_authenticates_with_it_from_the_environment():
    with AuthRedisServer(PASSWORD) as rds, StandInTransceiver(2) as peer:
        url = f"redis://:{PASSWORD}@{rds.host}:{rds.port}/0"
        argv = RelayProcess(
            {2: peer.address}, workers=1, pin=False, extra_args=["--redis-url", url]
        )
        with pytest.raises(RuntimeError, match="RTCEDGE_REDIS_URL"):
            argv.start()
        assert argv.proc is not None and argv.proc.returncode == 2
        env = RelayProcess(
            {2: peer.address}, workers=1, pin=False, extra_env={"RTCEDGE_REDIS_URL": url}
        )
        with env as relay:
            call_through(relay)
            store = rds.client()
            assert wait_for(lambda: len(store.keys(f"rtcedge:{relay.cluster}:flow:*")) > 0, True)
            assert relay.metric("rtcedge_relay_redis_operations_total", result="error") == 0
            assert relay.proc is not None
            pids = [relay.proc.pid, *relay.worker_pids()]
            for pid in pids:
                assert PASSWORD.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
