"""A captured connectivity check replayed from another address reaches no one.

STUN has no replay protection: a Binding request sniffed on the way verifies just as well when
resent from a spoofed source. The relay cannot tell (the hint in it is valid) and forwards it as
a pending flow; the transceiver refuses it (its transaction id was seen from another address),
so nothing is answered and the relay sends nothing toward the spoofed source. Real processes: a
relay and a transceiver; the "capture" is a check we build with the session's credentials.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from aiortc import RTCPeerConnection

from common import stun
from testbed.callers import EchoCaller
from testbed.nat import NatProxy
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.loopback import collect, udp_client
from tests.support.waits import run, wait_for, wait_until
from tests.support.whip import post, sdp_value

# A session that never connects would hold the transceiver's SIGTERM for its ICE deadline.
QUICK_EXIT = ["--drain-grace", "0"]


async def captured_check(url: str) -> bytes:
    """Create a session (it need not connect) and the check its caller would send: what an
    eavesdropper on the caller's path would capture."""
    pc = RTCPeerConnection()
    pc.addTransceiver("audio")
    await pc.setLocalDescription(await pc.createOffer())
    offer = pc.localDescription.sdp
    status, answer, _ = await post(url, offer)
    await pc.close()
    assert status == 201, answer
    username = f"{sdp_value(answer, 'ice-ufrag')}:{sdp_value(offer, 'ice-ufrag')}"
    key = sdp_value(answer, "ice-pwd").encode()
    return stun.binding_request(username, secrets.token_bytes(12), integrity_key=key)


def answered(check: bytes, datagrams: list[bytes]) -> bool:
    """A success response to ``check`` among ``datagrams`` (ICE may also send a triggered check)."""
    return any(
        stun.parse(d).msg_type == stun.BINDING_SUCCESS and d[8:20] == check[8:20] for d in datagrams
    )


def test_a_replayed_check_is_refused_and_nothing_goes_to_its_spoofed_source():
    relay = RelayProcess({}, workers=1)
    trx = TransceiverProcess(relay, extra_args=QUICK_EXIT)
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        check = run(captured_check(trx.url))
        caller, spoofed = udp_client(), udp_client()

        caller.sendto(check, relay.address)
        assert answered(check, collect([caller], 1, timeout_s=3)[caller]), "answered, via the relay"

        for _ in range(5):  # the capture, resent from another address
            spoofed.sendto(check, relay.address)
        assert not collect([spoofed], 1, timeout_s=1.5)[spoofed], "nothing reached the victim"
        assert wait_for(
            lambda: trx.metric("rtcedge_transceiver_dropped_datagrams_total", reason="replayed"),
            5,
        )
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_packets_total", direction="client_to_transceiver"),
            6,
        ), "the relay forwarded the replays (it cannot tell), the transceiver refused them"
        # The flow the replays opened never confirms: media from there goes nowhere.
        spoofed.sendto(b"\x80rtp from the spoofed source", relay.address)
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_dropped_packets_total", reason="not_confirmed"), 1
        )
        for s in (caller, spoofed):
            s.close()


def test_checks_replayed_directly_at_the_media_port_are_refused_too():
    """Without a relay in between (a client talking to the socket directly, as tests do)."""
    relay = RelayProcess({}, workers=1)
    trx = TransceiverProcess(relay, extra_args=QUICK_EXIT)  # no --relay-network: direct is fine
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        check = run(captured_check(trx.url))
        caller, spoofed = udp_client(), udp_client()
        caller.sendto(check, trx.media_address)
        assert answered(check, collect([caller], 1, timeout_s=3)[caller])
        spoofed.sendto(check, trx.media_address)
        assert not collect([spoofed], 1, timeout_s=1.0)[spoofed]
        assert wait_for(
            lambda: trx.metric("rtcedge_transceiver_dropped_datagrams_total", reason="replayed"),
            1,
        )
        for s in (caller, spoofed):
            s.close()


def test_a_replayed_consent_check_never_moves_a_live_calls_media():
    """Finding 1 of the hardening issue: a consent check of a live call, captured and resent
    from another address through the relay, used to move the call's outbound media there.

    Two replays: the real capture (its id is remembered: refused), and a check signed like it
    with an id the transceiver has not seen (the worst case: a capture old enough to have left
    the transaction memory). The second is answered - that is ICE - but media moves only after a
    round trip, which the spoofed source cannot complete: nothing but STUN ever reaches it, and
    the caller's echo goes on.
    """
    relay = RelayProcess({}, workers=1)
    proxy = NatProxy(relay.address)
    trx = TransceiverProcess(relay, advertise=proxy.address)
    relay.transceivers = {0: trx.media_address}
    spoofed = udp_client()

    async def go() -> None:
        caller = EchoCaller()
        await caller.connect(trx.url)
        assert await caller.echo.wait(0.0, 25, 10), "the call carries audio"

        def checks() -> list[bytes]:
            return [d for d in proxy.captured if stun.parse(d).msg_type == stun.BINDING_REQUEST]

        assert await wait_until(lambda: bool(checks()), 12), "no consent check captured"
        capture = checks()[0]
        offer, answer = caller.pc.localDescription.sdp, caller.pc.remoteDescription.sdp
        username = f"{sdp_value(answer, 'ice-ufrag')}:{sdp_value(offer, 'ice-ufrag')}"
        key = sdp_value(answer, "ice-pwd").encode()
        start = time.monotonic()
        for i in range(30):  # 3 s of replays: the capture, and fresh-id copies of it
            if i % 2:
                spoofed.sendto(capture, relay.address)
            else:
                fresh = stun.binding_request(username, secrets.token_bytes(12), key)
                spoofed.sendto(fresh, relay.address)
            await asyncio.sleep(0.1)
        received = await asyncio.to_thread(collect, [spoofed], 10_000, 2.0)
        got = received[spoofed]
        assert got, "the fresh-id checks are answered (ICE), so the test sees the path"
        assert all(d[0] < 4 for d in got), "no DTLS or RTP ever reached the spoofed source"
        assert len(got) <= 15 + 4, "one answer per fresh check, a few checks of ours, no more"
        assert await caller.echo.wait(start, 100, 5), "the caller's audio went on throughout"
        assert caller.echo.gap_ms(start + 0.5, time.monotonic()) < 500
        await caller.pc.close()

    with relay, trx:
        proxy.start()
        try:
            run(go(), timeout_s=60)
            assert trx.metric("rtcedge_transceiver_dropped_datagrams_total", reason="replayed") > 0
        finally:
            proxy.close()
            spoofed.close()
