"""A real browser talks to the whole stack: Chromium -> relay -> transceiver -> echo -> back.

The browser side (``transceiver/static``) is driven by ``browser_harness`` inside a fresh
network namespace, so Chromium can only reach the stack through the loopback address it runs on
and the relay's address in the answer. Each test runs twice: ``rtcedge up`` on 127.0.0.1 in a
loopback-only namespace, and on ``[::1]`` in a namespace set up like a dual-stack host (see
``DUAL_STACK`` for why Chromium needs that). Needs root (``unshare --net``) and
/usr/bin/chromium, which ``.ci/run`` installs; a missing browser fails the test instead of
skipping it, so CI can't go green without ever having placed a call.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.transceiver.browser_harness import DEFAULT_FIREFOX
from transceiver.signaling.tokens import mint

CHROMIUM = Path("/usr/bin/chromium")
# The harness's --browser: its binary, and the Debian package that has it (.ci/run installs both).
BROWSERS = {
    "chromium": (CHROMIUM, "chromium"),
    "firefox": (Path(DEFAULT_FIREFOX), "firefox-esr"),
}
REPO = Path(__file__).resolve().parents[2]
HTTP_PORT = 8080
RELAY_PORT = 3478  # any free port works: the namespace is new and empty
HARNESS_TIMEOUT_S = 60  # the harness bounds itself to this...
SUBPROCESS_TIMEOUT_S = HARNESS_TIMEOUT_S + 45  # ...and its watchdog to 30 s more
TOKEN_SECRET = "the browser test's token secret, >= 32 bytes"


@dataclasses.dataclass(frozen=True)
class Namespace:
    """The network namespace one call runs in: the stack's address, and how it is set up."""

    host: str  # the stack listens here (HTTP and relay); Chromium calls it
    setup: tuple[str, ...]  # shell commands run in the new namespace before the harness
    interfaces: tuple[str, ...]  # every interface it then has, sorted: nothing else to send from
    browser_addresses: frozenset[str]  # where Chromium's end of the call may be


LOOPBACK = Namespace("127.0.0.1", ("ip link set lo up",), ("lo",), frozenset({"127.0.0.1"}))

ULA = "fd00:72:7463::1"  # a unique local address (RFC 4193): private, never routed out
# Why ::1 needs more than lo: Chromium builds its WebRTC network list from the interface
# addresses its network service reports, leaving out loopback and link-local IPv6 ones (blink's
# IpcNetworkManager::OnNetworkListChanged). --allow-loopback-in-peer-connection then adds
# 127.0.0.1 always, but ::1 only when there is a *default local IPv6 address*: the source address
# of a UDP socket connected toward 2001:4860:4860::8888 (connect only, nothing is sent), which
# must also be one of the listed addresses. A loopback-only namespace has no listed IPv6 address
# and no IPv6 route, so Chromium had no IPv6 network at all: no candidate, ICE stayed "new" (a
# route on lo does not help: the probe's source is then ::1, which is not listed).
# A dual-stack host has a global address and a default route, and so does this namespace: a ULA
# on one end of a veth pair whose other end stays in the namespace too (this kernel has no dummy
# interfaces; a veth end has a carrier only while its peer is up), and the default route through
# it. Nothing can leave the namespace. Chromium then offers both the ULA and ::1 and both checks
# against the relay's [::1] succeed; it nominates the ULA pair, because WebRTC's ICE controller
# compares network cost before priority, and the veth ("ethernet") costs less than the added
# loopback_ipv6 network ("unknown") - as a dual-stack host calls a local [::1] from its LAN
# address. Without the default route only the ULA is offered, and the call works the same way.
DUAL_STACK = Namespace(
    "::1",
    (
        "ip link set lo up",
        "ip link add rtc0 type veth peer name rtc1",
        "ip link set rtc1 up",
        "ip link set rtc0 up",
        f"ip -6 addr add {ULA}/64 dev rtc0 nodad",  # nodad: usable at once, not "tentative"
        "ip -6 route add default dev rtc0",
    ),
    ("lo", "rtc0", "rtc1"),
    frozenset({"::1", ULA}),
)


