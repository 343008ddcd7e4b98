"""An offer's m-lines as a call answers them (transceiver.call.bundle), SDP text in and out.

Real aiortc peer connections make the offers (both bundle policies, the camera added first or
last) and answer what the call gives aiortc, as ``Session.answer`` does; nothing is connected.
The answer must put every bundled section on one transport (the same ICE credentials, DTLS
fingerprint and setup, port and candidates), answer the camera inactive, reject what is not
bundled, and be accepted by the aiortc client that offered. An offer without BUNDLE (webrtcbin's
stock offer, as it made it) is answered on its audio m-line's transport, the rest rejected.
"""

from __future__ import annotations

import re

import pytest
from aiortc import RTCBundlePolicy, RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from testbed.callers import ToneTrack
from tests.support.waits import run
from tests.transceiver.test_media_kinds import SmallVideo
from tests.transceiver.test_offer import APPLICATION, FINGERPRINT, SESSION, audio, sdp
from transceiver.call.bundle import BundledOffer, Section, payload_types, split
from transceiver.signaling.offer import check_offer

POLICIES = {"balanced": RTCBundlePolicy.BALANCED, "max_bundle": RTCBundlePolicy.MAX_BUNDLE}
# What BUNDLE makes one for the group, and must therefore read the same in every section.
SHARED = ("a=ice-ufrag:", "a=ice-pwd:", "a=fingerprint:", "a=setup:", "a=candidate:")


def transport(section: Section) -> tuple[str, ...]:
    """A section's port, address and transport lines: equal in every section of one bundle."""
    address = tuple(line for line in section.lines if line.startswith("c="))
    return (section.port, *address, *section.starting(SHARED))


def group(sdp_text: str) -> list[str]:
    found = re.search(r"^a=group:BUNDLE (.*)$", sdp_text, re.M)
    assert found, "a BUNDLE group"
    return found.group(1).split()


