"""GStreamer's webrtcbin calls the whole stack: webrtcbin -> relay -> transceiver -> echo -> back.

A stack we did not write, with what sets it apart: libnice for ICE, OpenSSL for DTLS with an
RSA-2048 certificate of its own, and its stock offer (``a=setup:actpass``), so our answer makes
it the DTLS *server* (``a=setup:active``): before the transceiver offered ECDHE-RSA suites, every
such call failed its handshake with OpenSSL's "no shared cipher" (issue 25,
``transceiver.call.seam.peer.DTLS_CIPHERS``). Two calls: its stock bundle policy, ``none``
(no ``a=group:BUNDLE``, ICE credentials of its own in each m-line), which the transceiver answers
on the audio m-line's transport alone, rejecting the data channel's m-line (port 0: the call
is audio-only, ``transceiver.call.bundle``); and ``max-bundle``, where the data channel comes
too. With ``none`` webrtcbin 1.22's own connection-state stays "connecting" (it counts the
rejected m-line's transport, left "new"), so its caller takes ICE connected and the audio
transport's DTLS connected as connected (``webrtcbin_peer.Call.watch_audio_transport``).
``webrtcbin_harness`` runs ``rtcedge up`` and the caller (``webrtcbin_peer``, under Debian's
/usr/bin/python3) in a fresh loopback-only network namespace, as ``test_browser`` does for
Chromium. Needs root (``unshare --net``) and Debian's gstreamer1.0-plugins-bad,
gstreamer1.0-nice, gstreamer1.0-plugins-good, python3-gi, gir1.2-gst-plugins-bad-1.0 and
gir1.2-nice-0.1, which ``.ci/run`` installs; anything missing fails the test instead of
skipping it.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.transceiver.test_browser import (
    HTTP_PORT,
    LOOPBACK,
    RELAY_PORT,
    REPO,
    TOKEN_SECRET,
    completed,
    describe,
)
from tests.transceiver.webrtcbin_harness import PEER, SYSTEM_PYTHON
from transceiver.call import bundle
from transceiver.call.bundle import Section
from transceiver.signaling.tokens import mint

TONE_HZ = 660.0  # not audiotestsrc's default (440): the echo must be the tone we asked for
RATE_HZ = 48000  # the peer decodes the echo to this
HARNESS_TIMEOUT_S = 60
SUBPROCESS_TIMEOUT_S = HARNESS_TIMEOUT_S + 45  # the harness's watchdog fires at +30 s
CHECK_TIMEOUT_S = 30


def prerequisites() -> str | None:
    """Why the call cannot be attempted here, or None."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing: the call runs in its own netns"
    if not Path(SYSTEM_PYTHON).exists():
        return f"{SYSTEM_PYTHON} is missing: webrtcbin_peer runs under Debian's Python"
    check = subprocess.run(
        [SYSTEM_PYTHON, str(PEER), "--check"],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        check=False,
    )
    if check.returncode != 0:
        return (
            f"GStreamer's webrtcbin cannot run here (`apt-get install gstreamer1.0-plugins-bad "
            f"gstreamer1.0-nice gstreamer1.0-plugins-good python3-gi gir1.2-gst-plugins-bad-1.0 "
            f"gir1.2-nice-0.1`, which .ci/run does): {check.stdout.strip()} {check.stderr[-500:]}"
        )
    return None


