"""Firefox offering camera + microphone, as a video app's page does, gets an audio-only call.

``browser_harness --browser firefox --camera``: the page's microphone stream is asked with
``video: true`` (Firefox's fake camera) and its video track added to the offer, so the offer
has audio, video and the data channel in one BUNDLE group; once with Firefox's default
bundle policy (``balanced``: every m-line with its own port) and once with the page's own
(``max-bundle``). The answer must decline the video (``a=inactive``, or port 0) with the same
ICE credentials in every bundled section (RFC 8843: one transport), the call must connect over
UDP through the relay, carry the tone both ways and the data channel, hang up with a DELETE,
and no video RTP may flow either way. In a loopback-only namespace, as ``test_browser.py``.
"""

from __future__ import annotations

import pytest

from tests.transceiver.test_browser import (  # noqa: F401
    completed,
    describe,
    test_audio_flows_both_ways,
    test_data_channel_events_are_echoed,
    test_hang_up_deletes_the_session,
)

# The UDP scenario's checks (connected, through the relay, the tone both ways), on these calls.
from tests.transceiver.test_browser_firefox import (  # noqa: F401
    SCENARIOS,
    Scenario,
    firefox_call,
    test_firefox_call_connects,
    test_the_call_goes_through_the_relay,
    test_the_echo_is_the_tone_sent,
)

POLICIES = ("balanced", "max-bundle")


@pytest.fixture(scope="module", params=POLICIES, ids=POLICIES)
def scenario(request: pytest.FixtureRequest) -> Scenario:
    udp = SCENARIOS["udp"]
    return Scenario(
        udp.namespace,
        udp.relay,
        harness_options=f"--camera --bundle-policy {request.param}",
    )


@pytest.fixture(scope="module")
def call(tmp_path_factory, scenario: Scenario) -> dict:
    return firefox_call(tmp_path_factory, scenario)


def media_sections(sdp: str) -> list[dict[str, str]]:
    """Each m-section of ``sdp``: its kind, port, direction and ICE ufrag ("" when absent)."""
    sections: list[dict[str, str]] = []
    for line in sdp.splitlines():
        if line.startswith("m="):
            kind, port = line[2:].split()[:2]
            sections.append({"kind": kind, "port": port, "direction": "sendrecv", "ufrag": ""})
        elif sections and line in ("a=sendrecv", "a=sendonly", "a=recvonly", "a=inactive"):
            sections[-1]["direction"] = line[2:]
        elif sections and line.startswith("a=ice-ufrag:"):
            sections[-1]["ufrag"] = line.split(":", 1)[1]
    return sections


def test_the_offer_has_video_and_the_answer_declines_it(call: dict) -> None:
    call = completed(call)
    sdp = call.get("sdp") or {}
    assert sdp.get("offer") and sdp.get("answer"), describe(call)
    offered = [s["kind"] for s in media_sections(sdp["offer"])]
    assert sorted(offered) == ["application", "audio", "video"], describe(sdp)
    answer = media_sections(sdp["answer"])
    assert [s["kind"] for s in answer] == offered, describe(sdp)  # one answer per m-line
    audio, video = (next(s for s in answer if s["kind"] == k) for k in ("audio", "video"))
    assert audio["direction"] == "sendrecv", describe(sdp)
    assert video["direction"] == "inactive" or video["port"] == "0", describe(sdp)
    bundled = [s for s in answer if s["port"] != "0"]
    assert len({s["ufrag"] for s in bundled}) == 1, describe(sdp)  # one transport


def test_no_video_flows(call: dict) -> None:
    call = completed(call)
    video = call.get("video")
    assert video is not None, describe(call)
    assert video["packetsSent"] == 0 and video["packetsReceived"] == 0, describe(video)
