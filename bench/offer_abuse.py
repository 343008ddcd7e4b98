"""Pathological WHIP offers (issue 21, item 5) and what refusing them costs a transceiver.

``pathological_offers(base)`` inflates a real offer (``base``: an aiortc offer's SDP) the ways
the audit did: codec lines, video m-lines, ``a=ssrc`` lines, as large as the audit sent them
(64 KiB: over ``--max-sdp-bytes``, 413 before the body is read) and fitted under 16 KiB, so that
each line limit of ``transceiver.signaling.offer.OfferLimits`` is what refuses it (400). The tests
and this benchmark use the same offers.

``rtcedge bench offer-abuse`` runs a relay, a transceiver process and a victim aiortc call
(``EchoCaller``), all on loopback, and prints, in one run:
- the transceiver's event-loop CPU (its main thread, /proc/<pid>/task/<pid>/schedstat) per POST,
  for each pathological offer, beside the same figure for a normal offer (a session made, then
  deleted);
- the victim's longest echo gap over a window while 10 copies of each pathological offer are
  POSTed at once, beside its longest gap over the same window without them.
Bounded: ``--posts`` POSTs per offer for the CPU figure, ``--window`` seconds per gap window.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import click

from testbed.callers import EchoCaller, loopback_only
from testbed.processes import NO_LOAD_GATE, RelayProcess, TransceiverProcess, started_in_order
from testbed.procfs import cpu_ns

SDP_HEADERS = {"Content-Type": "application/sdp"}
AUDIT_BYTES = 64 * 1024  # the size the audit's offers had (the old --max-sdp-bytes)
FITTED_BYTES = 16 * 1024 - 512  # under the new --max-sdp-bytes, with room to spare


@dataclass(frozen=True)
class Pathological:
    """One offer the transceiver must refuse cheaply: its status and counted reason."""

    name: str
    body: str
    status: int
    label: str  # rtcedge_transceiver_offers_refused_total{reason}


def _sections(sdp: str) -> tuple[list[str], list[list[str]]]:
    """(session-level lines, one list of lines per m-section)."""
    head: list[str] = []
    media: list[list[str]] = []
    for line in sdp.replace("\r\n", "\n").strip("\n").split("\n"):
        if line.startswith("m="):
            media.append([line])
        elif media:
            media[-1].append(line)
        else:
            head.append(line)
    return head, media


def _join(head: list[str], media: list[list[str]]) -> str:
    return "\r\n".join([*head, *(line for section in media for line in section)]) + "\r\n"


def _grow(base: str, make_line: Callable[[int], str], size_bytes: int) -> str:
    """``base`` with lines ``make_line(0), make_line(1)...`` added to its audio m-section
    until it is ``size_bytes`` long (at most)."""
    head, media = _sections(base)
    audio = next(s for s in media if s[0].startswith("m=audio"))
    size = len(_join(head, media))
    i = 0
    while True:
        line = make_line(i)
        if size + len(line) + 2 > size_bytes:
            return _join(head, media)
        audio.append(line)
        size += len(line) + 2
        i += 1


def with_codecs(base: str, size_bytes: int) -> str:
    """Codec lines (an ``a=rtpmap`` and an ``a=fmtp`` per payload type) on the audio m-line."""

    def line(i: int) -> str:
        pt = 96 + (i // 2) % 32
        return f"a=rtpmap:{pt} x{i}/48000/2" if i % 2 == 0 else f"a=fmtp:{pt} a={i};b={i}"

    return _grow(base, line, size_bytes)


def with_ssrcs(base: str, size_bytes: int) -> str:
    """``a=ssrc`` lines, each of another SSRC, on the audio m-line."""
    return _grow(base, lambda i: f"a=ssrc:{1000 + i} cname:c{i}", size_bytes)


def with_video(base: str, size_bytes: int) -> str:
    """Video m-lines, each bundled, each as small as a valid one gets."""
    head, media = _sections(base)
    ice = [line for line in media[0] if line.startswith(("a=ice-", "a=fingerprint:sha-256"))]
    group = next(i for i, line in enumerate(head) if line.startswith("a=group:BUNDLE"))
    i = 0
    while True:
        section = ["m=video 9 UDP/TLS/RTP/SAVPF 97", "c=IN IP4 0.0.0.0", f"a=mid:v{i}",
                   "a=rtcp-mux", "a=rtpmap:97 VP8/90000", *ice, "a=setup:actpass"]  # fmt: skip
        grown_head = [*head]
        grown_head[group] = head[group] + f" v{i}"
        if len(_join(grown_head, [*media, section])) > size_bytes:
            return _join(head, media)
        head, media = grown_head, [*media, section]
        i += 1


def with_spread_lines(base: str) -> str:
    """Four m-lines of 150 lines each: under every per-m-line limit, over the total."""
    head, media = _sections(base)
    while len(media) < 4:
        media.append([*media[-1]])
        mid = f"a=mid:x{len(media)}"
        media[-1] = [mid if line.startswith("a=mid:") else line for line in media[-1]]
    for n, section in enumerate(media):
        section.extend(f"a=x:{n}.{i}" for i in range(150 - len(section)))
    return _join(head, media)


def pathological_offers(base: str) -> list[Pathological]:
    """The audit's offers at their size (413), and fitted under 16 KiB (400 by a line limit)."""
    return [
        Pathological("codecs_64k", with_codecs(base, AUDIT_BYTES), 413, "too_large"),
        Pathological("video_64k", with_video(base, AUDIT_BYTES), 413, "too_large"),
        Pathological("ssrcs_64k", with_ssrcs(base, AUDIT_BYTES), 413, "too_large"),
        Pathological("codecs_16k", with_codecs(base, FITTED_BYTES), 400, "rtpmap_lines"),
        Pathological("video_16k", with_video(base, FITTED_BYTES), 400, "m_lines"),
        Pathological("ssrcs_16k", with_ssrcs(base, FITTED_BYTES), 400, "section_lines"),
        Pathological("spread_lines", with_spread_lines(base), 400, "lines"),
    ]


