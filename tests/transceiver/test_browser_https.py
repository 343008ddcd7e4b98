"""The page off loopback: over https from ``rtcedge up --https`` a real Chromium gets the
microphone and completes a call; over plain http it says in words why it cannot (issue 27).

Both run in a namespace of their own (``unshare --net``, as ``test_browser.py``) whose only
address besides loopback is ``NAMESPACE_ADDRESS``, on one end of a veth pair whose other end
stays in the namespace too (``DUAL_STACK``'s way of giving it a real interface; nothing can
leave). The address is of ``testbed.netns``'s private pool, and the page, WHIP and the relay
listen on it: a browser treats a page there as any LAN page, which plain http does not make a
secure context.

- https: Chromium trusts the certificate ``up`` made by its public key's hash, which ``up``
  prints (``--ignore-certificate-errors-spki-list``, the harness's ``--https``): had ``up``
  served another certificate, the page would not load. First a Talk with a wrong token
  (refused: the page must offer Talk again by itself, issue 27's "failed call"), then the call:
  the echo's energy comes back, Hang up DELETEs (200), and the page says the call ended and how
  long it lasted. The header names the backend the server reports, and the events list shows
  the page's own pings as such.
- plain http (``--no-https``): no secure context, no ``navigator.mediaDevices``; the page says
  why and what to do, Talk is off, and pressing it anyway throws nothing.
"""

from __future__ import annotations

import re

import pytest

from testbed.netns import POOL, PREFIX_LEN
from tests.transceiver.test_browser import (
    Namespace,
    completed,
    describe,
    run_call,
    run_harness,
)

NAMESPACE_ADDRESS = str(POOL.network_address + 1)  # 10.254.0.1: a private, non-loopback address
HTTPS_PORT = 8443
RELAY_PORT = 3478  # test_browser's
LAN = Namespace(
    NAMESPACE_ADDRESS,
    (
        "ip link set lo up",
        "ip link add rtc0 type veth peer name rtc1",
        "ip link set rtc1 up",
        "ip link set rtc0 up",
        f"ip addr add {NAMESPACE_ADDRESS}/{PREFIX_LEN} dev rtc0",
    ),
    ("lo", "rtc0", "rtc1"),
    frozenset({NAMESPACE_ADDRESS, "127.0.0.1"}),
)


@pytest.fixture(scope="module")
def https_call(tmp_path_factory) -> dict:
    return completed(
        run_call(
            tmp_path_factory,
            LAN,
            stack_args="--https",
            options="--https --refused-first",
            http_port=HTTPS_PORT,
        )
    )


def test_chromium_loads_the_https_page_on_a_lan_address_and_completes_a_call(https_call):
    call = https_call
    assert call["error"] is None, describe(call)
    assert call["page"].startswith(f"https://{NAMESPACE_ADDRESS}:{HTTPS_PORT}/"), describe(call)
    assert tuple(call["interfaces"]) == LAN.interfaces, "not the namespace this test made"
    assert call["connected"], describe(call)
    stats = call["stats"]
    assert (stats["selectedRemote"]["address"], stats["selectedRemote"]["port"]) == (
        NAMESPACE_ADDRESS,
        RELAY_PORT,
    ), describe(call)
    assert stats["outbound"]["packetsSent"] > 0, describe(call)
    assert stats["inbound"]["totalAudioEnergy"] > 0, describe(call)  # the echo of the beeps
    after = call["state_after_hangup"]
    assert after["hangupStatus"] == 200, describe(call)  # the DELETE
    assert after["error"] is None, describe(call)


def test_up_prints_the_fingerprint_and_the_key_hash_chromium_trusted(https_call):
    output = "\n".join(https_call["stack_output"])
    assert re.search(r"SHA-256 fingerprint ([0-9A-F]{2}:){31}[0-9A-F]{2}", output), output
    assert f"ignore-certificate-errors-spki-list={https_call['spki_sha256']}" in output, output
    assert f"open https://{NAMESPACE_ADDRESS}:{HTTPS_PORT}/" in output, output


def test_a_refused_call_leaves_talk_ready_without_hang_up(https_call):
    refused = https_call["refused_first"]
    assert "HTTP 401" in refused["error_at_end"], describe(refused)
    assert refused["talk_disabled"] is False, describe(refused)
    assert refused["hangup_disabled"] is True, describe(refused)
    assert refused["state"]["ended"]["failed"] is True, describe(refused)
    assert refused["ended_text"]["ended"].startswith("Call failed before it connected: "), describe(
        refused
    )
    # ...and the call after it connected (the test above): Talk worked again.


def test_hang_up_says_the_call_ended_with_its_duration_and_reason(https_call):
    ended = https_call["state_after_hangup"]["ended"]
    assert ended["connected"] is True and ended["reason"] == "you hung up", describe(ended)
    assert ended["durationMs"] > 1000, describe(ended)  # the harness lets audio flow 3 s
    text = https_call["ended_text"]["ended"]
    assert re.fullmatch(
        r"Call ended after \d+\.\d s: you hung up\. Press Talk to call again\.", text
    )


def test_the_header_names_the_backend_the_server_reports(https_call):
    assert https_call["ended_text"]["backend"].startswith("The backend is an echo"), describe(
        https_call["ended_text"]
    )


def test_the_events_list_names_each_type_first_and_marks_the_pages_own_pings(https_call):
    rows = https_call["events_shown"]
    pings = [r for r in rows if r["type"].startswith("ping")]
    assert pings and all(r["className"] == "own" for r in pings), describe(rows)
    assert all("this page's" in r["type"] for r in pings), describe(rows)
    assert all(re.fullmatch(r"echoed back in \d+ ms", r["text"]) for r in pings), describe(rows)
    assert len(pings) == 1, describe(rows)  # consecutive pings are one row
    started = [r for r in rows if r["type"] == "session.started"]
    assert started and "session_id=" in started[0]["text"], describe(rows)
    assert not any(r["text"].lstrip().startswith("{") for r in rows), describe(rows)


def test_plain_http_off_loopback_says_why_the_microphone_is_unavailable():
    report = completed(
        run_harness(
            LAN,
            "rtcedge up --no-https --http {http} --relay {relay} --workers 1",
            "--no-microphone",
        )
    )
    assert report["error"] is None, describe(report)
    page = report["no_microphone"]
    assert page["secure_context"] is False and page["media_devices"] == "undefined", describe(page)
    assert page["notice_shown"] and page["talk_disabled"], describe(page)
    notice = page["notice"]
    assert notice.startswith("The microphone is unavailable: this page came over plain http"), (
        notice
    )
    assert "rtcedge up --https" in notice and "localhost" in notice, notice
    assert page["state"]["error"] is None, describe(page)
    assert not any("TypeError" in line for line in report["console"]), describe(report)
