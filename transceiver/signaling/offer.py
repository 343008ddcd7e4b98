"""Checks a WHIP offer before any WebRTC state is created, with a precise reason for each refusal.

Sans-I/O: text in, a cleaned offer or a ``Refuse`` out (``common.verdict``: the status, the text
answered, the label counted). The offer's ICE candidates are removed here: the transceiver never
uses them (clients are learned through the relay), and aiortc would otherwise start resolving
mDNS names on the local network.

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

from common.verdict import Refuse

# A /v1/realtime/calls body refused before its offer is checked
# (transceiver.signaling.realtime_calls).
FORM_REFUSAL_REASONS: tuple[str, ...] = (
    "invalid_form",  # a multipart body without an sdp field, or not a form
    "invalid_session",  # the form's session is not one a call takes (400)
    "session_refused",  # the form's session sets what the caller policy does not allow (403)
)
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
    *FORM_REFUSAL_REASONS,
)


OFFER = "offer"  # the kind of an offer's refusal (common.verdict.Refuse)


def refused(text: str, label: str = "invalid", status: int = 400) -> Refuse:
    """An offer refused: ``text`` is answered with ``status``, ``label`` (one of
    OFFER_REFUSAL_REASONS) counted."""
    return Refuse(label, text, status, kind=OFFER)


def too_large(max_bytes: int) -> Refuse:
    """An offer over --max-sdp-bytes, declared so or read so (the HTTP layer's 413)."""
    return refused(f"offer larger than {max_bytes} bytes", "too_large", 413)


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
OPUS_CLOCK_RATE_HZ = 48000
# The kinds answered on the call's transport (the others are rejected: transceiver.call.bundle).
CARRIED_KINDS = ("audio", "video", "application")
DROPPED = ("a=candidate:", "a=end-of-candidates")


def bounded_lines(text: str, limits: OfferLimits = OfferLimits()) -> list[str] | Refuse:
    """The offer's lines without candidates, or a 400 naming the first limit it is over. One
    pass, plain string tests (no regular expression to backtrack), stopping at the first line
    over a limit: its cost is linear in the body, which the HTTP layer bounds."""
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
                return refused(f"the offer has more than {limits.max_m_lines} m-lines", "m_lines")
            rtpmaps = fmtps = in_section = 0
        elif line.startswith("a=rtpmap:"):
            rtpmaps += 1
            if rtpmaps > limits.max_rtpmap_per_m_line:
                return refused(
                    f"an m-line has more than {limits.max_rtpmap_per_m_line} a=rtpmap lines",
                    "rtpmap_lines",
                )
        elif line.startswith("a=fmtp:"):
            fmtps += 1
            if fmtps > limits.max_fmtp_per_m_line:
                return refused(
                    f"an m-line has more than {limits.max_fmtp_per_m_line} a=fmtp lines",
                    "fmtp_lines",
                )
        if m_lines:
            in_section += 1
            if in_section > limits.max_lines_per_m_line:
                return refused(
                    f"an m-line has more than {limits.max_lines_per_m_line} lines",
                    "section_lines",
                )
        lines.append(line)
        if len(lines) > limits.max_lines:
            return refused(f"the offer has more than {limits.max_lines} lines", "lines")
    return lines


def read_offer(body: bytes, limits: OfferLimits = OfferLimits()) -> str | Refuse:
    """A POST's body as a checked offer (``check_offer``), or why not (not UTF-8 first)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return refused("malformed SDP: not UTF-8", "not_utf8")
    return check_offer(text, limits)


def check_offer(text: str, limits: OfferLimits = OfferLimits()) -> str | Refuse:
    """The offer without candidate lines, or why it is refused (400): its first line, its
    limits, aiortc's parse, then what it must hold (``_missing``)."""
    if not text.startswith("v=0"):
        return refused("malformed SDP: must start with v=0")
    lines = bounded_lines(text, limits)
    if isinstance(lines, Refuse):
        return lines
    cleaned = "\r\n".join(lines) + "\r\n"
    try:
        parsed = sdp.SessionDescription.parse(cleaned)
    except Exception as exc:  # aiortc raises ValueError, KeyError, IndexError... on bad SDP
        return refused(f"malformed SDP: {type(exc).__name__}: {exc}")
    missing = _missing(parsed)
    return cleaned if missing is None else refused(missing)


def _missing(parsed: sdp.SessionDescription) -> str | None:
    """What a parsed offer lacks, the first of: one audio m-line, unique mids, the audio
    m-line in the BUNDLE group when there is one, ICE credentials and a DTLS fingerprint on
    every audio, video and data m-line of the call's transport, opus (at 48 kHz).

    The call's transport is the BUNDLE group's, or, in an offer without one (GStreamer
    webrtcbin's stock offer), the audio m-line's. Other m-lines (video or a data channel off
    that transport, a kind we do not carry) are not refused: the call answers them without
    aiortc, inactive in the group or rejected (``transceiver.call.bundle``).
    """
    audio = [m for m in parsed.media if m.kind == "audio"]
    if not audio:
        return "the offer has no audio m-line"
    if len(audio) > 1:
        return "the offer has more than one audio m-line"
    bundle = next((g for g in parsed.group if g.semantic == "BUNDLE" and g.items), None)
    grouped = set(bundle.items) if bundle is not None else set()
    return (
        _duplicate_mid(parsed)
        or _audio_outside(audio[0], grouped)
        or _carried_lacks(parsed, audio[0], grouped)
        or _audio_lacks(audio[0])
    )


def _duplicate_mid(parsed: sdp.SessionDescription) -> str | None:
    mids = [m.rtp.muxId for m in parsed.media if m.rtp.muxId]
    duplicate = next((mid for i, mid in enumerate(mids) if mid in mids[:i]), None)
    return None if duplicate is None else f"the offer has two m-lines with a=mid:{duplicate}"


def _audio_outside(audio: sdp.MediaDescription, grouped: set[str]) -> str | None:
    """A BUNDLE group is the call's one transport: the audio m-line must be in it (an offer
    without one is answered on the audio m-line's own transport)."""
    if not grouped or audio.rtp.muxId in grouped:
        return None
    return "the audio m-line must be in the BUNDLE group (a=group:BUNDLE ...), or offer none"


def _carried_lacks(
    parsed: sdp.SessionDescription, audio: sdp.MediaDescription, grouped: set[str]
) -> str | None:
    """What the first m-line the call's transport carries lacks (``_section_lacks``)."""
    carried = (
        (m for m in parsed.media if m.kind in CARRIED_KINDS and m.rtp.muxId in grouped)
        if grouped
        else iter((audio,))
    )
    return next(filter(None, map(_section_lacks, carried)), None)


def _audio_lacks(audio: sdp.MediaDescription) -> str | None:
    """What the audio m-line lacks: opus, at 48 kHz (RFC 7587 7: whatever rate it codes at,
    opus is signalled as opus/48000/2; aiortc matches the clock rate and would fail the call
    on its own, a 500)."""
    opus = [c for c in audio.rtp.codecs if c.mimeType.lower() == f"audio/{SUPPORTED_AUDIO}"]
    if not opus:
        codecs = sorted({c.mimeType.split("/")[-1].lower() for c in audio.rtp.codecs})
        return f"unsupported audio codecs {codecs}: opus is required"
    if not any(c.clockRate == OPUS_CLOCK_RATE_HZ for c in opus):
        return "opus must be offered as opus/48000/2 (RFC 7587)"
    return None


def _section_lacks(media: sdp.MediaDescription) -> str | None:
    """What one bundled m-line lacks: ICE credentials, a DTLS fingerprint."""
    name = media.rtp.muxId or media.kind
    if not media.ice.usernameFragment or not media.ice.password:
        return f"m-line {name} lacks ice-ufrag/ice-pwd"
    if not media.dtls or not media.dtls.fingerprints:
        return f"m-line {name} lacks a DTLS fingerprint"
    return None
