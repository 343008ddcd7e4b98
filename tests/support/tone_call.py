"""One real aiortc call that checks it hears its own tone and nobody else's: WHIP offer, a tone of
its own frequency for a while, the echo analysed (Goertzel against the other callers' tones).

In-process through ``run_client``, or in a process of its own (``python -m
tests.support.tone_call``, printing one JSON line) so that several callers run in parallel.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass, field

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamTrack

from testbed.callers import ToneTrack, goertzel_power, heard_frames, loopback_only


@dataclass
class ClientResult:
    hz: float
    connected: bool = False
    error: str = ""
    offer_to_connected_s: float | None = None
    offer_to_first_echo_s: float | None = None
    frames_received: int = 0
    frames_with_own_tone: int = 0
    frames_with_other_tone: int = 0
    frames_expected: int = 0
    events: list[dict] = field(default_factory=list)
    location: str = ""
    remote_candidate: str = ""


async def run_client(
    base_url: str,
    hz: float,
    seconds: float,
    other_hz: list[float] | None = None,
    delete: bool = True,
    token: str | None = None,
) -> ClientResult:
    """One call: connect, send the tone for ``seconds``, analyse the echo, hang up."""
    result = ClientResult(hz)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    tone = ToneTrack(hz)
    pc.addTrack(tone)
    channel = pc.createDataChannel("events")
    connected = asyncio.Event()
    first_echo = asyncio.Event()
    others = [f for f in (other_hz or []) if f != hz]
    started = time.monotonic()

    @pc.on("connectionstatechange")
    def _state() -> None:
        if pc.connectionState == "connected" and not connected.is_set():
            result.offer_to_connected_s = time.monotonic() - started
            connected.set()

    @channel.on("message")
    def _message(message: str) -> None:
        result.events.append(json.loads(message))

    @channel.on("open")
    def _open() -> None:
        channel.send(json.dumps({"type": "hello", "hz": hz}))

    async def analyse(track: MediaStreamTrack) -> None:
        async for samples in heard_frames(track):
            result.frames_received += 1
            own = goertzel_power(samples, hz)
            total = sum(x * x for x in samples) * len(samples) / 2 + 1.0
            if own > 0.2 * total:
                result.frames_with_own_tone += 1
                if not first_echo.is_set():
                    result.offer_to_first_echo_s = time.monotonic() - started
                    first_echo.set()
            if any(goertzel_power(samples, o) > 0.2 * total for o in others):
                result.frames_with_other_tone += 1

    tasks: list[asyncio.Task] = []

    @pc.on("track")
    def _track(track: MediaStreamTrack) -> None:
        tasks.append(asyncio.ensure_future(analyse(track)))

    headers = {"Content-Type": "application/sdp"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        await pc.setLocalDescription(await pc.createOffer())
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{base_url}/whip", data=pc.localDescription.sdp, headers=headers
            ) as resp:
                body = await resp.text()
                if resp.status != 201:
                    result.error = f"POST {resp.status}: {body.strip()}"
                    return result
                result.location = resp.headers["Location"]
            await pc.setRemoteDescription(RTCSessionDescription(body, "answer"))
            try:
                await asyncio.wait_for(connected.wait(), 15)
            except TimeoutError:
                result.error = f"not connected: {pc.connectionState}"
                return result
            result.connected = True
            pair = pc.sctp.transport.transport._connection._nominated.get(1)
            if pair is not None:
                result.remote_candidate = f"{pair.remote_addr[0]}:{pair.remote_addr[1]}"
            measure_from = time.monotonic()
            await asyncio.sleep(seconds)
            result.frames_expected = int((time.monotonic() - measure_from) / 0.02)
            if delete:
                async with http.delete(f"{base_url}{result.location}", headers=headers) as resp:
                    if resp.status != 200:
                        result.error = f"DELETE {resp.status}"
    finally:
        for task in tasks:
            task.cancel()
        await pc.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--url", required=True, help="transceiver base URL, e.g. http://127.0.0.1:8080"
    )
    parser.add_argument("--hz", type=float, required=True)
    parser.add_argument("--others", default="", help="comma-separated frequencies of other clients")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    loopback_only()
    others = [float(x) for x in args.others.split(",") if x]
    result = asyncio.run(asyncio.wait_for(run_client(args.url, args.hz, args.seconds, others), 60))
    print(json.dumps(asdict(result)), flush=True)


if __name__ == "__main__":
    main()
