"""aiortc's peer connection and certificate, where the transceiver reaches inside them.

``SharedCertificate`` is an ``RTCCertificate`` whose fingerprints and OpenSSL context are made
once for many DTLS transports (why: ``transceiver.call.certificate``); ``peer_connection`` makes
a peer connection with it from the start, ``use_certificate`` gives it to one;
``track_connect`` keeps the task aiortc starts to connect one. What each touches, and why: the
table of ``transceiver.call.seam``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from aiortc import RTCCertificate, RTCConfiguration, RTCDtlsFingerprint, RTCPeerConnection
from OpenSSL import SSL

CERTIFICATES = "_RTCPeerConnection__certificates"  # set in RTCPeerConnection.__init__
# The name RTCPeerConnection.__init__ reads, in its own module, to make a certificate.
CERTIFICATE_NAME = "RTCCertificate"
CONNECT = "_RTCPeerConnection__connect"  # the coroutine setLocalDescription starts
CONNECT_QUALNAME = "RTCPeerConnection.__connect"

# The DTLS 1.2 cipher suites, strongest first (256-bit keys before 128, AEAD before CBC; at each
# strength the ECDSA suite before the RSA one), as OpenSSL names them. aiortc offers only
# ECDHE-ECDSA suites, which suits our own ECDSA P-256 certificate but leaves a peer with an RSA
# certificate no suite to pick when it is the DTLS server (GStreamer's webrtcbin: OpenSSL's
# "no shared cipher", aiortc PR #1392). The suite's signature is the *server's*: as the
# server we can only pick an ECDSA suite (our key), as the client we must offer the RSA ones
# too. ECDHE-ECDSA-AES128-GCM-SHA256 is RFC 8827 6.5's mandatory one; aiortc's two CBC suites
# stay last for the peers that knew nothing else. No static-RSA or DHE suites: ECDHE only, so
# every call's keys stay ephemeral. Eight suites keep the ClientHello short (152 bytes, one
# unfragmented record; aiortc PR #1011: Mbed TLS cannot reassemble a fragmented one).
DTLS_CIPHERS = (
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-ECDSA-AES128-SHA",
)


class SharedCertificate(RTCCertificate):
    """An ``RTCCertificate`` for many DTLS transports: fingerprints and SSL context made once.

    The context is aiortc's (same SRTP profiles, no session tickets) with OpenSSL's session
    cache off, so no DTLS session of one call can be resumed in another, and ``DTLS_CIPHERS``
    in our order whichever side is the server, so that peers with RSA certificates connect."""

    def __init__(self, key: Any, cert: Any) -> None:
        super().__init__(key, cert)
        self._fingerprints = super().getFingerprints()
        # One context per SRTP profile list: aiortc passes its one constant list, so one entry.
        self._contexts: dict[tuple[bytes, ...], SSL.Context] = {}

    def getFingerprints(self) -> list[RTCDtlsFingerprint]:
        return list(self._fingerprints)

    def _create_ssl_context(self, srtp_profiles: list[Any]) -> SSL.Context:
        profiles = tuple(p.openssl_profile for p in srtp_profiles)
        context = self._contexts.get(profiles)
        if context is None:
            context = super()._create_ssl_context(srtp_profiles)
            context.set_session_cache_mode(SSL.SESS_CACHE_OFF)
            context.set_cipher_list(":".join(DTLS_CIPHERS).encode())
            # As the server, pick by our order, not the client's: the strongest first there too.
            context.set_options(SSL.OP_CIPHER_SERVER_PREFERENCE)
            self._contexts[profiles] = context
        return context


class _Given:
    """Stands in for ``RTCCertificate`` in aiortc's peer connection module while one peer
    connection is made: its ``generateCertificate`` hands over the given certificate."""

    def __init__(self, certificate: RTCCertificate) -> None:
        self._certificate = certificate

    def generateCertificate(self) -> RTCCertificate:
        return self._certificate


def peer_connection(
    configuration: RTCConfiguration, certificate: RTCCertificate
) -> RTCPeerConnection:
    """A peer connection whose one DTLS certificate is ``certificate`` from its construction.

    ``RTCPeerConnection.__init__`` makes a new EC key pair and self-signed certificate for every
    peer connection (~0.1 ms of CPU, ~6 % of a call's answer), which ``use_certificate`` would
    only throw away. The name it reads is swapped for the length of the constructor, which never
    awaits, so no other coroutine (and no other call) can see it; it is put back whatever
    happens, and the result is checked as ``use_certificate`` checks it."""
    module = sys.modules[RTCPeerConnection.__module__]
    if getattr(module, CERTIFICATE_NAME, None) is not RTCCertificate:
        raise RuntimeError("this aiortc makes its peer connections' certificates elsewhere")
    setattr(module, CERTIFICATE_NAME, _Given(certificate))
    try:
        pc = RTCPeerConnection(configuration)
    finally:
        setattr(module, CERTIFICATE_NAME, RTCCertificate)
    if getattr(pc, CERTIFICATES, None) != [certificate]:
        raise RuntimeError("this aiortc did not take the given certificate: not verified")
    return pc


def use_certificate(pc: RTCPeerConnection, certificate: RTCCertificate) -> None:
    """Make ``certificate`` the one DTLS certificate of ``pc``. Call before
    ``setRemoteDescription``: aiortc creates the DTLS transport, with it, then."""
    if not isinstance(getattr(pc, CERTIFICATES, None), list):
        raise RuntimeError("this aiortc keeps its certificates elsewhere: not verified")
    if pc.getTransceivers() or pc.sctp is not None:
        raise RuntimeError("use_certificate() must run before the offer is applied")
    setattr(pc, CERTIFICATES, [certificate])


def track_connect(pc: RTCPeerConnection) -> Callable[[], asyncio.Task[Any] | None]:
    """A function that returns the last task aiortc started to connect ``pc`` (None: none yet);
    aiortc keeps no handle on it. Call before the offer is applied.

    aiortc starts it as ``asyncio.ensure_future(self.__connect())``; ``__connect`` is replaced
    on this instance by a function that makes the task itself, keeps it and returns it, which
    ``ensure_future`` hands back as it is. Before, the task was found by scanning every task of
    the loop for its coroutine (~0.15 ms of each answer alone, and more with every call
    connected: each holds RTCP tasks)."""
    original = getattr(pc, CONNECT, None)
    if getattr(original, "__qualname__", "") != CONNECT_QUALNAME or CONNECT in vars(pc):
        raise RuntimeError("this aiortc connects its peer connections otherwise: not verified")
    assert original is not None
    started: list[asyncio.Task[Any]] = []

    def start() -> asyncio.Task[Any]:
        task = asyncio.ensure_future(original())
        started[:] = [task]
        return task

    setattr(pc, CONNECT, start)
    return lambda: started[-1] if started else None


def check_peer() -> list[str]:
    """What aiortc's peer connection and certificate lack of what this module uses, read from
    a throwaway connection (empty: all there). Inside a running event loop."""
    missing = []
    connect = getattr(RTCPeerConnection, CONNECT, None)
    if getattr(connect, "__qualname__", "") != CONNECT_QUALNAME:
        missing.append(f"RTCPeerConnection.{CONNECT}")
    if not callable(getattr(RTCCertificate, "_create_ssl_context", None)):
        missing.append("RTCCertificate._create_ssl_context")
    module = sys.modules[RTCPeerConnection.__module__]
    if getattr(module, CERTIFICATE_NAME, None) is not RTCCertificate:
        missing.append(f"{module.__name__}.{CERTIFICATE_NAME}")
    elif not isinstance(getattr(RTCPeerConnection(), CERTIFICATES, None), list):
        missing.append(f"RTCPeerConnection.{CERTIFICATES}")
    return missing
