"""What a call answers to each m-line of an offer: audio and the data channel on the one BUNDLE
transport, every other m-line answered here, without aiortc: inactive on that transport when
the offer bundles it, rejected (port 0) when it does not.

An offer without a BUNDLE group (GStreamer webrtcbin's stock offer, bundle-policy ``none``: an
ICE ufrag and password of its own in every m-line) is answered on one transport too: its audio
m-line's. Every other m-line, the data channel included, is rejected (port 0, RFC 8829 5.3.1):
the call is audio-only. One transport per call because the relay routes a flow by the one
ufrag the call's hint is (a second would need its own hint, ICE agent and DTLS handshake: twice
the set-up cost of a call, for a data channel).

Why not let aiortc answer them: aiortc answers only what it can negotiate. A video m-line whose
codecs it does not know (VP9 or AV1 only, as an app that sets its codec preferences offers)
made ``setRemoteDescription`` raise, a 500; an m-line the offer left out of its BUNDLE group
aiortc bundles anyway and names in its answer's group, which an answerer may not do (RFC 8843
7.3.1); and each video m-line it answered was a receiver nobody reads (aiortc queued decoded
frames without bound: one 720p camera grew a transceiver by ~22 MB/s until the kernel killed
every call on the pod). Browsers in video apps offer a camera by default; they must get an
audio-only call.

So aiortc is given the offer's audio m-line and its first data channel m-line only
(``BundledOffer.peer_offer``), each carrying the transport the offerer tagged: the m-line named
first in the BUNDLE group is the one whose ICE credentials and DTLS fingerprint and setup the
whole group uses (RFC 8843 7.2.1), so they are copied into both, and its BUNDLE group names the
two. The caller's answer (``BundledOffer.answer``) then has every offered m-line back, in the
offer's order (RFC 3264 6):

- aiortc's sections, each with the same transport lines (its first section's: candidates,
  ice-ufrag, ice-pwd, fingerprint, setup), as every section of a BUNDLE group must agree;
- an audio or video m-line of the offer's BUNDLE group that aiortc did not get: ``a=inactive``
  on that transport (the same port, address and transport lines), with one of the formats the
  offer listed (an answer lists a subset of them, RFC 3264 6.1) and its codec lines;
- any other m-line (outside the BUNDLE group, a second data channel, a kind we do not carry):
  rejected, port 0, left out of the answer's BUNDLE group (RFC 8843 7.3.3, RFC 8829 5.3.1).
  It keeps the ICE and DTLS lines (no candidates) and a=rtcp-mux for parsers that want them in
  every section (aiortc's own).

No receiver exists for what aiortc was not given: RTP a client sends for it anyway is dropped
by its payload type before SRTP (``transceiver.call.inbound.direct_rtp``, counted as
``not_audio``).

Sans-I/O: SDP text in, SDP text out. The offer was checked before
(``transceiver.signaling.offer``: one audio m-line, in the BUNDLE group when there is one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The transport of a section that BUNDLE makes one for the group (RFC 8859: TRANSPORT category).
TRANSPORT = ("a=ice-ufrag:", "a=ice-pwd:", "a=ice-options:", "a=fingerprint:", "a=setup:")
CANDIDATES = ("a=candidate:", "a=end-of-candidates")
PEER_KINDS = ("audio", "application")  # what aiortc answers: the call's audio, its data channel
RTP_KINDS = ("audio", "video")  # what an inactive m-line can be
BUNDLE_GROUP = "a=group:BUNDLE"
# Not a codec of their own: an inactive m-line's one format is a real codec when there is one.
NOT_CODECS = frozenset({"rtx", "red", "ulpfec", "flexfec-03"})
REJECTED_ADDRESS = "c=IN IP4 0.0.0.0"


@dataclass(frozen=True)
class Section:
    """One m-line and the lines up to the next: its ``m=`` line first."""

    lines: tuple[str, ...]

    @property
    def kind(self) -> str:
        return self.lines[0][2:].split(" ", 1)[0]

    @property
    def port(self) -> str:
        return self._fields[1]

    @property
    def proto(self) -> str:
        return self._fields[2]

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self._fields[3:])

    @property
    def _fields(self) -> list[str]:
        fields = self.lines[0][2:].split()
        if len(fields) < 4:
            raise ValueError(f"malformed m-line {self.lines[0]!r}")
        return fields

    @property
    def mid(self) -> str | None:
        return self.value("a=mid:")

    def value(self, prefix: str) -> str | None:
        """The rest of the first line that starts with ``prefix``, or None."""
        return next((line[len(prefix) :] for line in self.lines if line.startswith(prefix)), None)

    def starting(self, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(line for line in self.lines if line.startswith(prefixes))

    def with_transport(self, transport: Sequence[str]) -> Section:
        """This section with ``transport`` in place of its own transport and candidate lines
        (where the first of them was; at the end when it had none)."""
        own = TRANSPORT + CANDIDATES
        kept = [line for line in self.lines if not line.startswith(own)]
        at = next((i for i, line in enumerate(self.lines) if line.startswith(own)), None)
        if at is None:
            return Section((*kept, *transport))
        return Section((*kept[:at], *transport, *kept[at:]))


def split(sdp: str) -> tuple[tuple[str, ...], list[Section]]:
    """An SDP's session lines and its sections (RFC 8866 5.14: an ``m=`` line starts one)."""
    session: list[str] = []
    sections: list[list[str]] = []
    for line in sdp.replace("\r\n", "\n").split("\n"):
        if not line:
            continue
        if line.startswith("m="):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
        else:
            session.append(line)
    return tuple(session), [Section(tuple(lines)) for lines in sections]


