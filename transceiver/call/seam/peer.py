"""aiortc's peer connection and certificate, where the transceiver reaches inside them.

``SharedCertificate`` is an ``RTCCertificate`` whose fingerprints and OpenSSL context are made
once for many DTLS transports (why: ``transceiver.call.certificate``); ``use_certificate`` gives
it to a peer connection; ``connect_task_of`` finds the task aiortc starts to connect one. What
each touches, and why: the table of ``transceiver.call.seam``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiortc import RTCCertificate, RTCDtlsFingerprint, RTCPeerConnection
from OpenSSL import SSL

CERTIFICATES = "_RTCPeerConnection__certificates"  # set in RTCPeerConnection.__init__
CONNECT = "_RTCPeerConnection__connect"  # the coroutine setLocalDescription starts
CONNECT_QUALNAME = "RTCPeerConnection.__connect"


class SharedCertificate(RTCCertificate):
    """An ``RTCCertificate`` for many DTLS transports: fingerprints and SSL context made once.

    The context is aiortc's (same cipher list, same SRTP profiles, no session tickets) with
    OpenSSL's session cache off, so no DTLS session of one call can be resumed in another."""

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
            self._contexts[profiles] = context
        return context


def use_certificate(pc: RTCPeerConnection, certificate: RTCCertificate) -> None:
    """Make ``certificate`` the one DTLS certificate of ``pc``. Call before
    ``setRemoteDescription``: aiortc creates the DTLS transport, with it, then."""
    if not isinstance(getattr(pc, CERTIFICATES, None), list):
        raise RuntimeError("this aiortc keeps its certificates elsewhere: not verified")
    if pc.getTransceivers() or pc.sctp is not None:
        raise RuntimeError("use_certificate() must run before the offer is applied")
    setattr(pc, CERTIFICATES, [certificate])


def connect_task_of(pc: RTCPeerConnection) -> asyncio.Task[Any] | None:
    """The task aiortc just started to connect ``pc`` (it does not keep a handle on it)."""
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        if (
            getattr(coro, "__qualname__", "") == CONNECT_QUALNAME
            and frame is not None
            and frame.f_locals.get("self") is pc
        ):
            return task
    return None


def check_peer() -> list[str]:
    """What aiortc's peer connection and certificate lack of what this module uses, read from
    a throwaway connection (empty: all there). Inside a running event loop."""
    missing = []
    connect = getattr(RTCPeerConnection, CONNECT, None)
    if getattr(connect, "__qualname__", "") != CONNECT_QUALNAME:
        missing.append(f"RTCPeerConnection.{CONNECT}")
    if not callable(getattr(RTCCertificate, "_create_ssl_context", None)):
        missing.append("RTCCertificate._create_ssl_context")
    if not isinstance(getattr(RTCPeerConnection(), CERTIFICATES, None), list):
        missing.append(f"RTCPeerConnection.{CERTIFICATES}")
    return missing
