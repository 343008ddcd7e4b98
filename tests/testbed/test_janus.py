"""Janus's EchoTest as a peer (testbed/janus.py): the API's requests and replies as plain data,
the configuration it is started with, and one light benchmark caller against a real Janus in
the benchmark's namespace, which echoes its own tone back and is gone when it hangs up.

Janus (Debian package ``janus``) is installed by ``.ci/run``: a missing one fails the real test
instead of skipping it, so CI cannot go green without one call to Janus."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from testbed.caller_workers import JANUS, EchoCall
from testbed.callers import DELAY_LEVELS, gather_on, loopback_only, opus_tone_packets
from testbed.janus import (
    ECHOTEST,
    JanusError,
    JanusProcess,
    answer_sdp,
    check_reply,
    config_text,
    created_id,
    janus_missing,
    request,
)
from testbed.netns import VethNamespace
from transceiver.call.seam import SharedCertificate

HZ = 440


def test_requests_carry_a_fresh_transaction_each() -> None:
    a, b = request("create"), request("attach", plugin=ECHOTEST)
    assert a["janus"] == "create" and b == {**b, "janus": "attach", "plugin": ECHOTEST}
    assert a["transaction"] != b["transaction"]


def test_replies_are_checked_against_the_request() -> None:
    sent = request("create")
    ok = {"janus": "success", "transaction": sent["transaction"], "data": {"id": 42}}
    assert created_id(ok, sent) == 42
    error = {"janus": "error", "transaction": sent["transaction"],
             "error": {"code": 458, "reason": "No such session"}}  # fmt: skip
    with pytest.raises(JanusError, match="create: error 458: No such session"):
        check_reply(error, sent)
    with pytest.raises(JanusError, match="another transaction"):
        check_reply({**ok, "transaction": "someone else's"}, sent)
    with pytest.raises(JanusError, match="'ack' instead of 'success'"):
        check_reply({**ok, "janus": "ack"}, sent)
    with pytest.raises(JanusError, match="not a JSON object"):
        check_reply(["success"], sent)
    with pytest.raises(JanusError, match="no id"):
        created_id({**ok, "data": {}}, sent)


def test_the_answer_is_the_handles_among_the_events() -> None:
    answer = {"janus": "event", "sender": 7, "jsep": {"type": "answer", "sdp": "v=0..."}}
    other = {**answer, "sender": 8, "jsep": {"type": "answer", "sdp": "not ours"}}
    keepalive = {"janus": "keepalive"}
    assert answer_sdp([keepalive, other, answer], 7) == "v=0..."
    assert answer_sdp(answer, 7) == "v=0..."  # maxev=1 returns one event, not a list
    assert answer_sdp([keepalive, other], 7) is None
    refused = {"janus": "event", "sender": 7,
               "plugindata": {"data": {"error_code": 411, "error": "Missing SDP"}}}  # fmt: skip
    with pytest.raises(JanusError, match="411: Missing SDP"):
        answer_sdp([refused], 7)


def test_the_configuration_loads_nothing_but_the_echotest_over_http_on_the_link() -> None:
    files = config_text("10.254.0.2", 0, Path("/tmp/j"))
    core, http = files["janus.jcfg"], files["janus.transport.http.jcfg"]
    assert 'plugins_folder = "/tmp/j/plugins"' in core
    assert 'ice_enforce_list = "10.254.0.2"' in core
    assert "event_loops" not in core  # Janus's default: a loop per handle
    assert "event_loops = 2" in config_text("10.254.0.2", 2, Path("/tmp/j"))["janus.jcfg"]
    assert 'ip = "10.254.0.2"' in http and "admin_http = false" in http
    assert "events = false" in files["janus.plugin.echotest.jcfg"]


real = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="Janus runs in a network namespace: Linux and root (CAP_NET_ADMIN)",
)


async def _call_janus(url: str, host: str) -> tuple[EchoCall, int]:
    gather_on(host)
    try:
        call = EchoCall(1, HZ, opus_tone_packets(HZ, levels=DELAY_LEVELS),
                        SharedCertificate.generateCertificate())  # fmt: skip
        async with aiohttp.ClientSession() as http:
            await call.connect(http, url, timeout_s=10, echo_s=5, signalling=JANUS)
            assert not call.error, call.error
            session = call.janus.session_id
            await asyncio.sleep(1.0)  # 50 packets each way
            await call.hang_up(http, url, timeout_s=5)
    finally:
        loopback_only()
    return call, session


def janus_reply(url: str, body: dict) -> str:
    """A request's reply as text, an error's too (Janus says 'No such session' with a 404)."""
    data = json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data), timeout=5) as resp:
            return resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.read().decode()


@real
def test_a_light_caller_hears_its_own_tone_back_from_janus(tmp_path: Path) -> None:
    assert not janus_missing(), f"{janus_missing()} (.ci/run installs it)"
    with VethNamespace() as ns, JanusProcess(ns, tmp_path) as janus:
        call, session = asyncio.run(_call_janus(janus.url, ns.host_address))
        assert not call.error, call.error
        echo = call.echo
        assert echo.first_echo_at is not None and echo.audio_frames >= 40
        assert echo.tone_checks >= 1 and echo.tone_checks_own == echo.tone_checks
        assert call.echo.echo_delay_ms() is not None  # matched byte for byte: passed through
        # Hung up: its session was destroyed.
        assert "No such session" in janus_reply(f"{janus.url}/{session}", request("keepalive"))
    assert janus.proc is not None and janus.proc.returncode is not None