def join(session: Iterable[str], sections: Iterable[Section]) -> str:
    lines = [*session, *(line for section in sections for line in section.lines)]
    return "\r\n".join(lines) + "\r\n"


def bundle_group(session: Sequence[str]) -> tuple[str, ...]:
    """The mids of the first BUNDLE group (RFC 8843: a=group:BUNDLE, the tag first)."""
    line = next((line for line in session if line.startswith(BUNDLE_GROUP + " ")), None)
    return tuple(line[len(BUNDLE_GROUP) :].split()) if line else ()


def with_group(session: Sequence[str], mids: Sequence[str]) -> tuple[str, ...]:
    """``session`` with one BUNDLE group of ``mids`` where its first was (any other dropped)."""
    out: list[str] = []
    placed = False
    for line in session:
        if line.startswith(BUNDLE_GROUP + " ") or line == BUNDLE_GROUP:
            if not placed and mids:
                out.append(" ".join((BUNDLE_GROUP, *mids)))
            placed = True
        else:
            out.append(line)
    if not placed and mids:
        timing = next((i for i, line in enumerate(out) if line.startswith("t=")), len(out) - 1)
        out.insert(timing + 1, " ".join((BUNDLE_GROUP, *mids)))
    return tuple(out)


def payload_types(sdp: str, kind: str = "audio") -> frozenset[int]:
    """The payload types the first ``kind`` m-line of ``sdp`` lists (for an answer: what the
    caller may send on it)."""
    _, sections = split(sdp)
    section = next((s for s in sections if s.kind == kind), None)
    if section is None:
        return frozenset()
    return frozenset(int(f) for f in section.formats if f.isdigit() and int(f) < 128)


