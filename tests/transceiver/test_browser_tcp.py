"""A real browser whose network drops UDP still calls: ICE over TCP through the relay.

Headless Chromium in its own loopback-only network namespace (as in ``test_browser.py``) calls
``rtcedge up --relay-tcp``, whose answers name the relay's UDP address and, below it, a passive
ICE-TCP candidate (RFC 6544). With an nftables rule in the namespace that drops UDP to the
relay's port, the call must connect over TCP (the selected pair's protocol is tcp), audio must
flow both ways and the data channel must echo; without the rule the same stack selects UDP.
Installs nftables when ``nft`` is missing (CI runs as root); a failed install fails the test.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

# test_audio_flows_both_ways and test_data_channel_events_are_echoed are the UDP call's checks
# (audio energy both ways, the data channel's echo), collected here again: they run on this
# module's calls, its ``call`` fixture.
from tests.transceiver.test_browser import (  # noqa: F401
    LOOPBACK,
    RELAY_PORT,
    completed,
    describe,
    run_call,
    test_audio_flows_both_ways,
    test_data_channel_events_are_echoed,
)

RELAY_TCP_PORT = 3479
DROP_UDP_TO_RELAY = (
    "nft add table inet rtcedge_test",
    "nft add chain inet rtcedge_test out '{ type filter hook output priority 0 ; }'",
    f"nft add rule inet rtcedge_test out udp dport {RELAY_PORT} drop",
)


def nft_ready() -> str | None:
    """None once ``nft`` is installed; else why it could not be."""
    if shutil.which("nft") is None:
        proc = subprocess.run(
            "apt-get install -y -qq nftables >/dev/null 2>&1 || "
            "(apt-get update -qq && apt-get install -y -qq nftables)",
            shell=True,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if shutil.which("nft") is None:
            return f"nftables is missing and could not be installed: {proc.stderr[-2000:]}"
    return None


@pytest.fixture(scope="module", params=[True, False], ids=["udp-blocked", "udp-open"])
def udp_blocked(request: pytest.FixtureRequest) -> bool:
    return request.param


@pytest.fixture(scope="module")
def call(tmp_path_factory, udp_blocked: bool) -> dict:
    problem = nft_ready() if udp_blocked else None
    if problem:
        return {"setup_error": problem}
    return run_call(
        tmp_path_factory,
        LOOPBACK,
        stack_args=f"--relay-tcp {RELAY_TCP_PORT}",
        setup=DROP_UDP_TO_RELAY if udp_blocked else (),
    )


def test_the_call_connects(call: dict, udp_blocked: bool) -> None:
    call = completed(call)
    assert call["error"] is None, describe(call)
    assert call["connected"], describe(call)
    # A figure, not an assertion (time is noisy here): `pytest -s` shows it.
    print(f"time to connected, udp {'blocked' if udp_blocked else 'open'}: {call['connect_ms']} ms")


def test_the_selected_pair_is_tcp_exactly_when_udp_is_blocked(call: dict, udp_blocked) -> None:
    call = completed(call)
    stats = call.get("stats") or {}
    local, remote = stats.get("selectedLocal"), stats.get("selectedRemote")
    assert local is not None and remote is not None, describe(call)
    if udp_blocked:
        assert local["protocol"] == "tcp", describe(call)
        assert (remote["address"], remote["port"]) == ("127.0.0.1", RELAY_TCP_PORT), describe(call)
    else:
        assert local["protocol"] == "udp", describe(call)
        assert (remote["address"], remote["port"]) == ("127.0.0.1", RELAY_PORT), describe(call)
