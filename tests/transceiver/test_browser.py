"""A real browser talks to the whole stack: Chromium -> relay -> transceiver -> echo -> back.

The browser side (``transceiver/static``) is driven by ``browser_harness`` inside a fresh
loopback-only network namespace, so Chromium can only reach the stack through 127.0.0.1 and the
relay's address in the answer. Needs root (``unshare --net``) and /usr/bin/chromium, which
``.ci/run`` installs; a missing browser fails the test instead of skipping it, so CI can't go
green without ever having placed a call.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transceiver.tokens import mint

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
HTTP_PORT = 8080
RELAY_PORT = 3478  # any free port works: the namespace is new and empty
HARNESS_TIMEOUT_S = 60  # the harness bounds itself to this...
SUBPROCESS_TIMEOUT_S = HARNESS_TIMEOUT_S + 45  # ...and its watchdog to 30 s more
TOKEN_SECRET = "the browser test's token secret, >= 32 bytes"


@pytest.fixture(scope="module")
def call(tmp_path_factory) -> dict:
    """One echo call through the stack, as the harness reports it (JSON).

    The stack wants a signed WHIP token, which the page gets as ``?token=`` and must send on
    its offer and on its hang-up's DELETE.

    Problems before the call are returned as ``setup_error`` rather than raised, so every test
    FAILS (not errors, never skips) with the reason: CI installs Chromium and runs as root.
    """
    if not CHROMIUM.exists():
        return {
            "setup_error": f"{CHROMIUM} is missing: the browser test needs Debian's chromium "
            "(`apt-get install -y chromium`, which .ci/run does)"
        }
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return {"setup_error": f"`{tool}` is missing: Chromium runs in its own netns"}
    secret_file = tmp_path_factory.mktemp("token") / "secret"
    secret_file.write_text(TOKEN_SECRET + "\n")
    token = mint(TOKEN_SECRET.encode(), time.time(), 300, subject="browser")
    stack = f"rtcedge up --http {{http}} --relay {{relay}} --token-secret-file {secret_file}"
    harness = (
        f"exec {sys.executable} -m tests.transceiver.browser_harness"
        f" --http-port {HTTP_PORT} --relay-port {RELAY_PORT} --timeout {HARNESS_TIMEOUT_S}"
        f" --stack {shlex.quote(stack)} --page-query token={token}"
    )
    try:
        proc = subprocess.run(
            ["unshare", "--net", "--", "sh", "-c", f"ip link set lo up && {harness}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return {
            "setup_error": f"the harness did not exit in {SUBPROCESS_TIMEOUT_S} s: {exc.stderr}"
        }
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {
            "setup_error": f"the harness printed no JSON (exit {proc.returncode})\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        }
    return json.loads(lines[-1])


def completed(call: dict) -> dict:
    """The harness's report, or this test's failure when the call could not even be attempted."""
    if "setup_error" in call:
        pytest.fail(call["setup_error"], pytrace=False)
    return call


def describe(result: dict) -> str:
    """The harness's report, for assertion messages."""
    return json.dumps(result, indent=1, default=str)


def test_browser_call_connects(call: dict) -> None:
    call = completed(call)
    assert call["error"] is None, describe(call)
    assert call["connected"], describe(call)
    assert call["state"]["connectionState"] == "connected", describe(call)
    assert call["loopback_only"], "the harness ran outside a loopback-only namespace"


def test_selected_remote_candidate_is_the_relay(call: dict) -> None:
    call = completed(call)
    remote = (call.get("stats") or {}).get("selectedRemote")
    assert remote is not None, describe(call)
    assert (remote["address"], remote["port"]) == ("127.0.0.1", RELAY_PORT), describe(call)


def test_audio_flows_both_ways(call: dict) -> None:
    call = completed(call)
    stats = call.get("stats") or {}
    assert stats.get("outbound", {}).get("packetsSent", 0) > 0, describe(call)
    inbound = stats.get("inbound", {})
    assert inbound.get("packetsReceived", 0) > 0, describe(call)
    # Energy, not just packets: the echo carried the fake microphone's beep back to us.
    assert inbound.get("totalAudioEnergy", 0) > 0, describe(call)


def test_data_channel_events_are_echoed(call: dict) -> None:
    call = completed(call)
    messages = (call.get("stats") or {}).get("messages", [])
    echoes = [m for m in messages if isinstance(m, dict) and m.get("type") == "echo"]
    assert echoes, describe(call)


def test_hang_up_deletes_the_session(call: dict) -> None:
    call = completed(call)
    after = call.get("state_after_hangup") or {}
    assert after.get("connectionState") == "closed", describe(call)
    assert after.get("hangupStatus") == 200, describe(call)
    assert after.get("error") is None, describe(call)
