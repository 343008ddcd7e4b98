"""Offers bounded before aiortc parses them (transceiver.signaling.offer.OfferLimits; issue 21,
item 5).

Pure: each limit at its bound is accepted and one line over it refused, naming the limit.
Through the WHIP server (in-process, real loopback HTTP): the audit's pathological offers
(bench.offer_abuse) are refused 400/413 with the limit named, counted by reason, no session
made, and a normal offer still makes one.
"""

from __future__ import annotations

import aiohttp

from bench.offer_abuse import SDP_HEADERS, normal_offer, pathological_offers
from common.verdict import Refuse
from tests.support.inprocess import direct_config, running
from tests.support.waits import run
from tests.transceiver.test_offer import APPLICATION, SESSION, accepted, audio, sdp
from transceiver.signaling.offer import OfferLimits, bounded_lines, check_offer

LIMITS = OfferLimits()


def refusal(text: str) -> Refuse:
    refused = check_offer(text)
    assert isinstance(refused, Refuse) and refused.status == 400, refused
    return refused


def codecs(count: int) -> tuple[str, ...]:
    return ("111 opus/48000/2", *(f"{96 + i % 15} x{i}/8000" for i in range(count - 1)))


def test_rtpmap_lines_per_m_line_are_bounded():
    accepted(sdp(SESSION, audio(codecs=codecs(LIMITS.max_rtpmap_per_m_line)), APPLICATION))
    over = sdp(SESSION, audio(codecs=codecs(LIMITS.max_rtpmap_per_m_line + 1)), APPLICATION)
    exc = refusal(over)
    assert exc.reason == "rtpmap_lines" and "32 a=rtpmap" in exc.text


def test_fmtp_lines_per_m_line_are_bounded():
    def offer(fmtps: int) -> str:
        section = [*audio(), *(f"a=fmtp:111 minptime={i}" for i in range(fmtps))]
        return sdp(SESSION, section, APPLICATION)

    accepted(offer(LIMITS.max_fmtp_per_m_line))
    exc = refusal(offer(LIMITS.max_fmtp_per_m_line + 1))
    assert exc.reason == "fmtp_lines" and "32 a=fmtp" in exc.text


def test_m_lines_are_bounded():
    def offer(m_lines: int) -> str:
        extra = [[line.replace("mid:1", f"mid:{2 + i}") for line in APPLICATION]
                 for i in range(m_lines - 2)]  # fmt: skip
        group = "a=group:BUNDLE " + " ".join(str(i) for i in range(m_lines))
        return sdp([*SESSION[:-1], group], audio(), APPLICATION, *extra)

    assert isinstance(bounded_lines(offer(LIMITS.max_m_lines)), list)
    exc = refusal(offer(LIMITS.max_m_lines + 1))
    assert exc.reason == "m_lines" and "4 m-lines" in exc.text


def test_lines_per_m_line_and_in_all_are_bounded():
    def section(lines: int) -> list[str]:
        base = [line for line in audio() if not line.startswith("a=") or "candidate" not in line]
        return [*base, *(f"a=ssrc:{i} cname:x" for i in range(lines - len(base)))]

    accepted(sdp(SESSION, section(LIMITS.max_lines_per_m_line), APPLICATION))
    exc = refusal(sdp(SESSION, section(LIMITS.max_lines_per_m_line + 1), APPLICATION))
    assert exc.reason == "section_lines" and "200 lines" in exc.text
    # Three m-lines under the per-m-line bound, over the total.
    fill = [f"a=x:{i}" for i in range(LIMITS.max_lines_per_m_line - len(APPLICATION))]
    sections = [section(LIMITS.max_lines_per_m_line), [*APPLICATION, *fill],
                [line.replace("mid:1", "mid:2") for line in [*APPLICATION, *fill]]]  # fmt: skip
    total = len(SESSION) + sum(len(s) for s in sections)
    assert total > LIMITS.max_lines
    exc = refusal(sdp(SESSION, *sections))
    assert exc.reason == "lines" and "500 lines" in exc.text


def test_candidate_lines_are_dropped_before_they_count():
    candidates = [f"a=candidate:{i} 1 udp 1 192.0.2.1 {1000 + i} typ host" for i in range(300)]
    cleaned = accepted(sdp(SESSION, [*audio(), *candidates], APPLICATION))
    assert "a=candidate" not in cleaned


def test_pathological_offers_are_refused_by_the_limit_they_are_over():
    """The benchmark's offers, each refused here by the limit it names (the 64 KiB ones also
    by their line counts, had they been read)."""
    base = run(normal_offer())
    accepted(base)
    for offer in pathological_offers(base):
        if offer.status == 400:
            assert refusal(offer.body).reason == offer.label, offer.name


def test_pathological_offers_through_whip_are_refused_named_and_counted():
    async def go():
        async with running(direct_config()) as (server, url), aiohttp.ClientSession() as http:
            base = await normal_offer()
            for offer in pathological_offers(base):
                async with http.post(f"{url}/whip", data=offer.body, headers=SDP_HEADERS) as r:
                    text = await r.text()
                    assert r.status == offer.status, (offer.name, r.status, text)
                if offer.label == "too_large":
                    assert "larger than 16384 bytes" in text
                else:
                    assert "more than" in text, text
            assert not server.sessions
            counted = server.metrics.offers_refused
            expected: dict[str, int] = {}
            for offer in pathological_offers(base):
                expected[offer.label] = expected.get(offer.label, 0) + 1
            for label, count in expected.items():
                assert counted.labels(label)._value.get() == count, label
            async with http.post(f"{url}/whip", data=base, headers=SDP_HEADERS) as r:
                assert r.status == 201, await r.text()
                location = r.headers["Location"]
            async with http.delete(url + location) as r:
                assert r.status == 200

    run(go())


def without_bundle(offer: str) -> str:
    """``offer`` with no BUNDLE group: what bundle-policy none (GStreamer webrtcbin's stock
    offer) sends, answered on its audio m-line alone (transceiver.call.bundle)."""
    return "".join(line for line in offer.splitlines(True) if not line.startswith("a=group:"))


def test_the_limits_hold_for_an_offer_without_bundle():
    base = run(normal_offer())
    assert "a=group:BUNDLE" not in accepted(without_bundle(base))
    refused = [offer for offer in pathological_offers(base) if offer.status == 400]
    assert refused, "the benchmark has offers refused by a line limit"
    for offer in refused:
        assert refusal(without_bundle(offer.body)).reason == offer.label, offer.name
