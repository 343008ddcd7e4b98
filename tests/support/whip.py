"""WHIP requests as a test makes them: an aiortc offer, a POST, values read from SDP."""

from __future__ import annotations

import re

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection
from multidict import CIMultiDict

from testbed.callers import ToneTrack

SDP = {"Content-Type": "application/sdp"}  # the headers of a WHIP offer


async def make_offer(audio: bool = True, data: bool = True) -> str:
    """An aiortc offer with a tone track and/or a data channel (its peer connection closed)."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    if audio:
        pc.addTrack(ToneTrack(440))
    if data:
        pc.createDataChannel("events")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


async def post(url: str, body: str | bytes, headers=SDP) -> tuple[int, str, dict]:
    """POST ``body`` to ``url``/whip: (status, body, headers)."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/whip", data=body, headers=headers) as r,
    ):
        return r.status, await r.text(), CIMultiDict(r.headers)


def sdp_value(sdp: str, name: str) -> str:
    """The value of the first ``a=name:`` line."""
    found = re.search(rf"a={name}:(\S+)", sdp)
    assert found, name
    return found.group(1)