@pytest.fixture(scope="module", params=["none", "max-bundle"])
def call(request, tmp_path_factory) -> dict:
    """One webrtcbin echo call through ``rtcedge up`` in a loopback-only namespace, webrtcbin's
    bundle-policy the param: the harness's report (JSON), with the decoded echo's samples as
    ``echo`` (int16) and the policy as ``bundle_policy``."""
    problem = prerequisites()
    if problem is not None:
        return {"setup_error": problem}
    files = tmp_path_factory.mktemp("webrtcbin")
    secret_file, token_file, pcm = files / "secret", files / "token", files / "echo.pcm"
    secret_file.write_text(TOKEN_SECRET + "\n")
    token_file.write_text(mint(TOKEN_SECRET.encode(), time.time(), 300, subject="webrtcbin"))
    stack = f"rtcedge up --http {{http}} --relay {{relay}} --token-secret-file {secret_file}"
    command = (
        f"exec {sys.executable} -m tests.transceiver.webrtcbin_harness"
        f" --host {LOOPBACK.host} --http-port {HTTP_PORT} --relay-port {RELAY_PORT}"
        f" --timeout {HARNESS_TIMEOUT_S} --stack {shlex.quote(stack)}"
        f" --token-file {token_file} --pcm-out {pcm} --tone-hz {TONE_HZ}"
        f" --peer-bundle-policy {request.param}"
    )
    report = run_in_namespace(command)
    report["bundle_policy"] = request.param
    if "setup_error" not in report:
        report["echo"] = np.fromfile(pcm, "<i2") if pcm.exists() else np.zeros(0, "<i2")
    return report


