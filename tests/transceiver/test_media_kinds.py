"""Only audio is ever received: a video m-line is answered without aiortc (transceiver.call.bundle),
inactive in the BUNDLE group or rejected outside it, and video sent anyway is dropped, counted.

Finding 2 of the hardening issue: an offer with audio + video was accepted, nobody read the
video receiver, and aiortc's queue of decoded frames grew without bound (~22 MB/s at 720p).
Now aiortc is never given the video m-line: there is no video receiver to queue anything.
In-process (a real aiortc caller on loopback UDP, reaching the media socket directly); the same
calls through the relay, for ~10 s of video, are tests/transceiver/test_video_offers.py's.
"""

from __future__ import annotations

import asyncio
import fractions
import re
from collections.abc import Callable

import aiohttp
import av
from aiortc import RTCBundlePolicy, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import VideoStreamTrack

from testbed.callers import EchoTimes, ToneTrack
from tests.support.inprocess import direct_config, running
from tests.support.waits import run, wait_until
from transceiver.server import TransceiverServer


class SmallVideo(VideoStreamTrack):
    """Frames at 15 fps (160x120 unless told): cheap to encode, each one queued if anybody
    decodes it."""

    def __init__(self, width: int = 160, height: int = 120) -> None:
        super().__init__()
        self.width, self.height = width, height

    async def recv(self) -> av.VideoFrame:
        await asyncio.sleep(1 / 15)
        frame = av.VideoFrame(width=self.width, height=self.height, format="yuv420p")
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        self._pts = getattr(self, "_pts", 0) + 6000
        frame.pts, frame.time_base = self._pts, fractions.Fraction(1, 90000)
        return frame


def sections(sdp: str) -> dict[str, str]:
    """m-line kind -> its section of the SDP (first of each kind)."""
    found: dict[str, str] = {}
    for part in re.split(r"\r\n(?=m=)", sdp)[1:]:
        found.setdefault(part[2 : part.index(" ")], part)
    return found


def not_audio_drops(server: TransceiverServer) -> float:
    """RTP the server dropped for a payload type the call's audio does not have."""
    server.metrics.flush()
    return server.metrics.dropped.labels("not_audio")._value.get()


async def video_sent(pc: RTCPeerConnection) -> int:
    """The RTP packets a caller's video sender sent."""
    video = next(t for t in pc.getTransceivers() if t.kind == "video")
    stats = await video.sender.getStats()
    return sum(s.packetsSent for s in stats.values() if s.type == "outbound-rtp")


async def call(
    url: str,
    policy: RTCBundlePolicy = RTCBundlePolicy.BALANCED,
    offer_as: Callable[[str], str] = lambda sdp: sdp,
    answer_as: Callable[[str], str] = lambda sdp: sdp,
    camera: VideoStreamTrack | None = None,
) -> tuple[RTCPeerConnection, EchoTimes, str]:
    """A caller with a tone and a camera (``SmallVideo()`` unless told): its offer as
    ``offer_as`` makes it, POSTed; the answer (as the server sent it) applied as ``answer_as``
    makes it."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[], bundlePolicy=policy))
    pc.addTrack(ToneTrack(440))
    pc.addTrack(camera or SmallVideo())
    pc.createDataChannel("events")
    echo = EchoTimes()
    pc.on("track", lambda track: echo.listen(track) if track.kind == "audio" else None)
    await pc.setLocalDescription(await pc.createOffer())
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{url}/whip",
            data=offer_as(pc.localDescription.sdp),
            headers={"Content-Type": "application/sdp"},
        ) as resp,
    ):
        answer = await resp.text()
        assert resp.status == 201, answer
    await pc.setRemoteDescription(RTCSessionDescription(answer_as(answer), "answer"))
    return pc, echo, answer


def send_anyway(answer: str) -> str:
    """The answer as a caller that ignores its a=inactive reads it: it sends its video."""
    video = sections(answer)["video"]
    return answer.replace(video, video.replace("a=inactive", "a=recvonly"))


def test_video_is_answered_inactive_and_dropped_counted_even_when_sent_anyway():
    async def go() -> None:
        async with running(direct_config()) as (server, url):
            pc, echo, answer = await call(url, answer_as=send_anyway)
            media = sections(answer)
            assert "a=inactive" in media["video"], "video answered inactive"
            assert "a=sendrecv" in media["audio"], "audio as before"
            assert await echo.wait(0.0, 50, 15), "the call's audio works"
            assert await wait_until(lambda: not_audio_drops(server) > 20, 10), "video dropped"
            sent = await video_sent(pc)
            assert sent > 20, "the client did send video"
            assert not_audio_drops(server) <= sent, "only its video"
            session = next(iter(server.sessions.values()))
            kinds = [t.kind for t in session.pc.getTransceivers()]
            assert kinds == ["audio"], "aiortc never had a video receiver to queue frames in"
            await pc.close()

    run(go(), timeout_s=60)


def test_a_camera_aiortc_cannot_decode_still_gets_an_audio_call():
    """A camera offered as VP9 only (an app's codec preferences) made aiortc refuse the whole
    offer: a 500. Our caller is aiortc, which cannot take VP9 either, so its offer is edited
    to say VP9 and the answer's camera section back to its VP8 (inactive: nothing is sent)."""

    def vp9_only(offer: str) -> str:
        video = sections(offer)["video"]
        lines = [line for line in video.split("\r\n") if not line.startswith(("a=rtpmap:",
                 "a=fmtp:", "a=rtcp-fb:"))]  # fmt: skip
        lines[0] = re.sub(r"SAVPF .*", "SAVPF 120", lines[0])
        return offer.replace(video, "\r\n".join([*lines, "a=rtpmap:120 VP9/90000"]))

    def back_to_vp8(answer: str) -> str:
        video = sections(answer)["video"]
        assert "a=rtpmap:120 VP9/90000" in video, "the answer names the offered codec"
        edited = video.replace("SAVPF 120", "SAVPF 97").replace("120 VP9", "97 VP8")
        return answer.replace(video, edited)

    async def go() -> None:
        async with running(direct_config()) as (_, url):
            pc, echo, answer = await call(url, offer_as=vp9_only, answer_as=back_to_vp8)
            assert "a=inactive" in sections(answer)["video"]
            assert await echo.wait(0.0, 50, 15), "audio both ways"
            await pc.close()

    run(go(), timeout_s=60)


def test_a_camera_left_out_of_the_bundle_is_rejected_and_the_call_connects():
    """Answered with port 0 and out of the answer's group (RFC 8843 7.3.3). The caller uses
    max-bundle: aiortc's balanced caller would start a transport of its own for the rejected
    camera (it ignores port 0), which no browser does."""

    def camera_unbundled(offer: str) -> str:
        mids = re.search(r"a=group:BUNDLE (.*)\r\n", offer).group(1).split()
        return offer.replace(f"a=group:BUNDLE {' '.join(mids)}", "a=group:BUNDLE 0 2")

    async def go() -> None:
        async with running(direct_config()) as (_, url):
            pc, echo, answer = await call(url, RTCBundlePolicy.MAX_BUNDLE, camera_unbundled)
            assert sections(answer)["video"].startswith("m=video 0 "), "rejected"
            assert "a=group:BUNDLE 0 2\r\n" in answer
            assert await echo.wait(0.0, 50, 15), "audio both ways"
            await pc.close()

    run(go(), timeout_s=60)
