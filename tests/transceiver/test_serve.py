"""``transceiver serve`` as a real process behind a real relay (issue 8, findings 6, 7 and 8).

- Without ``--relay-network`` it warns loudly at start; with it, it does not.
- ``/metrics`` has its own listener (``--metrics``); the WHIP port, public through the ingress,
  no longer serves it, and keeps ``/healthz`` and ``/readyz`` for the probes.
- A token minted by ``transceiver token`` (the helper an app backend can copy) places a real
  call through the relay; an offer never followed by a check ends at ``--first-check-timeout``
  while the real call, whose checks arrive through the relay, goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import aiohttp
import pytest

from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.tone_call import run_client
from tests.support.waits import run, wait_for
from tests.support.whip import SDP, make_offer

WARNING = "--relay-network is not set"
SECRET = "an app backend's secret, 32 bytes or more"


def stderr_after_stop(trx: TransceiverProcess) -> str:
    trx.stop(timeout_s=10)
    assert trx.proc is not None and trx.proc.stderr is not None
    return trx.proc.stderr.read().decode()


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    secret_file = tmp_path_factory.mktemp("secret") / "token-secret"
    secret_file.write_text(f"# the first line signs\n{SECRET}\n")
    relay = RelayProcess({}, workers=1, pin=False)
    trx = TransceiverProcess(
        relay,
        extra_args=[
            "--token-secret-file", str(secret_file),
            "--first-check-timeout", "1",
            "--relay-network", "127.0.0.1/32",
            "--drain-grace", "0",
        ],
    )  # fmt: skip
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        yield relay, trx, secret_file


def test_without_relay_network_the_transceiver_warns_loudly(stack):
    relay, _, _ = stack
    bare = TransceiverProcess(relay, tid=1).start()
    text = stderr_after_stop(bare)
    (line,) = [ln for ln in text.splitlines() if WARNING in ln]
    assert " WARNING " in line and "ANY host" in line and "RTCEDGE_RELAY_NETWORKS" in line


def test_metrics_have_their_own_listener_not_the_whip_port(stack):
    _, trx, _ = stack
    assert get(f"{trx.url}/metrics") == 404, "the WHIP port is public: no metrics there"
    assert get(f"{trx.url}/healthz") == 200 and get(f"{trx.url}/readyz") == 200, "probes"
    status, text = trx.http("/metrics", port=trx.metrics_port)
    assert status == 200 and "rtcedge_transceiver_sessions_active" in text
    assert trx.http("/healthz", port=trx.metrics_port)[0] == 200


def test_metrics_off_opens_no_listener(stack):
    relay, _, _ = stack
    quiet = TransceiverProcess(relay, tid=2, extra_args=["--metrics", "off"]).start()
    try:
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{quiet.metrics_port}/metrics", timeout=2)
        assert get(f"{quiet.url}/metrics") == 404
    finally:
        quiet.stop(timeout_s=10)


def mint_with_the_cli(secret_file, subject: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RTCEDGE_")}
    done = subprocess.run(
        [sys.executable, "-m", "transceiver", "token", "--token-secret-file", str(secret_file),
         "--subject", subject, "--ttl", "60"],
        capture_output=True, text=True, timeout=30, env=env, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_a_minted_token_calls_and_a_checkless_offer_ends_early(stack):
    _, trx, secret_file = stack
    token = mint_with_the_cli(secret_file, "alice")
    assert token.count(".") == 2

    async def go():
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{trx.url}/whip", data=await make_offer(), headers=SDP) as r:
                assert r.status == 401, "a token is required"
            auth = {**SDP, "Authorization": f"Bearer {token}"}
            async with http.post(f"{trx.url}/whip", data=await make_offer(), headers=auth) as r:
                assert r.status == 201  # and nobody ever sends a check for it
        started = time.monotonic()
        call = await run_client(trx.url, 440, seconds=2.5, token=token)
        assert call.connected and not call.error, call.error
        assert time.monotonic() - started > 2, "the call outlived the first-check deadline"

    run(go())
    ended = "rtcedge_transceiver_sessions_ended_total"
    assert wait_for(lambda: trx.metric(ended, reason="first_check_timeout"), 1, 5)
    # A DELETE is answered once the end started: the teardown may still be finishing.
    assert wait_for(lambda: trx.metric(ended, reason="deleted"), 1, 5), "ended by its DELETE"
    assert wait_for(lambda: trx.metric("rtcedge_transceiver_sessions_active"), 0, 5)
