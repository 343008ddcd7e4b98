"""Real aiortc clients in other processes -> relay -> one transceiver (echo) and back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.processes import NO_LOAD_GATE, RelayProcess, TransceiverProcess
from tests.support.waits import wait_for

TONES = [440.0, 660.0, 880.0, 1100.0, 1320.0]
REPO = Path(__file__).resolve().parents[2]  # where ``-m tests.support...`` is found


@pytest.fixture(scope="module")
def stack():
    relay = RelayProcess({}, workers=2)  # the allowlist is filled once the media port is known
    # Five calls at once on a CI core shared with other work: not a test of the load gate.
    trx = TransceiverProcess(relay, extra_args=list(NO_LOAD_GATE))
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        yield relay, trx


def run_clients(url: str, seconds: float) -> list[dict]:
    others = ",".join(str(t) for t in TONES)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.tone_call", "--url", url, "--hz", str(hz),
             "--others", others, "--seconds", str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for hz in TONES
    ]  # fmt: skip
    results = []
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_five_clients_hear_their_own_tone_through_one_socket(stack):
    relay, trx = stack
    assert trx.udp_socket_count() == 1, "every session shares the one media socket"
    results = run_clients(trx.url, seconds=2.5)
    for r in results:
        assert r["connected"], r["error"]
        assert r["error"] == "", r["error"]
        assert r["remote_candidate"] == f"{relay.address[0]}:{relay.address[1]}"
        assert r["frames_with_own_tone"] >= 0.7 * r["frames_expected"], r
        assert r["frames_with_other_tone"] == 0, "no cross-talk"
        kinds = [e["type"] for e in r["events"]]
        assert "session.started" in kinds
        assert {"type": "echo", "event": {"type": "hello", "hz": r["hz"]}} in r["events"]
    assert trx.udp_socket_count() == 1
    assert trx.metric("rtcedge_transceiver_sessions_started_total") >= 5
    # DELETE freed everything (its teardown may finish just after the answer).
    assert wait_for(lambda: trx.metric("rtcedge_transceiver_sessions_active"), 0, 5)
    assert trx.metric("rtcedge_transceiver_sessions_ended_total", reason="deleted") >= 5
    assert trx.metric("rtcedge_transceiver_audio_frames_total", direction="in") > 0
    assert trx.metric("rtcedge_transceiver_audio_frames_total", direction="out") > 0
    assert trx.metric("rtcedge_transceiver_ice_connected_seconds_count") >= 5
    assert trx.metric("rtcedge_transceiver_dtls_connected_seconds_count") >= 5
    assert trx.metric("rtcedge_transceiver_paths_selected_total", transport="udp") >= 5
    assert trx.metric("rtcedge_transceiver_paths_selected_total", transport="tcp") == 0


@pytest.fixture(scope="module")
def opus_stack():
    relay = RelayProcess({}, workers=1)
    trx = TransceiverProcess(relay, extra_args=["--audio-format", "opus", *NO_LOAD_GATE])
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        yield relay, trx


def test_opus_passthrough_echo_is_heard_by_each_client(opus_stack):
    """The echo backend in the opus format: the callers' packets go back untouched (no codec
    work in the transceiver), and each caller still hears only its own tone."""
    _relay, trx = opus_stack
    results = run_clients(trx.url, seconds=2.5)
    for r in results:
        assert r["connected"] and r["error"] == "", r["error"]
        assert r["frames_with_own_tone"] >= 0.7 * r["frames_expected"], r
        assert r["frames_with_other_tone"] == 0, "no cross-talk"
    assert trx.metric("rtcedge_transceiver_audio_frames_total", direction="in") > 0
    assert trx.metric("rtcedge_transceiver_audio_frames_total", direction="out") > 0
    assert trx.metric("rtcedge_transceiver_sessions_active") == 0
