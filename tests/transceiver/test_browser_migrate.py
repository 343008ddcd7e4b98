"""A real browser's call moves when its transceiver is scaled down (docs/transceiver.md, "Moving
calls on scale-down"): the page's ``session.migrate`` code in headless Chromium.

In a loopback-only namespace (as in ``test_browser.py``) the harness runs ``testbed.fleet``: a
relay, three transceivers that move calls (``--peer-http``) and a round-robin front that serves
the page and takes its WHIP requests. The page calls (Talk), audio flows, then the harness
SIGTERMs the transceiver carrying the call, found by its sessions. The page must get
``session.migrate``, re-offer through the front with the resume token, switch to the new
connection once it carries audio and hang up the old one; the call then goes on, audio both
ways, on another transceiver, with the same backend call id (resumed), and the old session
ends as ``migrated`` before its process exits. One call for the whole module (about 15 s).
"""

from __future__ import annotations

import sys

import pytest

from tests.transceiver.test_browser import (
    LOOPBACK,
    RELAY_PORT,
    completed,
    describe,
    run_harness,
)

STACK = f"{sys.executable} -m testbed.fleet --http {{http}} --relay {{relay}}"


@pytest.fixture(scope="module")
def call() -> dict:
    return run_harness(LOOPBACK, STACK, "--migrate")


@pytest.fixture(scope="module")
def move(call: dict) -> dict:
    """The harness's migration report, once the call went through without a harness error."""
    call = completed(call)
    assert call["error"] is None, describe(call)
    return call["migration"]


def started_events(stats: dict) -> list[dict]:
    """The backend's session.started events the page got, oldest first."""
    return [m for m in stats["messages"] if isinstance(m, dict) and m["type"] == "session.started"]


def test_the_page_moves_its_call(move: dict) -> None:
    page = move["page"]
    assert page["outcome"] == "moved", describe(move)
    assert page["statuses"][-1] == 201, describe(move)  # a 503 before it: a draining pod
    assert set(page["marks"]) == {"answerMs", "audioMs", "switchedMs"}, describe(move)
    state = move["state_after"]
    assert state["connectionState"] == "connected" and state["error"] is None, describe(move)
    assert state["location"] != move["location_before"], describe(move)
    # A figure, not an assertion (time is noisy here): `pytest -s` shows it.
    print(f"\nmove: {page['ms']} ms from the ask to the switch, marks {page['marks']}, "
          f"gap heard at the switch {page['gapMs']} ms")  # fmt: skip


def test_audio_flows_both_ways_on_the_new_connection(move: dict) -> None:
    """From the page's stats of its current connection: at the switch and after it."""
    at, after = move["stats_at_move"], move["stats_after"]
    assert after["inbound"]["packetsReceived"] > at["inbound"]["packetsReceived"], describe(move)
    # Energy, not just packets: the new transceiver echoes the fake microphone's beep.
    assert after["inbound"]["totalAudioEnergy"] > at["inbound"]["totalAudioEnergy"], describe(move)
    assert after["outbound"]["packetsSent"] > at["outbound"]["packetsSent"], describe(move)
    remote = after["selectedRemote"]
    assert (remote["address"], remote["port"]) == (LOOPBACK.host, RELAY_PORT), describe(move)
    print(f"concealed on the new connection: {after['inbound']['concealedSamples']} of "
          f"{after['inbound']['totalSamplesReceived']} samples")  # fmt: skip


def test_the_backend_call_continues_resumed(move: dict) -> None:
    """The echo backend on the new transceiver opened the same call id, resumed."""
    first, *_, last = started_events(move["stats_after"])
    assert first["resumed"] is False and last["resumed"] is True, describe(move)
    assert last["session_id"] == first["session_id"], describe(move)


def test_another_transceiver_carries_the_call(move: dict) -> None:
    (new,) = move["to"]
    assert new != move["from"], describe(move)
    figures = move["metrics_after"][str(new)]
    assert figures["resumed"] == 1 and figures["failed"] == 0, describe(move)
    assert figures["frames_in"] > 0 and figures["frames_out"] > 0, describe(move)


def test_the_old_session_ends_as_migrated_and_its_transceiver_exits(move: dict) -> None:
    call_id = started_events(move["stats_after"])[0]["session_id"]
    assert any(f"session {call_id} ending: migrated" in line for line in
               move["old_session_ended"]), describe(move)  # fmt: skip
    assert move["old_exit"].endswith("exited with status 0"), describe(move)


def test_hang_up_after_the_move_deletes_the_new_session(call: dict) -> None:
    call = completed(call)
    after = call.get("state_after_hangup") or {}
    assert after.get("connectionState") == "closed", describe(call)
    assert after.get("hangupStatus") == 200 and after.get("error") is None, describe(call)
    assert not call["stack_leftovers"] and call["stack_exit"] == 0, describe(call)
