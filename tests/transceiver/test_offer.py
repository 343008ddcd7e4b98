"""The WHIP offer check as a plain function: text in, a cleaned offer or a refusal out."""

from __future__ import annotations

import pytest

from common.verdict import Refuse
from transceiver.signaling.offer import check_offer, read_offer

FINGERPRINT = "a=fingerprint:sha-256 " + ":".join(["AB"] * 32)
ICE = ["a=ice-ufrag:abcd", "a=ice-pwd:0123456789abcdefghijkl"]
SESSION = ["v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1"]
CANDIDATES = [
    "a=candidate:1 1 udp 2122260223 192.168.1.2 54321 typ host",
    "a=candidate:2 1 udp 2122260223 abcd-ef.local 54322 typ host",
    "a=end-of-candidates",
]


def audio(mid: str = "0", codecs: tuple[str, ...] = ("111 opus/48000/2", "0 PCMU/8000")):
    types = " ".join(c.split()[0] for c in codecs)
    return [
        f"m=audio 9 UDP/TLS/RTP/SAVPF {types}",
        "c=IN IP4 0.0.0.0",
        f"a=mid:{mid}",
        "a=sendrecv",
        "a=rtcp-mux",
        *(f"a=rtpmap:{c}" for c in codecs),
        *ICE,
        FINGERPRINT,
        "a=setup:actpass",
        *CANDIDATES,
    ]


APPLICATION = [
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
    "c=IN IP4 0.0.0.0",
    "a=mid:1",
    "a=sctp-port:5000",
    *ICE,
    FINGERPRINT,
    "a=setup:actpass",
]


def sdp(*sections: list[str], newline: str = "\r\n") -> str:
    return newline.join(line for section in sections for line in section) + newline


def without(section: list[str], *prefixes: str) -> list[str]:
    return [line for line in section if not line.startswith(prefixes)]


OFFER = sdp(SESSION, audio(), APPLICATION)


def accepted(text: str) -> str:
    """The cleaned offer ``check_offer`` makes of ``text``, which it must not refuse."""
    cleaned = check_offer(text)
    assert isinstance(cleaned, str), cleaned
    return cleaned


def test_a_good_offer_loses_its_candidates_and_nothing_else():
    cleaned = accepted(OFFER)
    assert cleaned == sdp(SESSION, without(audio(), "a=candidate:", "a=end-of"), APPLICATION)
    assert "local" not in cleaned, "no mDNS name for aiortc to resolve"


def test_bare_newlines_are_read_and_answered_as_crlf():
    assert accepted(sdp(SESSION, audio(), APPLICATION, newline="\n")) == accepted(OFFER)


VIDEO = ["m=video 9 UDP/TLS/RTP/SAVPF 96", "a=mid:2", "a=rtpmap:96 VP8/90000", *ICE]
VIDEO += [FINGERPRINT, "a=setup:actpass"]


def test_video_is_accepted_beside_the_audio():
    session = [*SESSION[:-1], "a=group:BUNDLE 0 1 2"]
    assert "m=video" in accepted(sdp(session, audio(), APPLICATION, VIDEO))


def test_video_outside_the_bundle_is_accepted_to_be_rejected():
    """transceiver.call.bundle answers it with port 0; it needs no transport of its own."""
    assert "m=video" in accepted(sdp(SESSION, audio(), APPLICATION, VIDEO))
    bare = without(VIDEO, "a=ice-", "a=fingerprint")
    assert "m=video" in accepted(sdp(SESSION, audio(), APPLICATION, bare))


def test_a_kind_we_do_not_carry_is_accepted_to_be_rejected():
    text = ["m=text 9 RTP/AVP 98", "a=mid:2", "a=rtpmap:98 t140/1000"]
    group = [*SESSION[:-1], "a=group:BUNDLE 0 1 2"]
    assert "m=text" in accepted(sdp(group, audio(), APPLICATION, text))