def run_in_namespace(command: str) -> dict:
    """``command`` (a harness) in a new loopback-only network namespace: its JSON report."""
    try:
        proc = subprocess.run(
            ["unshare", "--net", "--", "sh", "-c", " && ".join((*LOOPBACK.setup, command))],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return {"setup_error": f"the harness did not exit in {SUBPROCESS_TIMEOUT_S} s: {exc}"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {
            "setup_error": f"the harness printed no JSON (exit {proc.returncode})\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        }
    return json.loads(lines[-1])


def peer_of(call: dict) -> dict:
    call = completed(call)
    return call.get("peer") or {}


def shown(call: dict) -> str:
    """The report without the samples, for assertion messages."""
    return describe({k: v for k, v in call.items() if k != "echo"})


def stats_of(peer: dict, kind: str) -> list[dict]:
    return [s for s in peer.get("stats", []) if s.get("type") == kind]


def sdp_setup(sdp: str) -> set[str]:
    return {line[len("a=setup:") :].strip() for line in sdp.splitlines() if "a=setup:" in line}


def unbundled(call: dict) -> bool:
    return call.get("bundle_policy") == "none"


def sections(sdp: str) -> list[Section]:
    return bundle.split(sdp)[1]


def test_webrtcbin_connects_with_its_stock_offer(call: dict) -> None:
    peer = peer_of(call)
    assert call["error"] is None, shown(call)
    assert call["connected"] and peer.get("ok"), shown(call)
    assert tuple(call["interfaces"]) == LOOPBACK.interfaces, "not the namespace this test made"
    assert peer["gstreamer"].startswith("GStreamer 1."), shown(call)
    # Its stock offer leaves the DTLS role to us; we answer active: webrtcbin is the server.
    assert sdp_setup(peer["offer"]) == {"actpass"}, peer["offer"]
    assert sdp_setup(peer["answer"]) == {"active"}, peer["answer"]


def test_without_bundle_the_audio_gets_the_one_transport_and_the_rest_port_0(call: dict) -> None:
    """bundle-policy none: each m-line offered with ICE credentials of its own, no group;
    answered on the audio m-line's transport, the data channel rejected (port 0). max-bundle:
    one group, every section on its transport."""
    peer = peer_of(call)
    offered, answered = sections(peer["offer"]), sections(peer["answer"])
    assert [s.kind for s in offered] == [s.kind for s in answered] == ["audio", "application"]
    audio, channel = answered
    assert audio.port == str(RELAY_PORT), "the audio m-line is on the relay's address"
    assert f" {LOOPBACK.host} {RELAY_PORT} typ host" in (audio.value("a=candidate:") or "")
    if unbundled(call):
        assert "a=group:BUNDLE" not in peer["offer"], "webrtcbin's stock offer has no group"
        ufrags = {s.value("a=ice-ufrag:") for s in offered}
        assert len(ufrags) == 2, "an ICE ufrag of its own in each offered m-line"
        assert "a=group:BUNDLE" not in peer["answer"], "nothing bundled in the answer"
        assert channel.port == "0" and not channel.starting(("a=candidate:",)), "rejected"
        assert peer["rejected"] == ["application"], shown(call)
        # webrtcbin 1.22 says "connecting" of such a call, its audio flowing (the caller
        # judged it by its transport instead); never "failed".
        assert peer["connection_state_after_audio"] in ("connecting", "connected"), shown(call)
    else:
        group = bundle.bundle_group(bundle.split(peer["answer"])[0])
        assert group == tuple(s.mid for s in offered), "every section on the one transport"
        assert channel.port == audio.port and peer["rejected"] == [], shown(call)
        assert peer["connection_state_after_audio"] == "connected", shown(call)


def test_webrtcbin_is_the_dtls_server_with_an_rsa_certificate_and_ours_is_ecdsa(
    call: dict,
) -> None:
    dtls = peer_of(call).get("dtls") or {}
    assert dtls.get("state") == "connected" and dtls.get("client") is False, shown(call)
    theirs = x509.load_pem_x509_certificate(dtls["certificate"].encode()).public_key()
    assert isinstance(theirs, rsa.RSAPublicKey) and theirs.key_size == 2048
    ours = x509.load_pem_x509_certificate(dtls["remote_certificate"].encode()).public_key()
    assert isinstance(ours, ec.EllipticCurvePublicKey) and isinstance(ours.curve, ec.SECP256R1)


def test_the_selected_remote_candidate_is_the_relay(call: dict) -> None:
    peer = peer_of(call)
    by_id = {s["id"]: s for s in peer.get("stats", [])}
    (transport,) = stats_of(peer, "transport") or [{}]
    pair = by_id.get(transport.get("selected-candidate-pair-id", ""), {})
    remote = by_id.get(pair.get("remote-candidate-id", ""))
    assert remote is not None, shown(call)
    assert (remote["address"], remote["port"]) == (LOOPBACK.host, RELAY_PORT), shown(call)
    local = by_id[pair["local-candidate-id"]]
    assert local["address"] == LOOPBACK.host, "webrtcbin called from the namespace's loopback"


def test_audio_flows_both_ways_and_the_echo_is_the_tone_sent(call: dict) -> None:
    peer = peer_of(call)
    (outbound,) = stats_of(peer, "outbound-rtp") or [{}]
    (inbound,) = stats_of(peer, "inbound-rtp") or [{}]
    assert outbound.get("packets-sent", 0) > 50, shown(call)  # 3 s of 20 ms packets: ~150
    assert inbound.get("packets-received", 0) > 50, shown(call)
    echo = call["echo"].astype(float)
    assert len(echo) >= RATE_HZ, f"less than 1 s of echo decoded: {len(echo)} samples"
    steady = echo[len(echo) // 3 :]  # past the first packets and the jitter buffer's start
    # Real energy: audiotestsrc plays at 0.3 of full scale, an RMS of ~6950; silence is 0.
    assert np.sqrt(np.mean(steady**2)) > 1000, "the echo is (near) silent"
    spectrum = np.abs(np.fft.rfft(steady))
    dominant_hz = float(np.argmax(spectrum) * RATE_HZ / len(steady))
    assert abs(dominant_hz - TONE_HZ) < 5, f"the echo's dominant frequency is {dominant_hz} Hz"


def test_a_data_channel_message_is_echoed_or_the_channel_is_declined(call: dict) -> None:
    """Without BUNDLE the data channel's m-line was rejected: it never opens (audio-only)."""
    peer = peer_of(call)
    messages = peer.get("messages", [])
    if unbundled(call):
        assert messages == [] and "channel_open" not in peer["marks_ms"], shown(call)
        return
    assert {"type": "echo", "event": {"type": "ping", "from": "webrtcbin"}} in messages, shown(call)
    assert any(m.get("type") == "session.started" for m in messages if isinstance(m, dict))


def test_delete_ends_the_session(call: dict) -> None:
    peer = peer_of(call)
    assert peer.get("delete_status") == 200, shown(call)
    assert peer.get("later_delete_status") == 404, "the resource outlived its DELETE"
    assert "gone" in peer.get("marks_ms", {}), shown(call)


def test_nothing_outlives_the_call(call: dict) -> None:
    call = completed(call)
    assert call.get("peer_exit") in (0, 1), "the caller did not exit by itself"
    assert call.get("peer_leftovers") == [], shown(call)
    assert call.get("stack_leftovers") == [], shown(call)
