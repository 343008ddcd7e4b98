"""One DTLS certificate per transceiver process, rotated, instead of aiortc's one per call.

aiortc gives every ``RTCPeerConnection`` a new EC P-256 key pair and self-signed certificate,
and every DTLS transport a new OpenSSL context built from it; the fingerprints in every answer
are hashed again each time. A transceiver has one DTLS identity instead, as most SFUs do:

- ``SharedCertificate`` (``transceiver.call.seam``) is an aiortc ``RTCCertificate`` whose
  fingerprints and ``SSL.Context`` are computed once; the context is aiortc's (same SRTP
  profiles, no session tickets) with OpenSSL's session cache off, so no DTLS session of one call
  can be resumed in another: every handshake is a full one, verified against its own answer's
  fingerprint. Its cipher suites add ECDHE-RSA ones to aiortc's ECDHE-ECDSA list, for peers
  whose certificate is RSA (``seam.peer.DTLS_CIPHERS``); our own key stays EC P-256.
- ``CertificateHolder`` makes a new one every ``lifetime_s`` (a day by default): sessions created
  after that use the new one; a running session keeps the one it answered with (its peer
  connection holds it).
- ``transceiver.call.seam.use_certificate`` gives one to a peer connection before its offer is
  applied (aiortc creates the DTLS transport then): one private attribute, no global patch.

The security consequence (docs/security.md): the fingerprint, in every answer and in the clear
in every DTLS 1.2 handshake, links the calls one process answered while a certificate lasts.
Keys are still not shared between calls: DTLS's key exchange is ephemeral (ECDHE), the
certificate only signs it.
"""

from __future__ import annotations

from transceiver.call.seam import SharedCertificate

DEFAULT_LIFETIME_S = 24 * 3600.0
# aiortc's own certificates are valid from a day before to 30 days after their creation, and
# WebRTC checks fingerprints, not dates; a rotation well within that keeps them valid anyway.
MAX_LIFETIME_S = 7 * 24 * 3600.0


class CertificateHolder:
    """The process's current certificate, replaced every ``lifetime_s`` (sans-I/O: ``now`` is
    passed in; the server passes ``time.monotonic()``). The first one is made at construction,
    not in a call's answer."""

    def __init__(self, now: float, lifetime_s: float = DEFAULT_LIFETIME_S) -> None:
        if not 0 < lifetime_s <= MAX_LIFETIME_S:
            raise ValueError(f"certificate lifetime must be in (0, {MAX_LIFETIME_S:.0f}] s")
        self.lifetime_s = lifetime_s
        self.rotations = 0
        self._current = SharedCertificate.generateCertificate()
        self._since = now

    def current(self, now: float) -> SharedCertificate:
        """The certificate for a session created at ``now``: a new one once the current one is
        ``lifetime_s`` old (or ``now`` is before it was made: a clock that went back)."""
        if not 0 <= now - self._since < self.lifetime_s:
            self._current = SharedCertificate.generateCertificate()
            self._since = now
            self.rotations += 1
        return self._current