# -- the benchmark ---------------------------------------------------------------------------------
async def post(http: aiohttp.ClientSession, url: str, body: str) -> tuple[int, str]:
    async with http.post(f"{url}/whip", data=body, headers=SDP_HEADERS) as r:
        return r.status, r.headers.get("Location", "")


async def cpu_ms_per_post(
    pid: int, url: str, body: str, posts: int, delete: bool = False
) -> tuple[float, set[int]]:
    """Event-loop CPU per POST of ``body``, one at a time (and the statuses seen); ``delete``:
    end each session made (a normal offer; a pathological one that was not refused, as on
    a transceiver without the limits), its teardown's CPU included."""
    statuses: set[int] = set()
    async with aiohttp.ClientSession() as http:
        before = cpu_ns(pid)
        for _ in range(posts):
            status, location = await post(http, url, body)
            statuses.add(status)
            if delete and location:
                async with http.delete(url + location) as r:
                    await r.read()
        await asyncio.sleep(0.3)  # a deleted session's teardown finishes
        spent = cpu_ns(pid) - before
    return spent / posts / 1e6, statuses


async def burst(url: str, body: str, copies: int) -> list[int]:
    """``copies`` POSTs of ``body`` at once: their statuses."""
    async with aiohttp.ClientSession() as http:
        answers = await asyncio.gather(*(post(http, url, body) for _ in range(copies)))
    return [status for status, _ in answers]


