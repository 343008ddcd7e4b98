"""A caller whose address and port change mid-call (NAT rebinding) keeps its session."""

from __future__ import annotations

import asyncio
import struct
import time

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from bench.peers import NatProxy, RelayProcess, TransceiverProcess
from bench.webrtc_client import ToneTrack
from tests.relay.test_relay_integration import wait_for
from tests.transceiver.conftest import run
from tests.transceiver.test_whip import post


def loud(frame) -> bool:  # type: ignore[no-untyped-def]
    samples = struct.unpack(
        f"<{frame.samples * len(frame.layout.channels)}h",
        bytes(frame.planes[0])[: frame.samples * len(frame.layout.channels) * 2],
    )
    return max(abs(x) for x in samples) > 2000


def test_nat_rebinding_keeps_the_session_and_media_resumes_within_a_consent_interval():
    relay = RelayProcess({}, workers=1)
    proxy = NatProxy(relay.address)
    trx = TransceiverProcess(relay, advertise=proxy.address)
    relay.transceivers = {0: trx.media_address}

    async def go() -> None:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(ToneTrack(440))
        echoes: list[float] = []

        async def listen(track) -> None:  # type: ignore[no-untyped-def]
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                if loud(frame):
                    echoes.append(time.monotonic())

        pc.on("track", lambda track: asyncio.ensure_future(listen(track)))
        await pc.setLocalDescription(await pc.createOffer())
        status, answer, _ = await post(trx.url, pc.localDescription.sdp)
        assert status == 201
        await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        deadline = time.monotonic() + 10
        while len(echoes) < 50 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(echoes) >= 50, "echo flows before the rebinding"
        old_outside = proxy.outside_address
        moved_at = time.monotonic()
        new_outside = proxy.rebind()
        assert new_outside[0] != old_outside[0] and new_outside[1] != old_outside[1]
        deadline = moved_at + 10
        while not [t for t in echoes if t > moved_at + 0.2] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        resumed = [t for t in echoes if t > moved_at + 0.2]
        assert resumed, "media resumed after the rebinding"
        gap = resumed[0] - moved_at
        # The client's next consent check (every 4-6 s) re-creates the path through the relay;
        # allow for one lost or late check on this shared machine.
        assert gap < 12.0, f"resumed at the client's next consent check, took {gap:.1f} s"
        await asyncio.sleep(1.0)
        assert trx.metric("rtcedge_transceiver_sessions_started_total") == 1
        assert trx.metric("rtcedge_transceiver_sessions_active") == 1, "the same session went on"
        # The relay saw the client at its new address as a new, confirmed flow.
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_flows_created_total", table="confirmed"), 2
        )
        await pc.close()

    with relay, trx:
        proxy.start()
        try:
            run(go(), timeout_s=60)
        finally:
            proxy.close()
