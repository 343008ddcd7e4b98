"""A captured connectivity check replayed from another address reaches no one.

STUN has no replay protection: a Binding request sniffed on the way verifies just as well when
resent from a spoofed source. The relay cannot tell (the hint in it is valid) and forwards it as
a pending flow; the transceiver refuses it (its transaction id was seen from another address),
so nothing is answered and the relay sends nothing toward the spoofed source. Real processes: a
relay and a transceiver; the "capture" is a check we build with the session's credentials.
"""

from __future__ import annotations

import re
import secrets

from aiortc import RTCPeerConnection

from bench.peers import RelayProcess, TransceiverProcess
from common import stun
from tests.relay.test_relay_integration import collect, udp_client, wait_for
from tests.transceiver.conftest import run
from tests.transceiver.test_whip import post

# A session that never connects would hold the transceiver's SIGTERM for its ICE deadline.
QUICK_EXIT = ["--drain-grace", "0"]


def sdp_value(sdp: str, name: str) -> str:
    found = re.search(rf"a={name}:(\S+)", sdp)
    assert found, name
    return found.group(1)


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
