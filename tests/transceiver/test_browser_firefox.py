"""Firefox ESR calls the whole stack: Firefox -> relay -> transceiver -> echo -> back.

Another WebRTC stack than Chromium's (nICEr for ICE, NSS for DTLS), driven by ``browser_harness
--browser firefox`` over WebDriver BiDi, headless, with its fake microphone playing a steady
``TONE_HZ`` sine, in a fresh loopback-only network namespace (as in ``test_browser.py``), in
three scenarios:

- ``udp``: ``rtcedge up`` on 127.0.0.1;
- ``tcp-udp-blocked``: ``rtcedge up --relay-tcp`` with an nftables rule in the namespace that
  drops UDP to the relay's port (as in ``test_browser_tcp.py``): the call must go over ICE-TCP,
  Firefox's active TCP candidate to the relay's passive one;
- ``ipv6``: ``rtcedge up`` on ``[::1]``. Firefox needs no dual-stack namespace for that (Chromium
  does: ``test_browser.py``): with ``media.peerconnection.ice.loopback`` nICEr gathers ::1 on lo.

Each checks that the call connects through the relay's address (the selected pair's remote
candidate is the relay's, over the scenario's protocol, from an address of the namespace),
that audio flows both ways with energy, that the echo's dominant frequency is the tone sent
(the harness's analyser on the microphone and on the played echo), that the data channel
echoes, and that Hang up's DELETE ends the session (200). Needs root (``unshare --net``) and
Debian's firefox-esr, which ``.ci/run`` installs; a missing browser fails the test instead of
skipping it.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.transceiver.browser_harness import TONE_HZ

# The Chromium call's checks of audio packets and energy both ways, of the data channel's echo
# and of the hang-up's DELETE, collected here again: they run on this module's calls.
from tests.transceiver.test_browser import (  # noqa: F401
    LOOPBACK,
    RELAY_PORT,
    Namespace,
    completed,
    describe,
    run_call,
    test_audio_flows_both_ways,
    test_data_channel_events_are_echoed,
    test_hang_up_deletes_the_session,
)
from tests.transceiver.test_browser_tcp import DROP_UDP_TO_RELAY, RELAY_TCP_PORT, nft_ready

# Only lo: Firefox calls [::1] from ::1 (it leaves no other address to choose).
LOOPBACK_V6 = Namespace("::1", ("ip link set lo up",), ("lo",), frozenset({"::1"}))
TONE_BINS = 2  # the echo's peak may be this many analyser bins off the tone (Opus, resampling)
MIN_TONE_SHARE = 0.5  # of the spectrum's power within 3 bins of the peak: a tone, not noise
MIN_TONE_DB = -60  # the peak's level, dBFS: the fake microphone's sine is about -34


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One Firefox call: where the stack listens, what else it runs with, and the path the
    call must take."""

    namespace: Namespace
    relay: tuple[str, int]  # the relay's address the selected pair must name
    protocol: str = "udp"
    stack_args: str = ""
    setup: tuple[str, ...] = ()  # shell commands in the namespace, after its own
    harness_options: str = ""


SCENARIOS = {
    "udp": Scenario(LOOPBACK, ("127.0.0.1", RELAY_PORT)),
    "tcp-udp-blocked": Scenario(
        LOOPBACK,
        ("127.0.0.1", RELAY_TCP_PORT),
        protocol="tcp",
        stack_args=f"--relay-tcp {RELAY_TCP_PORT}",
        setup=DROP_UDP_TO_RELAY,
    ),
    "ipv6": Scenario(LOOPBACK_V6, ("::1", RELAY_PORT)),
}


@pytest.fixture(scope="module", params=list(SCENARIOS), ids=list(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> Scenario:
    return SCENARIOS[request.param]


@pytest.fixture(scope="module")
def call(tmp_path_factory, scenario: Scenario) -> dict:
    """One Firefox echo call of ``scenario``, as the harness reports it (JSON)."""
    return firefox_call(tmp_path_factory, scenario)


def firefox_call(tmp_path_factory, scenario: Scenario) -> dict:
    problem = nft_ready() if any(line.startswith("nft ") for line in scenario.setup) else None
    if problem:
        return {"setup_error": problem}
    return run_call(
        tmp_path_factory,
        scenario.namespace,
        stack_args=scenario.stack_args,
        setup=scenario.setup,
        options=scenario.harness_options,
        browser="firefox",
    )


def test_firefox_call_connects(call: dict, scenario: Scenario) -> None:
    call = completed(call)
    assert call["error"] is None, describe(call)
    assert call["connected"], describe(call)
    assert call["state"]["connectionState"] == "connected", describe(call)
    assert call["browser"].startswith("firefox "), describe(call)  # and its version
    assert tuple(call["interfaces"]) == scenario.namespace.interfaces, "not the namespace made"
    # A figure, not an assertion (time is noisy here): `pytest -s` shows it.
    print(f"\n{call['browser']}: connected in {call['connect_ms']} ms")


def test_the_call_goes_through_the_relay(call: dict, scenario: Scenario) -> None:
    """The selected pair: the relay's address (the answer's only candidate of that protocol)
    and the scenario's protocol, from an address the namespace gave Firefox."""
    call = completed(call)
    stats = call.get("stats") or {}
    local, remote = stats.get("selectedLocal"), stats.get("selectedRemote")
    assert local is not None and remote is not None, describe(call)
    assert (remote["address"], remote["port"]) == scenario.relay, describe(call)
    assert local["protocol"] == remote["protocol"] == scenario.protocol, describe(call)
    assert local["address"] in scenario.namespace.browser_addresses, describe(call)


def test_the_echo_is_the_tone_sent(call: dict) -> None:
    """Real audio both ways, not just packets: the microphone sends Firefox's fake sine and the
    echo played back has the same dominant frequency, as a tone."""
    call = completed(call)
    tone = call.get("tone") or {}
    assert tone.get("error") is None and tone.get("state") == "running", describe(tone)
    bin_hz = tone["sampleRate"] / tone["fftSize"]
    for name in ("microphone", "echo"):
        heard = tone.get(name)
        assert heard is not None, describe(tone)
        assert abs(heard["peakHz"] - TONE_HZ) <= TONE_BINS * bin_hz, describe(tone)
        assert heard["toneShare"] >= MIN_TONE_SHARE, describe(tone)
        assert heard["peakDb"] is not None and heard["peakDb"] >= MIN_TONE_DB, describe(tone)
