"""A real aiortc WebRTC client for tests and benchmarks: WHIP offer, a tone, echo analysis.

Each client sends a sine tone of its own frequency and measures, in what comes back, the power
at its own frequency against the power at the others' (Goertzel), so a test can tell "hears its
own audio" from "hears someone else's". Runs as ``python -m bench.webrtc_client`` in its own
process, printing one JSON line, or in-process through ``run_client``.
"""

from __future__ import annotations

import argparse
import asyncio
import fractions
import json
import math
import struct
import time
from dataclasses import asdict, dataclass, field

import aiohttp
import aioice.ice
import av
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

RATE = 48000
SAMPLES = 960  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)


def loopback_only() -> None:
    """Keep this *client's* ICE on loopback: tests and benchmarks never leave 127.0.0.0/8."""
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]  # type: ignore[assignment]


class ToneTrack(MediaStreamTrack):
    """A paced mono sine tone, 20 ms frames."""

    kind = "audio"

    def __init__(self, hz: float, amplitude: float = 0.3) -> None:
        super().__init__()
        self.hz = hz
        self.amplitude = amplitude
        self._pts = 0
        self._start: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        wait = self._start + self._pts / RATE - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        w = 2 * math.pi * self.hz / RATE
        a = 32767 * self.amplitude
        pcm = struct.pack(
            f"<{SAMPLES}h", *(int(a * math.sin(w * (self._pts + i))) for i in range(SAMPLES))
        )
        frame = av.AudioFrame(format="s16", layout="mono", samples=SAMPLES)
        frame.planes[0].update(pcm)
        frame.sample_rate = RATE
        frame.time_base = TIME_BASE
        frame.pts = self._pts
        self._pts += SAMPLES
        return frame


def goertzel_power(samples: list[int], hz: float, rate: int = RATE) -> float:
    w = 2 * math.pi * hz / rate
    coeff = 2 * math.cos(w)
    s1 = s2 = 0.0
    for x in samples:
        s0 = x + coeff * s1 - s2
        s2, s1 = s1, s0
    return s1 * s1 + s2 * s2 - coeff * s1 * s2


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
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            for f in resampler.resample(frame):
                samples = list(struct.unpack(f"<{f.samples}h", bytes(f.planes[0])[: f.samples * 2]))
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
