"""Checks a WHIP offer before any WebRTC state is created, with a precise reason for each refusal.

Sans-I/O: text in, a cleaned offer or an ``OfferError`` (HTTP status + reason) out. The offer's
ICE candidates are removed here: the transceiver never uses them (clients are learned through the
relay), and aiortc would otherwise start resolving mDNS names on the local network.
"""

from __future__ import annotations

from aiortc import sdp


class OfferError(ValueError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


SUPPORTED_AUDIO = "opus"


def check_offer(text: str) -> str:
    """The offer without candidate lines, or OfferError(400, reason)."""
    if not text.startswith("v=0"):
        raise OfferError(400, "malformed SDP: must start with v=0")
    lines = [
        line
        for line in text.replace("\r\n", "\n").split("\n")
        if line and not line.startswith(("a=candidate:", "a=end-of-candidates"))
    ]
    cleaned = "\r\n".join(lines) + "\r\n"
    try:
        parsed = sdp.SessionDescription.parse(cleaned)
    except Exception as exc:  # aiortc raises ValueError, KeyError, IndexError... on bad SDP
        raise OfferError(400, f"malformed SDP: {type(exc).__name__}: {exc}") from None
    audio = [m for m in parsed.media if m.kind == "audio"]
    if not audio:
        raise OfferError(400, "the offer has no audio m-line")
    if len(audio) > 1:
        raise OfferError(400, "the offer has more than one audio m-line")
    for media in parsed.media:
        if media.kind not in ("audio", "video", "application"):
            raise OfferError(400, f"unsupported m-line kind {media.kind!r}")
        if not media.ice.usernameFragment or not media.ice.password:
            raise OfferError(400, f"m-line {media.rtp.muxId or media.kind} lacks ice-ufrag/ice-pwd")
        if not media.dtls or not media.dtls.fingerprints:
            raise OfferError(
                400, f"m-line {media.rtp.muxId or media.kind} lacks a DTLS fingerprint"
            )
    codecs = {c.mimeType.split("/")[-1].lower() for c in audio[0].rtp.codecs}
    if SUPPORTED_AUDIO not in codecs:
        raise OfferError(400, f"unsupported audio codecs {sorted(codecs)}: opus is required")
    bundle = next((g for g in parsed.group if g.semantic == "BUNDLE"), None)
    mids = [m.rtp.muxId for m in parsed.media]
    if bundle is None or not set(mids) <= set(bundle.items):
        raise OfferError(400, "BUNDLE is required: group every m-line (a=group:BUNDLE ...)")
    return cleaned