async def aiortc_answer(peer_offer: str) -> str:
    """aiortc's answer to what the call gives it, as ``Session.answer`` makes it."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[], bundlePolicy=RTCBundlePolicy.MAX_BUNDLE))
    try:
        await pc.setRemoteDescription(RTCSessionDescription(peer_offer, "offer"))
        pc.addTrack(ToneTrack(440))
        await pc.setLocalDescription(await pc.createAnswer())
        return pc.localDescription.sdp
    finally:
        await pc.close()


async def answered(offer: str) -> tuple[BundledOffer, str]:
    bundle = BundledOffer.read(offer)
    return bundle, bundle.answer(await aiortc_answer(bundle.peer_offer()))


@pytest.mark.parametrize("camera_first", [False, True], ids=["camera_last", "camera_first"])
@pytest.mark.parametrize("policy", POLICIES)
def test_an_aiortc_camera_offer_is_answered_on_one_transport(policy, camera_first):
    async def go() -> None:
        client = RTCPeerConnection(RTCConfiguration(iceServers=[], bundlePolicy=POLICIES[policy]))
        tracks = [ToneTrack(440), SmallVideo()]
        for track in reversed(tracks) if camera_first else tracks:
            client.addTrack(track)
        client.createDataChannel("events")
        await client.setLocalDescription(await client.createOffer())
        offer = client.localDescription.sdp
        bundle, answer = await answered(offer)
        _, sections = split(answer)
        assert [s.kind for s in sections] == [s.kind for s in bundle.sections], "offer's order"
        assert [s.mid for s in sections] == [s.mid for s in bundle.sections]
        assert len({transport(s) for s in sections}) == 1, "one transport for every section"
        assert all(s.value("a=ice-ufrag:") for s in sections)
        video = next(s for s in sections if s.kind == "video")
        assert "a=inactive" in video.lines and video.port != "0"
        assert group(answer) == group(offer), "every m-line bundled, the offer's tag first"
        await client.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        kinds = {t.kind: t.currentDirection for t in client.getTransceivers()}
        assert kinds == {"audio": "sendrecv", "video": "inactive"}
        await client.close()

    run(go(), timeout_s=30)


# A camera offered first, with ICE credentials of its own: legal in an initial BUNDLE offer,
# where the m-line the group names first (its tag) carries the transport of all (RFC 8843).
TAGGED_ICE = ["a=ice-ufrag:vtag", "a=ice-pwd:videopassword0123456789"]
CAMERA = [
    "m=video 9 UDP/TLS/RTP/SAVPF 97 98",
    "c=IN IP4 0.0.0.0",
    "a=mid:2",
    "a=sendrecv",
    "a=rtcp-mux",
    "a=rtpmap:97 rtx/90000",
    "a=fmtp:97 apt=98",
    "a=rtpmap:98 VP9/90000",
    "a=fmtp:98 profile-id=0",
    "a=rtcp-fb:98 nack",
    *TAGGED_ICE,
    FINGERPRINT.replace("AB", "CD"),
    "a=setup:active",
]


def test_the_tagged_transport_is_what_aiortc_is_given():
    offer = sdp([*SESSION[:-1], "a=group:BUNDLE 2 0 1"], audio(), APPLICATION, CAMERA)
    bundle = BundledOffer.read(offer)
    peer_session, peer = split(bundle.peer_offer())
    assert [s.kind for s in peer] == ["audio", "application"], "no camera for aiortc"
    assert "a=group:BUNDLE 0 1" in peer_session
    for section in peer:
        assert section.starting(("a=ice-", "a=fingerprint:", "a=setup:")) == (
            *TAGGED_ICE,
            FINGERPRINT.replace("AB", "CD"),
            "a=setup:active",
        )
    assert bundle.tag.kind == "video"


def test_a_tag_the_call_rejects_does_not_carry_the_transport():
    text = ["m=text 9 RTP/AVP 98", "a=mid:4", "a=rtpmap:98 t140/1000", "a=ice-ufrag:t"]
    offer = sdp([*SESSION[:-1], "a=group:BUNDLE 4 0 1"], audio(), APPLICATION, text)
    bundle = BundledOffer.read(offer)
    assert bundle.tag.kind == "audio"
    assert "a=ice-ufrag:t" not in bundle.peer_offer()


def test_a_camera_aiortc_cannot_decode_is_answered_inactive_with_its_codec():
    """VP9 only (an app's codec preferences): aiortc refused the whole offer (a 500)."""

    async def go() -> None:
        offer = sdp([*SESSION[:-1], "a=group:BUNDLE 2 0 1"], audio(), APPLICATION, CAMERA)
        _, answer = await answered(offer)
        _, sections = split(answer)
        camera = sections[2]
        assert camera.lines[0] == f"m=video {sections[0].port} UDP/TLS/RTP/SAVPF 98", "not rtx"
        assert camera.starting(("a=rtpmap:", "a=fmtp:")) == (
            "a=rtpmap:98 VP9/90000",
            "a=fmtp:98 profile-id=0",
        )
        assert {"a=inactive", "a=mid:2", "a=rtcp-mux"} <= set(camera.lines)
        assert len({transport(s) for s in sections}) == 1
        assert "a=setup:passive" in sections[0].lines, "the tag's setup:active decided ours"
        assert group(answer) == ["2", "0", "1"], "the tag is still the camera's"

    run(go(), timeout_s=30)


def test_what_the_bundle_leaves_out_is_rejected():
    async def go() -> None:
        second_channel = [line.replace("a=mid:1", "a=mid:3") for line in APPLICATION]
        text = ["m=text 9 RTP/AVP 98", "a=mid:4", "a=rtpmap:98 t140/1000"]
        offer = sdp(SESSION, audio(), APPLICATION, CAMERA, second_channel, text)
        offer = offer.replace("a=group:BUNDLE 0 1", "a=group:BUNDLE 0 1 3 4")  # not the camera
        _, answer = await answered(offer)
        _, sections = split(answer)
        assert [s.port == "0" for s in sections] == [False, False, True, True, True]
        assert group(answer) == ["0", "1"], "the rejected m-lines leave the group"
        camera, channel, kind = sections[2:]
        assert camera.lines[:4] == ("m=video 0 UDP/TLS/RTP/SAVPF 98", "c=IN IP4 0.0.0.0",
                                    "a=mid:2", "a=inactive")  # fmt: skip
        assert channel.lines[0] == "m=application 0 UDP/DTLS/SCTP webrtc-datachannel"
        assert kind.lines[0] == "m=text 0 RTP/AVP 98"
        for section in sections[2:]:
            assert not section.starting(("a=candidate:",)), "a rejected m-line has no address"
            assert section.value("a=ice-ufrag:") == sections[0].value("a=ice-ufrag:")

    run(go(), timeout_s=30)


# GStreamer webrtcbin 1.22's stock offer (bundle-policy none), as it made it: no BUNDLE group,
# ICE credentials of its own in each m-line (and a=bundle-only on the data channel anyway).
WEBRTCBIN_FINGERPRINT = "a=fingerprint:sha-256 " + ":".join(["77"] * 32)
WEBRTCBIN_NONE = [
    ["v=0", "o=- 6115103204220078349 0 IN IP4 0.0.0.0", "s=-", "t=0 0", "a=ice-options:trickle"],
    [
        "m=audio 9 UDP/TLS/RTP/SAVPF 111",
        "c=IN IP4 0.0.0.0",
        "a=setup:actpass",
        "a=ice-ufrag:C3KqKHtpBnAHvznKd78+hpCB/IdKvm0V",
        "a=ice-pwd:/XZUFx95pvRBd/gLfz0x3XEX7jPhsuKb",
        "a=rtcp-mux",
        "a=rtcp-rsize",
        "a=sendrecv",
        "a=rtpmap:111 OPUS/48000/2",
        "a=rtcp-fb:111 transport-cc",
        "a=fmtp:111 sprop-stereo=0;sprop-maxcapturerate=48000",
        "a=ssrc:3516409925 cname:user3901323333@host-c0c6a341",
        "a=mid:audio0",
        WEBRTCBIN_FINGERPRINT,
        "a=rtcp-mux-only",
    ],
    [
        "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
        "c=IN IP4 0.0.0.0",
        "a=setup:actpass",
        "a=ice-ufrag:hFRH1cmZUE2cFTcPiPfPfb7ZnOHNEFUU",
        "a=ice-pwd:MGsZLowaZyYl1VzenSRmebfZ3W8GnEl9",
        "a=bundle-only",
        "a=mid:application1",
        "a=sctp-port:5000",
        WEBRTCBIN_FINGERPRINT,
    ],
]
UNBUNDLED_CAMERA = [
    *(line for line in CAMERA if not line.startswith(("a=ice-", "a=setup:"))),
    "a=ice-ufrag:camera",
    "a=ice-pwd:camerapassword0123456789",
    "a=setup:actpass",
]


def test_an_offer_without_bundle_is_answered_on_its_audio_m_line_alone():
    """bundle-policy none: the call takes the audio m-line's transport; the data channel and a
    camera, each offered on a transport of its own, are rejected (port 0, RFC 8829 5.3.1)."""

    async def go() -> None:
        offer = sdp(*WEBRTCBIN_NONE, UNBUNDLED_CAMERA)
        assert check_offer(offer) == offer, "the offer check accepts it (it has no candidates)"
        bundle = BundledOffer.read(offer)
        assert bundle.unbundled and bundle.tag.mid == "audio0"
        peer_session, peer = split(bundle.peer_offer())
        assert [s.kind for s in peer] == ["audio"], "aiortc gets the audio m-line alone"
        assert peer[0].value("a=ice-ufrag:") == "C3KqKHtpBnAHvznKd78+hpCB/IdKvm0V", "its own"
        assert not any(line.startswith("a=group:") for line in peer_session)
        answer = bundle.answer(await aiortc_answer(bundle.peer_offer()))
        assert "a=group:" not in answer, "nothing bundled: aiortc's own group line is dropped"
        audio, channel, camera = split(answer)[1]
        assert [s.mid for s in (audio, channel, camera)] == ["audio0", "application1", "2"]
        assert audio.port != "0" and audio.starting(("a=candidate:",)), "the call's transport"
        assert "a=sendrecv" in audio.lines and "a=setup:active" in audio.lines
        assert channel.lines[0] == "m=application 0 UDP/DTLS/SCTP webrtc-datachannel"
        assert camera.lines[0] == "m=video 0 UDP/TLS/RTP/SAVPF 98"
        for rejected in (channel, camera):
            assert not rejected.starting(("a=candidate:", "a=sctp-port:")), "no address"
            assert rejected.value("a=ice-ufrag:") == audio.value("a=ice-ufrag:")

    run(go(), timeout_s=30)


def test_an_offer_without_bundle_or_audio_is_an_error():
    with pytest.raises(ValueError, match="no audio"):
        BundledOffer.read(sdp(WEBRTCBIN_NONE[0], WEBRTCBIN_NONE[2]))


def test_an_answer_that_does_not_answer_the_peer_offer_is_an_error():
    bundle = BundledOffer.read(sdp(SESSION, audio(), APPLICATION))
    with pytest.raises(ValueError, match="does not answer"):
        bundle.answer(sdp(SESSION, audio()))


def test_an_offer_without_bundled_audio_is_an_error():
    with pytest.raises(ValueError, match="no audio"):
        BundledOffer.read(sdp([*SESSION[:-1], "a=group:BUNDLE 1"], audio(), APPLICATION))


def test_transport_lines_are_replaced_where_they_were():
    section = Section(("m=audio 9 X 0", "a=mid:0", "a=ice-ufrag:a", "a=ice-pwd:b", "a=x"))
    assert section.with_transport(["a=ice-ufrag:c"]).lines == (
        "m=audio 9 X 0",
        "a=mid:0",
        "a=ice-ufrag:c",
        "a=x",
    )
    assert Section(("m=audio 9 X 0",)).with_transport(["t"]).lines == ("m=audio 9 X 0", "t")


def test_payload_types_are_the_first_m_line_of_the_kind():
    text = sdp(SESSION, audio(codecs=("111 opus/48000/2", "0 PCMU/8000")), CAMERA)
    assert payload_types(text, "audio") == {111, 0}
    assert payload_types(text, "video") == {97, 98}
    assert payload_types(text, "text") == frozenset()
