"""Only audio is ever received: a video m-line is answered inactive (one audio m-line: offer.py).

Finding 2 of the hardening issue: an offer with audio + video was accepted, nobody read the
video receiver, and aiortc's queue of decoded frames grew without bound (~22 MB/s at 720p).
"""

from __future__ import annotations

import asyncio
import fractions
import re

import aiohttp
import av
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import VideoStreamTrack

from testbed.callers import EchoTimes, ToneTrack
from tests.support.inprocess import direct_config, running
from tests.support.waits import run


class SmallVideo(VideoStreamTrack):
    """160x120 frames at 15 fps: cheap to encode, and each one queued if anybody decodes it."""

    async def recv(self) -> av.VideoFrame:
        await asyncio.sleep(1 / 15)
        frame = av.VideoFrame(width=160, height=120, format="yuv420p")
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


def test_video_is_answered_inactive_and_never_queued_even_when_sent_anyway():
    async def go() -> None:
        async with running(direct_config()) as (server, url):
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            pc.addTrack(ToneTrack(440))
            pc.addTrack(SmallVideo())
            echo = EchoTimes()
            pc.on("track", lambda track: echo.listen(track) if track.kind == "audio" else None)
            await pc.setLocalDescription(await pc.createOffer())
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    f"{url}/whip",
                    data=pc.localDescription.sdp,
                    headers={"Content-Type": "application/sdp"},
                ) as resp,
            ):
                assert resp.status == 201
                answer = await resp.text()
            media = sections(answer)
            assert "a=inactive" in media["video"], "video answered inactive"
            assert "a=sendrecv" in media["audio"], "audio as before"
            # A client that ignores the answer and sends its video anyway.
            forced = answer.replace(media["video"], media["video"].replace("inactive", "recvonly"))
            await pc.setRemoteDescription(RTCSessionDescription(forced, "answer"))
            assert await echo.wait(0.0, 50, 15), "the call's audio works"
            video_out = next(t for t in pc.getTransceivers() if t.kind == "video")
            await asyncio.sleep(2.0)
            stats = await video_out.sender.getStats()
            sent = sum(s.packetsSent for s in stats.values() if s.type == "outbound-rtp")
            assert sent > 20, "the client did send video"
            session = next(iter(server.sessions.values()))
            video_in = next(t for t in session.pc.getTransceivers() if t.kind == "video")
            assert video_in.currentDirection == "inactive"
            assert video_in.receiver.track._queue.qsize() == 0, "no video frame was queued"
            await pc.close()

    run(go(), timeout_s=60)