VIDEO_AS_1 = [line.replace("a=mid:2", "a=mid:1") for line in VIDEO]
REFUSED = {
    "not SDP": ("hello", "malformed SDP: must start with v=0"),
    "unparsable": ("v=0\r\nm=audio x\r\n", "malformed SDP: "),
    "no audio": (sdp(SESSION, APPLICATION), "the offer has no audio m-line"),
    "two audio": (
        sdp([*SESSION[:-1], "a=group:BUNDLE 0 1 2"], audio(), APPLICATION, audio("2")),
        "the offer has more than one audio m-line",
    ),
    "two m-lines, one mid": (
        sdp([*SESSION[:-1], "a=group:BUNDLE 0 1"], audio(), APPLICATION, VIDEO_AS_1),
        "the offer has two m-lines with a=mid:1",
    ),
    "bundled video without ICE": (
        sdp(
            [*SESSION[:-1], "a=group:BUNDLE 0 1 2"],
            audio(),
            APPLICATION,
            without(VIDEO, "a=ice-ufrag"),
        ),
        "m-line 2 lacks ice-ufrag/ice-pwd",
    ),
    "no ice-ufrag": (
        sdp(SESSION, audio(), without(APPLICATION, "a=ice-ufrag")),
        "m-line 1 lacks ice-ufrag/ice-pwd",
    ),
    "no ice-pwd": (
        sdp(SESSION, without(audio(), "a=ice-pwd"), APPLICATION),
        "m-line 0 lacks ice-ufrag/ice-pwd",
    ),
    "no fingerprint": (
        sdp(SESSION, audio(), without(APPLICATION, "a=fingerprint")),
        "m-line 1 lacks a DTLS fingerprint",
    ),
    "no opus": (
        sdp(SESSION, audio(codecs=("0 PCMU/8000", "8 PCMA/8000")), APPLICATION),
        "unsupported audio codecs ['pcma', 'pcmu']: opus is required",
    ),
    "opus at 16 kHz": (
        sdp(SESSION, audio(codecs=("111 opus/16000/2", "0 PCMU/8000")), APPLICATION),
        "opus must be offered as opus/48000/2",
    ),
    "audio outside the BUNDLE": (
        sdp([*SESSION[:-1], "a=group:BUNDLE 1"], audio(), APPLICATION),
        "the audio m-line must be in the BUNDLE group",
    ),
    "no BUNDLE, audio without ICE": (
        sdp(SESSION[:-1], without(audio(), "a=ice-pwd"), APPLICATION),
        "m-line 0 lacks ice-ufrag/ice-pwd",
    ),
    "no BUNDLE, audio without a fingerprint": (
        sdp(SESSION[:-1], without(audio(), "a=fingerprint"), APPLICATION),
        "m-line 0 lacks a DTLS fingerprint",
    ),
    "no BUNDLE, two audio": (
        sdp(SESSION[:-1], audio(), audio("2")),
        "the offer has more than one audio m-line",
    ),
}

# bundle-policy none (GStreamer webrtcbin's stock offer): no group, each m-line its own ICE.
OWN_ICE = ["a=ice-ufrag:efgh", "a=ice-pwd:abcdefghijkl0123456789"]


def own_transport(section: list[str]) -> list[str]:
    return [*without(section, "a=ice-"), *OWN_ICE]


def test_an_offer_without_bundle_is_accepted_on_the_audio_m_line_alone():
    """Answered on the audio m-line's transport, every other m-line rejected
    (transceiver.call.bundle): only the audio m-line needs ICE credentials and a fingerprint."""
    unbundled = sdp(SESSION[:-1], audio(), own_transport(APPLICATION), own_transport(VIDEO))
    assert "a=group" not in accepted(unbundled)
    bare = without(APPLICATION, "a=ice-", "a=fingerprint")
    assert "m=application" in accepted(sdp(SESSION[:-1], audio(), bare))
    assert "m=audio" in accepted(sdp([*SESSION[:-1], "a=group:BUNDLE"], audio(), bare)), "empty"


def test_a_data_channel_left_out_of_the_bundle_is_accepted_to_be_rejected():
    """As video outside the group: its own transport, which the call does not serve."""
    bare = without(APPLICATION, "a=ice-", "a=fingerprint")
    assert "m=application" in accepted(sdp([*SESSION[:-1], "a=group:BUNDLE 0"], audio(), bare))


@pytest.mark.parametrize("case", REFUSED)
def test_each_refusal_is_a_400_with_its_reason(case):
    text, reason = REFUSED[case]
    refused = check_offer(text)
    assert isinstance(refused, Refuse), refused
    assert refused.status == 400 and refused.reason == "invalid" and refused.kind == "offer"
    assert refused.text.startswith(reason), refused.text


def test_a_body_that_is_not_utf8_is_refused_before_it_is_read_as_sdp():
    assert read_offer(OFFER.encode()) == accepted(OFFER)
    refused = read_offer(b"v=0\r\n\xff")
    assert isinstance(refused, Refuse)
    assert (refused.status, refused.reason, refused.text) == (
        400,
        "not_utf8",
        "malformed SDP: not UTF-8",
    )