@pytest.fixture(
    scope="module", params=[LOOPBACK, DUAL_STACK], ids=["ipv4-loopback", "ipv6-loopback"]
)
def namespace(request: pytest.FixtureRequest) -> Namespace:
    return request.param


@pytest.fixture(scope="module")
def call(tmp_path_factory, namespace: Namespace) -> dict:
    """One echo call through the stack, as the harness reports it (JSON)."""
    return run_call(tmp_path_factory, namespace)


def run_call(
    tmp_path_factory,
    namespace: Namespace,
    stack_args: str = "",
    setup: tuple[str, ...] = (),
    options: str = "",
    browser: str = "chromium",
    page_query: str = "",
    http_port: int = HTTP_PORT,
) -> dict:
    """One echo call of ``browser`` through ``rtcedge up`` (plus ``stack_args``) in a new
    namespace set up by ``namespace.setup`` and then ``setup``, the harness given ``options``
    too: its report (JSON).

    The stack wants a signed WHIP token, which the page gets as ``?token=`` and must send on
    its offer and on its hang-up's DELETE; ``page_query`` adds to the page's query
    (``video=1``: transceiver/static/app.js).
    """
    secret_file = tmp_path_factory.mktemp("token") / "secret"
    secret_file.write_text(TOKEN_SECRET + "\n")
    token = mint(TOKEN_SECRET.encode(), time.time(), 300, subject="browser")
    stack = (
        f"rtcedge up --http {{http}} --relay {{relay}} --token-secret-file {secret_file} "
        f"{stack_args}"
    ).strip()
    query = "&".join(filter(None, (f"token={token}", page_query)))
    return run_harness(
        namespace,
        stack,
        f"--page-query {shlex.quote(query)} {options}",
        setup,
        browser=browser,
        http_port=http_port,
    )


def run_harness(
    namespace: Namespace,
    stack: str,
    options: str = "",
    setup: tuple[str, ...] = (),
    harness: str = "tests.transceiver.browser_harness",
    browser: str = "chromium",
    http_port: int = HTTP_PORT,
) -> dict:
    """``harness`` (a module: ``browser_harness`` or one built on it) driving ``browser`` with
    ``stack`` and its ``options`` in a new namespace set up by ``namespace.setup`` and then
    ``setup``: its report (JSON).

    Problems before the call are returned as ``setup_error`` rather than raised, so every test
    FAILS (not errors, never skips) with the reason: CI installs the browsers and runs as root.
    """
    binary, package = BROWSERS[browser]
    if not binary.exists():
        return {
            "setup_error": f"{binary} is missing: the browser test needs Debian's {package} "
            f"(`apt-get install -y {package}`, which .ci/run does)"
        }
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return {"setup_error": f"`{tool}` is missing: the browser runs in its own netns"}
    command = (
        f"exec {sys.executable} -m {harness} --browser {browser}"
        f" --host {namespace.host} --http-port {http_port} --relay-port {RELAY_PORT}"
        f" --timeout {HARNESS_TIMEOUT_S} --stack {shlex.quote(stack)} {options}"
    )
    try:
        proc = subprocess.run(
            [
                "unshare",
                "--net",
                "--",
                "sh",
                "-c",
                " && ".join((*namespace.setup, *setup, command)),
            ],
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


def test_browser_call_connects(call: dict, namespace: Namespace) -> None:
    call = completed(call)
    assert call["error"] is None, describe(call)
    assert call["connected"], describe(call)
    assert call["state"]["connectionState"] == "connected", describe(call)
    assert tuple(call["interfaces"]) == namespace.interfaces, "not the namespace this test made"


def test_selected_remote_candidate_is_the_relay(call: dict, namespace: Namespace) -> None:
    call = completed(call)
    remote = (call.get("stats") or {}).get("selectedRemote")
    assert remote is not None, describe(call)
    assert (remote["address"], remote["port"]) == (namespace.host, RELAY_PORT), describe(call)


def test_browser_calls_from_an_address_of_the_namespace(call: dict, namespace: Namespace) -> None:
    """Chromium's end of the selected pair: the same family, and an address the test gave it."""
    call = completed(call)
    local = (call.get("stats") or {}).get("selectedLocal")
    assert local is not None, describe(call)
    assert local["address"] in namespace.browser_addresses, describe(call)


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
