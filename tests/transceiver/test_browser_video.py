"""A real browser offering its camera and microphone gets an audio-only call (issue 25, item 2).

Headless Chromium in its own loopback-only network namespace (as in ``test_browser.py``), with
its fake devices (``--use-fake-device-for-media-stream``: a beep and a test pattern), opens the
page with ``?video=1`` (transceiver/static/app.js): ``getUserMedia({audio: true, video: true})``
and both tracks offered, as a video app's page does. Once with Chromium's own bundle policy
(``balanced``, what video apps get by default: every m-line its own port until the answer
bundles them) and once with the page's ``max-bundle``. The call must connect through the relay,
the answer must give every section one transport (the same ICE credentials, DTLS fingerprint
and setup) and the camera ``a=inactive``, the browser must send no video, the echo must carry
the beep back, and Hang up must DELETE the session.
"""

from __future__ import annotations

import pytest

# The audio-only call's checks (energy both ways, the data channel's echo, the DELETE),
# collected here again: they run on this module's calls, its ``call`` fixture.
from tests.transceiver.test_browser import (  # noqa: F401
    LOOPBACK,
    RELAY_PORT,
    completed,
    describe,
    run_call,
    test_audio_flows_both_ways,
    test_data_channel_events_are_echoed,
    test_hang_up_deletes_the_session,
)
from transceiver.call.bundle import Section, split

SHARED = ("a=ice-ufrag:", "a=ice-pwd:", "a=fingerprint:", "a=setup:")


@pytest.fixture(scope="module", params=["balanced", "max-bundle"])
def call(request: pytest.FixtureRequest, tmp_path_factory) -> dict:
    return run_call(tmp_path_factory, LOOPBACK, page_query=f"video=1&bundle={request.param}")


def sections_of(call: dict, which: str) -> list[Section]:
    text = (call.get("descriptions") or {}).get(which)
    assert text, describe(call)
    return split(text)[1]


def test_a_camera_offer_connects_through_the_relay(call: dict) -> None:
    call = completed(call)
    assert call["error"] is None, describe(call)
    assert call["state"]["connectionState"] == "connected", describe(call)
    remote = (call.get("stats") or {}).get("selectedRemote") or {}
    assert (remote.get("address"), remote.get("port")) == (LOOPBACK.host, RELAY_PORT)
    offered = [s.kind for s in sections_of(call, "offer")]
    assert offered == ["audio", "video", "application"], "Chromium offered its camera"


def test_the_answer_bundles_every_section_on_one_transport(call: dict) -> None:
    call = completed(call)
    answered = sections_of(call, "answer")
    assert [s.kind for s in answered] == ["audio", "video", "application"]
    assert len({(s.port, *s.starting(SHARED)) for s in answered}) == 1, describe(call)
    video = answered[1]
    assert "a=inactive" in video.lines and video.port != "0"


def test_the_browser_sends_no_video(call: dict) -> None:
    call = completed(call)
    video = (call.get("stats") or {}).get("outboundVideo")
    assert video == {"packetsSent": 0, "bytesSent": 0}, describe(call)
