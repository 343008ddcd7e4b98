"""Which SSRCs of a call may reach its SRTP session: the caller's own, latched, and no others.

libsrtp (through pylibsrtp) clones a stream for every SSRC that authenticates and keeps the
clones in a list it scans on every packet, and aiortc's receiver keeps statistics for every
SSRC (745-773 bytes each) and writes one report block per SSRC into each receiver report: a
caller that protected packets with 15,000 SSRCs of its own made every later packet cost 2-3x,
and past 255 SSRCs aiortc's RTCP task died on a ``struct.error`` (issue 21, item 4). A call
needs one audio SSRC (a few to survive a legitimate change of source), so the latch holds at
most ``MAX_SSRCS_PER_CALL``: the offer's ``a=ssrc`` values first, then each SSRC whose packet
authenticated while there was room. Anything else is refused on the SSRC read in clear (RTP
bytes 8..12, RTCP's sender SSRC bytes 4..8), before libsrtp sees it.

Sans-I/O: numbers in, decisions out (``transceiver.call.inbound`` puts it in front of the SRTP
session). Filled by the caller only (its authenticated packets; the offer it sent); bound:
``max_ssrcs``; when full: every other SSRC is refused, counted by the caller of ``admits``.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_SSRCS_PER_CALL = 4  # the offer's SSRC (and its RTX), and room for a change of source


class SsrcLatch:
    """The SSRCs a call admits to SRTP unprotect; at most ``max_ssrcs``, never forgotten."""

    __slots__ = ("latched", "max_ssrcs", "refused")

    def __init__(self, expected: Iterable[int] = (), max_ssrcs: int = MAX_SSRCS_PER_CALL) -> None:
        if max_ssrcs < 1:
            raise ValueError("max_ssrcs must be at least 1")
        self.max_ssrcs = max_ssrcs
        self.latched: set[int] = set()
        self.refused = 0  # SSRCs refused (packets, not distinct SSRCs)
        for ssrc in expected:
            self.authenticated(ssrc)

    def admits(self, ssrc: int) -> bool:
        """May a packet of ``ssrc`` be unprotected? A latched one, or any while there is room
        (it is latched only once its packet authenticated: junk never takes a place)."""
        if ssrc in self.latched or len(self.latched) < self.max_ssrcs:
            return True
        self.refused += 1
        return False

    def authenticated(self, ssrc: int) -> None:
        """A packet of ``ssrc`` passed SRTP authentication (or the offer named it): latch it
        while there is room."""
        if len(self.latched) < self.max_ssrcs:
            self.latched.add(ssrc)


def offered_ssrcs(
    offer_sdp: str, kind: str = "audio", limit: int = MAX_SSRCS_PER_CALL
) -> list[int]:
    """The first ``limit`` distinct ``a=ssrc`` ids of the offer's first ``kind`` m-section.

    Only that section is read (RFC 8866 5.14: an m= line starts a section); a value that is not
    a 32-bit number is skipped (aiortc's parser has refused such an offer before this runs).
    """
    ssrcs: list[int] = []
    inside = False
    for line in offer_sdp.splitlines():
        if line.startswith("m="):
            if inside:
                break
            inside = line.startswith(f"m={kind} ")
        elif inside and line.startswith("a=ssrc:"):
            value = line[7:].split(" ", 1)[0]
            if value.isdigit() and int(value) < 2**32 and int(value) not in ssrcs:
                ssrcs.append(int(value))
                if len(ssrcs) == limit:
                    break
    return ssrcs