@dataclass(frozen=True)
class BundledOffer:
    """An offer as the call answers it: which m-lines aiortc answers, which are answered here."""

    session: tuple[str, ...]
    sections: tuple[Section, ...]
    group: tuple[str, ...]  # the offer's BUNDLE group, its tag first
    peer: tuple[int, ...]  # the sections aiortc answers (indexes, in the offer's order)

    @classmethod
    def read(cls, offer: str) -> BundledOffer:
        """Raises ValueError when the offer's audio m-line is not in its BUNDLE group, or it
        has none (which ``transceiver.signaling.offer`` refuses before)."""
        session, sections = split(offer)
        group = bundle_group(session)
        if not group:  # no BUNDLE: aiortc gets the first audio m-line alone (``unbundled``)
            audio = next((i for i, s in enumerate(sections) if s.kind == "audio"), None)
            if audio is None:
                raise ValueError("the offer has no audio m-line")
            return cls(session, tuple(sections), group, (audio,))
        peer: list[int] = []
        for kind in PEER_KINDS:
            index = next(
                (i for i, s in enumerate(sections) if s.kind == kind and s.mid in group), None
            )
            if index is not None:
                peer.append(index)
            elif kind == "audio":
                raise ValueError("the offer's BUNDLE group has no audio m-line")
        return cls(session, tuple(sections), group, tuple(sorted(peer)))

    @property
    def unbundled(self) -> bool:
        """The offer has no BUNDLE group: each m-line would be a transport of its own; the call
        takes its audio m-line's and rejects the others."""
        return not self.group

    @property
    def tag(self) -> Section:
        """The section whose transport the call takes: without BUNDLE, the audio m-line;
        else the one the offerer tagged, the first of its BUNDLE group that the call answers
        on the transport (one it rejects cannot carry the group's, RFC 8843 7.3.3)."""
        if self.unbundled:
            return self.sections[self.peer[0]]
        by_mid = {s.mid: s for s in self.sections if s.kind in (*PEER_KINDS, *RTP_KINDS)}
        return next(by_mid[mid] for mid in self.group if mid in by_mid)

    def bundled(self, section: Section) -> bool:
        return section.mid is not None and section.mid in self.group

    def peer_offer(self) -> str:
        """The offer aiortc answers: its sections only, each with the tagged transport, and a
        BUNDLE group of them in the offer's group order."""
        transport = self.tag.starting(TRANSPORT)
        ours = [self.sections[i].with_transport(transport) for i in self.peer]
        mids = {s.mid for s in ours}
        return join(with_group(self.session, [m for m in self.group if m in mids]), ours)

    def answer(self, peer_answer: str) -> str:
        """The caller's answer from aiortc's answer to ``peer_offer``: every offered m-line,
        in the offer's order, on one transport. Raises ValueError when aiortc's answer does not
        match the offer it was given (its sections, by mid)."""
        session, answered = split(peer_answer)
        if [s.mid for s in answered] != [self.sections[i].mid for i in self.peer]:
            raise ValueError("aiortc's answer does not answer the m-lines it was offered")
        first = answered[0]
        transport = first.starting(CANDIDATES + TRANSPORT)
        address = next((line for line in first.lines if line.startswith("c=")), REJECTED_ADDRESS)
        from_peer = dict(zip(self.peer, answered, strict=True))
        sections: list[Section] = []
        in_group: set[str | None] = set()
        for i, offered in enumerate(self.sections):
            if i in from_peer:
                sections.append(from_peer[i].with_transport(transport))
                in_group.add(offered.mid)
            elif self.bundled(offered) and offered.kind in RTP_KINDS:
                sections.append(inactive(offered, first.port, address, transport))
                in_group.add(offered.mid)
            else:
                sections.append(rejected(offered, first.starting(TRANSPORT)))
        mids = [mid for mid in self.group if mid in in_group]
        return join(with_group(session, mids), sections)


def inactive(offered: Section, port: str, address: str, transport: Sequence[str]) -> Section:
    """The answer to a bundled RTP m-line the call does not take: inactive, on the bundle's
    transport, with one of its formats (a codec rather than its RTX or FEC when it has one)."""
    fmt, codec = _one_format(offered)
    lines = (f"m={offered.kind} {port} {offered.proto} {fmt}", address)
    lines += (f"a=mid:{offered.mid}", "a=inactive", *_rtcp_mux(offered), *codec, *transport)
    return Section(lines)


def rejected(offered: Section, transport: Sequence[str]) -> Section:
    """The answer to an m-line the call rejects: port 0 (RFC 3264 6), one of its formats."""
    fmt, codec = _one_format(offered)
    lines = (f"m={offered.kind} 0 {offered.proto} {fmt}", REJECTED_ADDRESS)
    if offered.mid is not None:
        lines += (f"a=mid:{offered.mid}",)
    if offered.kind in RTP_KINDS:
        lines += ("a=inactive", *_rtcp_mux(offered), *codec)
    return Section((*lines, *transport))


def _one_format(offered: Section) -> tuple[str, tuple[str, ...]]:
    """The format an answer names for ``offered`` and its codec lines (aiortc's parser wants a
    codec even for an m-line nothing will be sent on)."""
    fmt = codec_format(offered)
    return fmt, offered.starting((f"a=rtpmap:{fmt} ", f"a=fmtp:{fmt} "))


def codec_format(section: Section) -> str:
    """The first format of ``section`` that is a codec of its own (not RTX, RED or FEC)."""
    for fmt in section.formats:
        rtpmap = section.value(f"a=rtpmap:{fmt} ")
        if rtpmap is None or rtpmap.split("/", 1)[0].lower() not in NOT_CODECS:
            return fmt
    return section.formats[0]


def _rtcp_mux(offered: Section) -> tuple[str, ...]:
    """a=rtcp-mux when the offer has it (aiortc refuses an answer's RTP m-line without it)."""
    return ("a=rtcp-mux",) if "a=rtcp-mux" in offered.lines else ()
