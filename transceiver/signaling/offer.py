"""Checks a WHIP offer before any WebRTC state is created, with a precise reason for each refusal.

Sans-I/O: text in, a cleaned offer or an ``OfferError`` (HTTP status + reason + label) out.
The offer's ICE candidates are removed here: the transceiver never uses them (clients are learned
through the relay), and aiortc would otherwise start resolving mDNS names on the local network.

Before aiortc parses anything, one linear pass over the lines bounds what the parse (and the
answer built from it) may cost (``OfferLimits``): aiortc's parse and ``setRemoteDescription`` run
on the event loop, and an offer of 64 KiB with ~900 codec lines took 750 ms of it (every call's
audio waited), 210 video m-lines 516 ms, 2,574 ``a=ssrc`` lines 274 ms (issue 21). The limits sit
well above what browsers offer: Chrome's video m-line, the largest, has ~27 payload types, so
~27 ``a=rtpmap`` and ~25 ``a=fmtp`` lines and ~130 lines in all; its audio m-line ~40 lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiortc import sdp

# What a refused offer is counted as (rtcedge_transceiver_offers_refused_total{reason}).
OFFER_REFUSAL_REASONS: tuple[str, ...] = (
    "too_large",  # the body is over --max-sdp-bytes (413, by the HTTP layer)
    "not_utf8",
    "m_lines",
    "rtpmap_lines",
    "fmtp_lines",
    "section_lines",
    "lines",
    "invalid",  # anything aiortc or the checks after it refuse
)


class OfferError(ValueError):
    """An offer refused: ``status`` and ``reason`` are answered, ``label`` (one of
    OFFER_REFUSAL_REASONS) counted."""

    def __init__(self, status: int, reason: str, label: str = "invalid") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.label = label


@dataclass(frozen=True)
class OfferLimits:
    """What an offer may hold before it is parsed (candidate lines, dropped unparsed, do not
    count). A bundle of audio, data channel and perhaps video needs 3 m-lines."""

    max_m_lines: int = 4
    max_rtpmap_per_m_line: int = 32
    max_fmtp_per_m_line: int = 32
    max_lines_per_m_line: int = 200
    max_lines: int = 500


SUPPORTED_AUDIO = "opus"
DROPPED = ("a=candidate:", "a=end-of-candidates")


def bounded_lines(text: str, limits: OfferLimits = OfferLimits()) -> list[str]:
    """The offer's lines without candidates, or OfferError(400) naming the first limit it is
    over. One pass, plain string tests (no regular expression to backtrack), stopping at the
    first line over a limit: its cost is linear in the body, which the HTTP layer bounds."""
    lines: list[str] = []
    m_lines = rtpmaps = fmtps = in_section = 0
    for line in text.split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        if not line or line.startswith(DROPPED):
            continue
        if line.startswith("m="):
            m_lines += 1
            if m_lines > limits.max_m_lines:
                raise OfferError(
                    400, f"the offer has more than {limits.max_m_lines} m-lines", "m_lines"
                )
            rtpmaps = fmtps = in_section = 0
        elif line.startswith("a=rtpmap:"):
            rtpmaps += 1
            if rtpmaps > limits.max_rtpmap_per_m_line:
                raise OfferError(
                    400,
                    f"an m-line has more than {limits.max_rtpmap_per_m_line} a=rtpmap lines",
                    "rtpmap_lines",
                )
        elif line.startswith("a=fmtp:"):
            fmtps += 1
            if fmtps > limits.max_fmtp_per_m_line:
                raise OfferError(
                    400,
                    f"an m-line has more than {limits.max_fmtp_per_m_line} a=fmtp lines",
                    "fmtp_lines",
                )
        if m_lines:
            in_section += 1
            if in_section > limits.max_lines_per_m_line:
                raise OfferError(
                    400,
                    f"an m-line has more than {limits.max_lines_per_m_line} lines",
                    "section_lines",
                )
        lines.append(line)
        if len(lines) > limits.max_lines:
            raise OfferError(400, f"the offer has more than {limits.max_lines} lines", "lines")
    return lines


def check_offer(text: str, limits: OfferLimits = OfferLimits()) -> str:
    """The offer without candidate lines, or OfferError(400, reason)."""
    if not text.startswith("v=0"):
        raise OfferError(400, "malformed SDP: must start with v=0")
    cleaned = "\r\n".join(bounded_lines(text, limits)) + "\r\n"
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
