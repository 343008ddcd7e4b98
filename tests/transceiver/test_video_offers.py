"""Offers with a camera connect audio-only through the whole stack (issue 25, item 2): real aiortc
callers in this process -> relay -> a transceiver process (echo) -> back, on loopback.

For each of aiortc's bundle policies (balanced, its default, and max-bundle) a caller offers a
tone, a camera and the data channel. The answer must put every section on one transport (the
same ice-ufrag, ice-pwd, DTLS fingerprint and setup, port and candidate: the relay's), answer
the camera inactive, and the call must connect within the bound an audio-only caller has
(``tests.support.tone_call``'s 15 s) and echo the tone. Then both callers ignore the answer and
send their camera anyway, as an attacker can, for ``VIDEO_S`` (bounded): every video packet is
dropped by its payload type and counted (``not_audio``) before it costs an SRTP unprotect or a
place in the SSRC latch (``foreign_ssrc`` stays 0), the tone still echoes, and the
transceiver's memory stays flat (a queue of decoded frames would grow it by ~3.5 MB/s here).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiortc import RTCBundlePolicy, RTCPeerConnection

from testbed.processes import RelayProcess, TransceiverProcess
from testbed.procfs import rss_bytes
from tests.support.waits import run, wait_until
from tests.transceiver.test_media_kinds import SmallVideo, call, sections, send_anyway, video_sent
from transceiver.call.bundle import Section, split

POLICIES = {"balanced": RTCBundlePolicy.BALANCED, "max_bundle": RTCBundlePolicy.MAX_BUNDLE}
CONNECT_BOUND_S = 15.0  # what tone_call (the audio-only caller) gives a call to connect
VIDEO_S = 10.0  # how long the callers send video anyway
WARM_UP_S = 2.0  # of it, before the memory is first read (sessions, SRTP, buffers settle)
# The transceiver may grow by this much while two cameras send for VIDEO_S - WARM_UP_S: a
# queue of decoded 320x240 frames at 15 fps would take 115 KB a frame, ~28 MB in that time.
MAX_GROWTH_BYTES = 6 * 1024 * 1024
DROPPED = "rtcedge_transceiver_dropped_datagrams_total"
DTLS_CONNECTED = "rtcedge_transceiver_dtls_connected_seconds_count"
SHARED = ("a=ice-ufrag:", "a=ice-pwd:", "a=fingerprint:", "a=setup:", "a=candidate:")


@pytest.fixture(scope="module")
def stack():
    relay = RelayProcess({}, workers=1)  # the allowlist is filled once the media port is known
    trx = TransceiverProcess(relay)
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        yield relay, trx


def transport(section: Section) -> tuple[str, ...]:
    address = tuple(line for line in section.lines if line.startswith("c="))
    return (section.port, *address, *section.starting(SHARED))


async def connected(pc: RTCPeerConnection) -> float | None:
    """Seconds from now until ``pc`` connected, within CONNECT_BOUND_S; None if it did not."""
    started = time.monotonic()
    if await wait_until(lambda: pc.connectionState == "connected", CONNECT_BOUND_S):
        return time.monotonic() - started
    return None


@pytest.mark.parametrize("policy", POLICIES)
def test_an_audio_video_offer_connects_audio_only_through_the_relay(stack, policy):
    relay, trx = stack

    async def go() -> None:
        pc, echo, answer = await call(trx.url, POLICIES[policy])
        try:
            assert await connected(pc) is not None, f"still {pc.connectionState}"
            _, answered = split(answer)
            assert [s.kind for s in answered] == ["audio", "video", "application"]
            assert len({transport(s) for s in answered}) == 1, "one transport, every section"
            candidate = answered[0].value("a=candidate:") or ""
            assert f" {relay.address[0]} {relay.address[1]} typ host" in candidate
            assert "a=inactive" in sections(answer)["video"]
            assert await echo.wait(0.0, 25, 10), "the tone came back"
            assert await video_sent(pc) == 0, "an inactive camera sends nothing"
        finally:
            await pc.close()

    run(go(), timeout_s=60)


def without_bundle(offer: str) -> str:
    """``offer`` without its BUNDLE group. aiortc has no bundle-policy none, but its balanced
    policy already runs a transport of its own (a port, a DTLS session) for each kind and the
    data channel: without the group line, that is what none offers (aiortc gives them all one
    ICE ufrag and password; webrtcbin's, each its own: test_webrtcbin.py)."""
    return "".join(line for line in offer.splitlines(True) if not line.startswith("a=group:"))


async def audio_connected(pc: RTCPeerConnection) -> bool:
    """The audio m-line's transport connected (ICE and DTLS), within CONNECT_BOUND_S. Not
    ``pc.connectionState``: aiortc ignores port 0, so the rejected m-lines' transports wait
    for remote candidates the answer does not give them (none may), and it stays
    "connecting"."""
    dtls = next(t for t in pc.getTransceivers() if t.kind == "audio").receiver.transport
    return await wait_until(
        lambda: dtls.state == "connected" and dtls.transport.state == "completed",
        CONNECT_BOUND_S,
    )


def test_an_offer_without_bundle_connects_audio_only_through_the_relay(stack):
    """Three transports offered (audio, camera, data channel), no group: answered on the
    audio's, the camera and the data channel rejected (port 0), the tone echoed."""
    relay, trx = stack

    async def go() -> None:
        dtls_before = trx.metric(DTLS_CONNECTED)
        offered: list[str] = []

        def unbundled(offer: str) -> str:
            offered.append(without_bundle(offer))
            return offered[0]

        pc, echo, answer = await call(trx.url, RTCBundlePolicy.BALANCED, offer_as=unbundled)
        try:
            assert "a=group:" not in offered[0]
            ports = {part.port for part in split(offered[0])[1]}
            assert len(ports) == 3, "three transports offered, each on a port of its own"
            assert await audio_connected(pc), f"still {pc.connectionState}"
            assert "a=group:" not in answer
            audio, video, channel = split(answer)[1]
            assert (audio.kind, video.kind, channel.kind) == ("audio", "video", "application")
            candidate = audio.value("a=candidate:") or ""
            assert f" {relay.address[0]} {relay.address[1]} typ host" in candidate
            assert "a=sendrecv" in audio.lines
            assert video.port == channel.port == "0", "rejected, each"
            assert await echo.wait(0.0, 25, 10), "the tone came back"
            assert await video_sent(pc) == 0, "a rejected camera sends nothing"
            assert trx.metric(DTLS_CONNECTED) == dtls_before + 1, "the transceiver's DTLS too"
        finally:
            await pc.close()

    run(go(), timeout_s=60)


def test_video_sent_anyway_is_dropped_counted_and_never_queued(stack):
    _, trx = stack

    async def go() -> None:
        drops_before = trx.metric(DROPPED, reason="not_audio")
        callers = [
            await call(trx.url, policy, answer_as=send_anyway, camera=SmallVideo(320, 240))
            for policy in POLICIES.values()
        ]
        try:
            for pc, _, _ in callers:
                assert await connected(pc) is not None, f"still {pc.connectionState}"
            started = time.monotonic()
            await asyncio.sleep(WARM_UP_S)
            rss_warm = rss_bytes(trx.proc.pid)
            rss_max = rss_warm
            while time.monotonic() - started < VIDEO_S:
                await asyncio.sleep(0.5)
                rss_max = max(rss_max, rss_bytes(trx.proc.pid))
            # Counted first: every packet the counter holds was sent before the senders' counts.
            drops = trx.metric(DROPPED, reason="not_audio") - drops_before
            sent = [await video_sent(pc) for pc, _, _ in callers]
            for (_, echo, _), frames in zip(callers, sent, strict=True):
                assert frames > 10 * VIDEO_S, "each caller sent its camera all along"
                assert echo.after(started + WARM_UP_S) > 0.5 * (VIDEO_S - WARM_UP_S) / 0.02
            # Loopback loses nothing; the last few may have been in flight as it was read.
            assert 0.95 * sum(sent) <= drops <= sum(sent), (drops, sent)
            assert trx.metric(DROPPED, reason="foreign_ssrc") == 0, "video took no latch place"
            growth = rss_max - rss_warm
            assert growth < MAX_GROWTH_BYTES, f"grew {growth / 2**20:.1f} MiB"
        finally:
            for pc, _, _ in callers:
                await pc.close()

    run(go(), timeout_s=90)