async def normal_offer() -> str:
    """A real aiortc offer (audio + data channel), its peer connection closed."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    from testbed.callers import ToneTrack

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(ToneTrack(440))
    pc.createDataChannel("events")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


async def run_bench(trx: TransceiverProcess, posts: int, window_s: float, copies: int) -> dict:
    assert trx.proc is not None
    pid = trx.proc.pid
    base = await normal_offer()
    offers = pathological_offers(base)
    result: dict = {"posts_per_offer": posts, "window_s": window_s, "copies_at_once": copies}
    normal_ms, statuses = await cpu_ms_per_post(pid, trx.url, base, posts, delete=True)
    result["normal_offer"] = {"cpu_ms_per_post": round(normal_ms, 2), "statuses": sorted(statuses)}
    cpu: dict[str, dict] = {}
    for offer in offers:
        ms, statuses = await cpu_ms_per_post(pid, trx.url, offer.body, posts, delete=True)
        cpu[offer.name] = {
            "bytes": len(offer.body),
            "cpu_ms_per_post": round(ms, 2),
            "statuses": sorted(statuses),
            "expected": offer.status,
        }
    result["refused"] = cpu
    victim = EchoCaller()
    try:
        await victim.connect(trx.url)
        await asyncio.sleep(1.0)  # past the call's start
        quiet: dict[str, float] = {}
        attacked: dict[str, float] = {}
        for offer in offers:  # a window without, then one with: the same victim, in turn
            start = time.monotonic()
            await asyncio.sleep(window_s)
            quiet[offer.name] = round(victim.echo.gap_ms(start, time.monotonic()), 1)
            start = time.monotonic()
            # The attacker in a thread of its own: its client work is not the victim's loop's.
            statuses = await asyncio.to_thread(asyncio.run, burst(trx.url, offer.body, copies))
            await asyncio.sleep(max(0.0, window_s - (time.monotonic() - start)))
            attacked[offer.name] = round(victim.echo.gap_ms(start, time.monotonic()), 1)
            result["refused"][offer.name]["statuses"] = sorted(
                {*result["refused"][offer.name]["statuses"], *statuses}
            )
        result["victim_gap_ms_without"] = quiet
        result["victim_gap_ms_with"] = attacked
    finally:
        await victim.close()
    return result


def statuses(figures: dict) -> str:
    return "/".join(str(s) for s in figures["statuses"])


def report(result: dict) -> str:
    """The figures as a table: one row per offer."""
    rows = [
        f"{'offer':<14}{'bytes':>7}{'statuses':>10}{'cpu ms/POST':>13}{'gap ms, 10 at once':>20}"
        f"{'gap ms, none':>14}",
        f"{'normal':<14}{'':>7}{statuses(result['normal_offer']):>10}{result['normal_offer']['cpu_ms_per_post']:>13}",
    ]
    for name, cpu in result["refused"].items():
        rows.append(
            f"{name:<14}{cpu['bytes']:>7}{statuses(cpu):>10}{cpu['cpu_ms_per_post']:>13}"
            f"{result['victim_gap_ms_with'][name]:>20}{result['victim_gap_ms_without'][name]:>14}"
        )
    return "\n".join(rows)


@click.command("offer-abuse")
@click.option("--posts", type=click.IntRange(1, 500), default=40, show_default=True,
              help="POSTs per offer for the CPU figure.")  # fmt: skip
@click.option("--window", type=click.FloatRange(0.5, 10), default=2.0, show_default=True,
              help="Seconds per gap window.")  # fmt: skip
@click.option("--copies", type=click.IntRange(1, 50), default=10, show_default=True,
              help="POSTs at once per offer during the gap window.")  # fmt: skip
@click.option(
    "--cpu", type=click.IntRange(0), default=None, help="Pin the transceiver to this CPU."
)
def offer_abuse_bench(posts: int, window: float, copies: int, cpu: int | None) -> None:
    """Pathological WHIP offers: the transceiver's CPU per refused POST beside a normal offer's,
    and a victim call's longest gap while they arrive, beside without.

    \b
    Examples:
      rtcedge bench offer-abuse
      rtcedge bench offer-abuse --posts 10 --cpu 0
    """
    loopback_only()
    relay = RelayProcess({}, workers=1, pin=False)
    trx = TransceiverProcess(relay, extra_args=["--client-rate", "0", *NO_LOAD_GATE])
    relay.transceivers = {trx.tid: trx.media_address}
    with started_in_order(relay, trx):
        if cpu is not None:
            import os

            assert trx.proc is not None
            os.sched_setaffinity(trx.proc.pid, {cpu})
        result = asyncio.run(run_bench(trx, posts, window, copies))
    refused = [v["cpu_ms_per_post"] for v in result["refused"].values()]
    result["refused_cpu_ms_max"] = max(refused)
    result["refused_cpu_ms_median"] = statistics.median(refused)
    result["victim_gap_ms_with_max"] = max(result["victim_gap_ms_with"].values())
    result["victim_gap_ms_without_max"] = max(result["victim_gap_ms_without"].values())
    print(report(result))
    print("result: " + json.dumps(result))


if __name__ == "__main__":
    offer_abuse_bench()
