"""DTLS with peers whose certificate is RSA (GStreamer's webrtcbin, embedded clients): our
context offers ECDHE-RSA suites beside the ECDHE-ECDSA ones, strongest first, and completes a
real handshake with an OpenSSL peer holding an RSA-2048 certificate whichever side is the DTLS
server; our own certificate stays ECDSA P-256.

The handshakes are real OpenSSL ones over memory BIOs (as aiortc drives its own: it feeds the
records it reads from ICE to the connection's BIO), the datagrams moved by hand between the
two connections. The peer is configured as GStreamer 1.22's DTLS agent is: a fresh RSA-2048
self-signed certificate, OpenSSL's cipher list ``ALL:!ADH:!LOW:!EXP:!MD5:@STRENGTH``, the
SRTP profiles, any certificate accepted (WebRTC checks the fingerprint afterwards).
"""

from __future__ import annotations

import contextlib
import datetime
import struct

import pytest
from aiortc.rtcdtlstransport import SRTP_PROFILES, RTCCertificate
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from OpenSSL import SSL

from tests.support.certificates import self_signed
from transceiver.call.seam import SharedCertificate
from transceiver.call.seam.peer import DTLS_CIPHERS

MANDATORY = "ECDHE-ECDSA-AES128-GCM-SHA256"  # RFC 8827 6.5
GSTREAMER_CIPHERS = b"ALL:!ADH:!LOW:!EXP:!MD5:@STRENGTH"  # gst-plugins-bad ext/dtls, 1.22
SRTP_EXPORTER = b"EXTRACTOR-dtls_srtp"  # RFC 5764 4.2
MAX_FLIGHTS = 20  # a DTLS 1.2 handshake takes 4; the bound only stops a loop that never ends


def rsa_peer_context(bits: int = 2048) -> SSL.Context:
    """An OpenSSL DTLS context as GStreamer's webrtcbin makes its own (module docstring)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    cert = self_signed(key, "webrtcbin", datetime.timedelta(days=30))
    context = SSL.Context(SSL.DTLS_METHOD)
    context.use_certificate(cert)
    context.use_privatekey(key)
    context.set_cipher_list(GSTREAMER_CIPHERS)
    context.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, lambda *_: True)
    context.set_tlsext_use_srtp(b"SRTP_AES128_CM_SHA1_80:SRTP_AES128_CM_SHA1_32")
    return context


def pending(connection: SSL.Connection) -> list[bytes]:
    """The datagrams ``connection`` has written to its memory BIO."""
    out = []
    while True:
        try:
            out.append(connection.bio_read(65536))
        except SSL.WantReadError:
            return out


def handshake(client: SSL.Connection, server: SSL.Connection) -> None:
    """Run a DTLS handshake between two memory-BIO connections; OpenSSL's error if it fails."""
    client.set_connect_state()
    server.set_accept_state()
    for _ in range(MAX_FLIGHTS):
        for side in (client, server):
            with contextlib.suppress(SSL.WantReadError):
                side.do_handshake()
        moved = False
        for source, sink in ((client, server), (server, client)):
            for datagram in pending(source):
                sink.bio_write(datagram)
                moved = True
        if not moved:
            break
    for side in (client, server):
        side.do_handshake()  # both done: returns; one stuck: raises


def our_context() -> SSL.Context:
    return SharedCertificate.generateCertificate()._create_ssl_context(SRTP_PROFILES)


def dtls12_suites(context: SSL.Context) -> list[str]:
    """The context's suites a DTLS 1.2 ClientHello carries (OpenSSL also lists TLS 1.3's,
    which DTLS 1.2 leaves out)."""
    return [c for c in SSL.Connection(context).get_cipher_list() if not c.startswith("TLS_")]


def test_the_context_offers_ecdsa_and_rsa_suites_strongest_first() -> None:
    suites = dtls12_suites(our_context())
    assert suites == list(DTLS_CIPHERS)
    assert MANDATORY in suites
    assert {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384"} <= set(suites)
    assert all(s.startswith("ECDHE-") for s in suites), "ephemeral keys only"
    aead = [i for i, s in enumerate(suites) if "GCM" in s or "CHACHA20" in s]
    assert aead == list(range(len(aead))), "AEAD suites before the CBC ones"
    assert suites.index("ECDHE-ECDSA-AES256-GCM-SHA384") < suites.index(MANDATORY)


def test_the_client_hello_fits_one_unfragmented_record() -> None:
    """Mbed TLS cannot reassemble a fragmented ClientHello (aiortc PR #1011)."""
    client = SSL.Connection(our_context())
    client.set_connect_state()
    with pytest.raises(SSL.WantReadError):
        client.do_handshake()
    (datagram,) = pending(client)
    (length,) = struct.unpack("!H", datagram[11:13])
    assert len(datagram) == 13 + length, "one record"
    body = datagram[13:]
    message_length = int.from_bytes(body[1:4], "big")
    fragment_offset, fragment_length = (int.from_bytes(body[i : i + 3], "big") for i in (6, 9))
    assert (fragment_offset, fragment_length) == (0, message_length), "not fragmented"


def test_our_own_certificate_stays_ecdsa_p256() -> None:
    certificate = SharedCertificate.generateCertificate()
    connection = SSL.Connection(certificate._create_ssl_context(SRTP_PROFILES))
    public = connection.get_certificate(as_cryptography=True).public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert isinstance(public.curve, ec.SECP256R1)


@pytest.mark.parametrize(
    ("our_role", "suite"),
    [
        # The peer (an OpenSSL server, client's order) takes our strongest suite for its key.
        ("client", "ECDHE-RSA-AES256-GCM-SHA384"),
        # We pick, in our order, among the suites our ECDSA key can sign.
        ("server", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ],
)
def test_a_handshake_with_an_rsa_peer_completes_in_either_role(our_role: str, suite: str) -> None:
    ours = SSL.Connection(our_context())
    peer = SSL.Connection(rsa_peer_context())
    handshake(*((ours, peer) if our_role == "client" else (peer, ours)))
    assert ours.get_protocol_version_name() == "DTLSv1.2"
    assert ours.get_cipher_name() == peer.get_cipher_name() == suite
    assert ours.get_selected_srtp_profile() == peer.get_selected_srtp_profile()
    assert ours.get_selected_srtp_profile() == b"SRTP_AES128_CM_SHA1_80"
    # What aiortc then does: the same SRTP keys both sides, the peer's certificate to check.
    keys = ours.export_keying_material(SRTP_EXPORTER, 60)
    assert keys == peer.export_keying_material(SRTP_EXPORTER, 60)
    seen = ours.get_peer_certificate(as_cryptography=True)
    assert seen == peer.get_certificate(as_cryptography=True)
    assert isinstance(seen.public_key(), rsa.RSAPublicKey)
    assert seen.public_key().key_size == 2048


def test_aiortc_s_own_context_finds_no_shared_cipher_with_an_rsa_server() -> None:
    """Why ``DTLS_CIPHERS`` exists: the failure GStreamer's webrtcbin reported (issue 25). An
    aiortc whose own list has RSA suites fails this test: ours may then be dropped."""
    stock = RTCCertificate.generateCertificate()
    ours = SSL.Connection(RTCCertificate._create_ssl_context(stock, SRTP_PROFILES))
    with pytest.raises(SSL.Error, match="no shared cipher"):
        handshake(ours, SSL.Connection(rsa_peer_context()))
