"""A caller that protects packets with 15,000 SSRCs of its own (issue 21, item 4), against a real
``transceiver serve`` process: nothing grows, every foreign packet is counted, receiver reports
keep flowing, and the call still ends cleanly (DELETE answered, the caller's DTLS closed).

Before the latch each SSRC cost the transceiver a libsrtp stream and receiver statistics (~15 MB
for this flood), past 255 aiortc's RTCP task died on ``struct.error``, and with it teardown:
DELETE waited out two 5 s timeouts and the caller's DTLS was never closed. The timings (CPU per
junk packet, DELETE) are ``python3 -m bench.ssrc_flood``'s.
"""

from __future__ import annotations

from bench.ssrc_flood import FloodCaller, direct_transceiver, foreign_ssrc_drops, rss_bytes
from testbed.procfs import udp_drops, udp_socket_rows
from tests.support.waits import run, wait_until
from transceiver.call.ssrc import MAX_SSRCS_PER_CALL

RTP_SSRCS = 15_000
RTCP_SSRCS = 300
MAX_RSS_GROWTH_BYTES = 100 * 1024


def queued_bytes(port: int) -> int:
    """What waits in the receive queue of the UDP socket bound to ``port`` (/proc/net/udp)."""
    return sum(row.queued_bytes for row in udp_socket_rows() if row.port == port)


def test_15000_ssrcs_on_one_call_grow_nothing_and_the_call_still_ends_cleanly():
    async def go() -> None:
        with direct_transceiver() as trx:
            assert trx.proc is not None
            caller = FloodCaller()
            try:
                await caller.connect(trx.url)
                # Warm: the call's audio under way, receiver reports sent, /metrics answered
                # once (its first answer allocates what the later ones reuse).
                assert await wait_until(lambda: caller.receiver_reports >= 2, 10), "RRs flow"
                assert foreign_ssrc_drops(trx) == 0
                rss_before = rss_bytes(trx.proc.pid)
                kernel_drops = udp_drops(trx.media_port)
                await caller.flood(RTP_SSRCS, RTCP_SSRCS)
                sent = caller.sent_rtp + caller.sent_rtcp
                # Memory once the transceiver has read the flood, before /metrics is scraped
                # again (each answer allocates a little: that is not the flood's).
                assert await wait_until(lambda: queued_bytes(trx.media_port) == 0, 20)
                grown = rss_bytes(trx.proc.pid) - rss_before
                assert grown < MAX_RSS_GROWTH_BYTES, f"RSS grew {grown} bytes"
                # The caller's own SSRC holds one place in the latch; the first few others get
                # the rest (a legitimate change of source), every later one is refused.
                refusable = sent - (MAX_SSRCS_PER_CALL - 1)

                def all_counted() -> bool:
                    lost = udp_drops(trx.media_port) - kernel_drops  # by the kernel, if any
                    return foreign_ssrc_drops(trx) + lost >= refusable

                assert await wait_until(all_counted, 20), (
                    f"foreign_ssrc {foreign_ssrc_drops(trx)} of {refusable}"
                )
                assert foreign_ssrc_drops(trx) <= refusable
                reports = caller.receiver_reports
                assert await wait_until(lambda: caller.receiver_reports >= reports + 2, 10), (
                    "receiver reports stopped after the flood"
                )
                status, _took_s = await caller.delete(trx.url)
                assert status == 200
                assert await wait_until(lambda: caller.dtls.state == "closed", 5), (
                    f"the caller's DTLS is {caller.dtls.state}: no close_notify"
                )
            finally:
                await caller.close()

    run(go(), timeout_s=120)
