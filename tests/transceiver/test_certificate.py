"""One DTLS certificate per process: shared by sessions, replaced on rotation, its SSL context
built once and as aiortc builds its own (plus no session cache)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from aiortc import RTCPeerConnection
from aiortc.rtcdtlstransport import SRTP_PROFILES, RTCCertificate
from OpenSSL import SSL

from tests.support.inprocess import direct_config, running
from tests.support.waits import run
from tests.support.whip import make_offer
from tests.transceiver.test_session import PASSWORD, SESSION_ID, UFRAG, Host
from transceiver.call.certificate import CertificateHolder
from transceiver.call.seam import SharedCertificate, peer_connection, use_certificate
from transceiver.call.session import Session

DAY = 24 * 3600.0


def fingerprint(certificate: RTCCertificate) -> str:
    return next(f.value for f in certificate.getFingerprints() if f.algorithm == "sha-256")


def test_sessions_share_one_certificate_until_it_rotates():
    holder = CertificateHolder(now=1000.0)
    first = holder.current(1000.0)
    assert holder.current(1000.0 + DAY - 1) is first, "the same one for a day"
    assert holder.rotations == 0
    second = holder.current(1000.0 + DAY)
    assert second is not first and fingerprint(second) != fingerprint(first)
    assert holder.rotations == 1
    assert holder.current(1000.0 + DAY + 5) is second
    assert holder.current(0.0) is not second, "a clock that went back: a new one too"


def test_a_lifetime_out_of_range_is_refused():
    for lifetime in (0.0, -1.0, 30 * DAY):
        with pytest.raises(ValueError, match="lifetime"):
            CertificateHolder(now=0.0, lifetime_s=lifetime)


def test_fingerprints_and_the_ssl_context_are_made_once_like_aiortc_s_plus_no_session_cache():
    """aiortc's context, plus no session cache and our cipher suites in our order
    (``test_dtls_rsa``: the suites, and handshakes with RSA peers)."""
    certificate = SharedCertificate.generateCertificate()
    assert certificate.getFingerprints() == RTCCertificate.getFingerprints(certificate)
    context = certificate._create_ssl_context(SRTP_PROFILES)
    assert certificate._create_ssl_context(SRTP_PROFILES) is context
    assert context.get_session_cache_mode() == SSL.SESS_CACHE_OFF
    stock = RTCCertificate._create_ssl_context(certificate, SRTP_PROFILES)
    options = context.set_options(0)  # adds nothing, returns the options
    assert options == stock.set_options(0) | SSL.OP_CIPHER_SERVER_PREFERENCE
    assert options & SSL.OP_NO_TICKET, "no tickets"
    assert context.get_verify_mode() == stock.get_verify_mode()
    stock_suites = set(SSL.Connection(stock).get_cipher_list())
    assert stock_suites < set(SSL.Connection(context).get_cipher_list()), "aiortc's, and more"


def test_use_certificate_only_before_the_offer_is_applied():
    async def go():
        certificate = SharedCertificate.generateCertificate()
        pc = RTCPeerConnection()
        use_certificate(pc, certificate)
        await pc.setRemoteDescription(await offer_description())
        (transceiver,) = [t for t in pc.getTransceivers() if t.kind == "audio"]
        local = transceiver.receiver.transport.getLocalParameters()
        assert local.fingerprints == certificate.getFingerprints()
        with pytest.raises(RuntimeError, match="before"):
            use_certificate(pc, certificate)
        await pc.close()

    run(go())


def test_a_peer_connection_made_with_the_process_certificate_makes_none_of_its_own(monkeypatch):
    """aiortc's constructor would make a key pair and certificate per call only to have it
    replaced: ``peer_connection`` hands it the process's instead, answers with its fingerprint,
    and leaves aiortc's own constructor as it was for anyone else."""
    import aiortc.rtcpeerconnection as module
    from aiortc import RTCConfiguration

    made = []
    generate = RTCCertificate.generateCertificate.__func__  # type: ignore[attr-defined]

    def counted(cls):  # type: ignore[no-untyped-def]
        made.append(cls)
        return generate(cls)

    certificate = SharedCertificate.generateCertificate()
    monkeypatch.setattr(RTCCertificate, "generateCertificate", classmethod(counted))

    async def go():
        pc = peer_connection(RTCConfiguration(iceServers=[]), certificate)
        assert made == [], "no certificate of its own"
        assert module.RTCCertificate is RTCCertificate, "aiortc's name put back"
        offer = await offer_description()  # its caller's peer connection makes one
        await pc.setRemoteDescription(offer)
        answer = await pc.createAnswer()
        assert f"a=fingerprint:sha-256 {fingerprint(certificate)}" in answer.sdp
        await pc.close()
        before = len(made)
        RTCPeerConnection()  # anyone else's peer connection: aiortc's own certificate
        assert len(made) == before + 1

    run(go())


def test_a_peer_connection_is_refused_on_an_aiortc_that_names_its_certificate_otherwise(
    monkeypatch,
):
    import aiortc.rtcpeerconnection as module
    from aiortc import RTCConfiguration

    from transceiver.call.seam.peer import check_peer

    monkeypatch.delattr(module, "RTCCertificate")

    async def go():
        certificate = SharedCertificate.generateCertificate()
        with pytest.raises(RuntimeError, match="certificates elsewhere"):
            peer_connection(RTCConfiguration(iceServers=[]), certificate)
        assert "aiortc.rtcpeerconnection.RTCCertificate" in check_peer()

    run(go())


async def offer_description():
    from aiortc import RTCSessionDescription

    return RTCSessionDescription(await make_offer(), "offer")


def test_two_sessions_answer_with_the_process_s_fingerprint_and_a_new_one_after_rotation():
    async def go():
        host = Host()
        holder = CertificateHolder(now=0.0)
        process_fingerprint = fingerprint(holder.current(0.0))
        clock = [0.0]
        context = replace(host.context(), certificate=lambda: holder.current(clock[0]))
        answers = []
        for i, now in enumerate((0.0, 10.0, DAY + 1)):
            clock[0] = now
            session = Session(context, f"{SESSION_ID[:-1]}{i}", f"{UFRAG}{i}", PASSWORD, now=now)
            answers.append(await session.answer(await make_offer(), "192.0.2.1", {}))
            session.end("deleted")
            await session.closed.wait()
        first, second, rotated = (
            next(line for line in a.splitlines() if line.startswith("a=fingerprint:sha-256"))
            for a in answers
        )
        assert first == second == f"a=fingerprint:sha-256 {process_fingerprint}"
        assert rotated != first, "a session after the rotation: the new certificate"

    run(go())


def test_a_server_answers_every_session_with_its_process_certificate():
    async def go():
        async with running(direct_config()) as (server, _url):
            sessions = [await server.create_session(await make_offer(), "", {}) for _ in "ab"]
            answers = [s.answer_sdp for s in sessions]
            for session in sessions:
                session.end("deleted")
                await session.closed.wait()
        process = fingerprint(server.certificates.current(time.monotonic()))
        for answer in answers:
            assert f"a=fingerprint:sha-256 {process}" in answer

    run(go())
