"""The SSRC latch as a plain object, and the SRTP session it guards (``transceiver.call.ssrc``,
``transceiver.call.inbound.LatchedSrtp``), tested with numbers and bytes."""

from __future__ import annotations

import asyncio

import pylibsrtp
import pytest
from aiortc.rtp import RtcpRrPacket, RtpPacket

from transceiver.call.inbound import ForeignSsrc, LatchedSrtp
from transceiver.call.seam import InlineAudioReceiver, latch_srtp
from transceiver.call.ssrc import MAX_SSRCS_PER_CALL, SsrcLatch, offered_ssrcs

KEY = bytes(range(30))


def srtp(direction: int) -> pylibsrtp.Session:
    profile = pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80
    return pylibsrtp.Session(pylibsrtp.Policy(key=KEY, ssrc_type=direction, srtp_profile=profile))


def rtp(ssrc: int, seq: int = 1) -> bytes:
    packet = RtpPacket(payload_type=111, sequence_number=seq, timestamp=seq * 960, ssrc=ssrc)
    packet.payload = b"\xf8\xff\xfe"
    return packet.serialize()


def test_the_offered_ssrc_is_latched_and_a_few_more_then_none():
    latch = SsrcLatch(expected=[7])
    assert latch.latched == {7}
    for ssrc in (8, 9, 10):
        assert latch.admits(ssrc)
        latch.authenticated(ssrc)
    assert latch.latched == {7, 8, 9, 10} and len(latch.latched) == MAX_SSRCS_PER_CALL
    assert not latch.admits(11) and latch.refused == 1
    latch.authenticated(11)  # cannot happen (refused first), and would not latch anyway
    assert 11 not in latch.latched
    assert all(latch.admits(s) for s in (7, 8, 9, 10)), "latched ones stay admitted"


def test_without_an_offered_ssrc_the_first_authenticated_ones_are_latched():
    latch = SsrcLatch(max_ssrcs=2)
    assert latch.admits(5) and latch.admits(6) and latch.admits(7), "room: all may try"
    latch.authenticated(6)
    latch.authenticated(5)
    assert latch.latched == {5, 6}
    assert not latch.admits(7)


def test_junk_that_fails_authentication_takes_no_place():
    latch = SsrcLatch(max_ssrcs=1)
    for ssrc in range(100):  # admitted to try, none authenticated
        assert latch.admits(ssrc)
    assert latch.latched == set()


def test_a_latch_of_no_ssrc_is_refused():
    with pytest.raises(ValueError, match="max_ssrcs"):
        SsrcLatch(max_ssrcs=0)


def test_offered_ssrcs_reads_only_the_audio_section_distinct_and_bounded():
    sdp = "\r\n".join(
        [
            "v=0",
            "m=video 9 UDP/TLS/RTP/SAVPF 96",
            "a=ssrc:1 cname:x",
            "m=audio 9 UDP/TLS/RTP/SAVPF 111",
            "a=ssrc:42 cname:x",
            "a=ssrc:42 msid:a b",
            "a=ssrc:43 cname:x",
            "a=ssrc:notanumber cname:x",
            "a=ssrc:99999999999 cname:x",
            "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
            "a=ssrc:2 cname:x",
        ]
    )
    assert offered_ssrcs(sdp) == [42, 43]
    many = "m=audio 9 X 111\n" + "\n".join(f"a=ssrc:{i} cname:x" for i in range(2574))
    assert offered_ssrcs(many) == list(range(MAX_SSRCS_PER_CALL))
    assert offered_ssrcs("v=0\r\nm=audio 9 X 111\r\n") == []


def test_latched_srtp_refuses_foreign_rtp_and_rtcp_before_libsrtp_and_counts_them():
    sender = srtp(pylibsrtp.Policy.SSRC_ANY_OUTBOUND)
    foreign: list[int] = []
    latched = LatchedSrtp(
        srtp(pylibsrtp.Policy.SSRC_ANY_INBOUND),
        SsrcLatch([5], max_ssrcs=2),
        lambda: foreign.append(1),
    )
    assert latched.unprotect(sender.protect(rtp(5))) == rtp(5)
    assert latched.unprotect(sender.protect(rtp(6))) == rtp(6), "room for one more"
    with pytest.raises(ForeignSsrc):
        latched.unprotect(sender.protect(rtp(7)))
    with pytest.raises(pylibsrtp.Error):  # what aiortc's receive loop catches
        latched.unprotect_rtcp(sender.protect_rtcp(bytes(RtcpRrPacket(ssrc=8))))
    assert len(foreign) == 2
    report = bytes(RtcpRrPacket(ssrc=6))
    assert latched.unprotect_rtcp(sender.protect_rtcp(report)) == report
    assert latched.latch.latched == {5, 6}


def test_latch_srtp_wraps_the_dtls_session_once_and_not_before_srtp_is_up():
    class Dtls:
        _rx_srtp: object = None

    dtls = Dtls()
    latch = SsrcLatch()
    assert latch_srtp(dtls, latch, lambda: None) is None
    session = srtp(pylibsrtp.Policy.SSRC_ANY_INBOUND)
    dtls._rx_srtp = session
    wrapped = latch_srtp(dtls, latch, lambda: None)
    assert isinstance(wrapped, LatchedSrtp) and wrapped.session is session
    assert latch_srtp(dtls, latch, lambda: None) is wrapped, "idempotent"
    assert dtls._rx_srtp is wrapped


def test_a_receiver_whose_rtcp_task_died_stops_at_once():
    """aiortc's stop waits for an event only a cancelled RTCP task sets: one that died on an
    exception (aiortc 1.16: struct.error past 255 report blocks) left it waiting for ever."""

    async def go() -> None:
        from aiortc import RTCPeerConnection

        pc = RTCPeerConnection()
        pc.addTransceiver("audio", direction="recvonly")
        receiver = pc.getTransceivers()[0].receiver
        receiver.__class__ = InlineAudioReceiver

        async def dies() -> None:
            receiver._RTCRtpReceiver__rtcp_started.set()
            raise RuntimeError("struct.error, say")

        task = asyncio.ensure_future(dies())
        await asyncio.sleep(0)
        assert task.done()
        receiver._RTCRtpReceiver__rtcp_task = task
        receiver._RTCRtpReceiver__started = True
        await asyncio.wait_for(receiver.stop(), 1)
        await pc.close()

    asyncio.run(go())
