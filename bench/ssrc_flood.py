"""A caller that floods its own call with SSRCs, and the benchmark of what that costs a transceiver.

Issue 21, item 4: a caller holds its call's SRTP keys, so it can protect packets with any number
of SSRCs of its own, and each one that authenticated used to cost the transceiver a libsrtp
stream and receiver statistics for the life of the call; past 255 aiortc's RTCP task died and
teardown hung. ``FloodCaller`` is that caller: a real aiortc call (WHIP, a tone) that protects
packets with new SSRCs through its own DTLS transport (``_send_rtp``: its own SRTP session, so
they authenticate at the transceiver), and counts the receiver reports it is sent.

``rtcedge bench ssrc`` (or ``python3 -m bench.ssrc_flood``) runs a ``transceiver serve``
process, floods one call with 15,000 SSRCs, opens a fresh call beside it, and prints, in one
run: the transceiver's CPU per junk packet (a protected packet of a new SSRC, and a forged one
of the caller's own SSRC) on the flooded call and on the fresh one, its RSS before and after the
flood, the receiver reports sent after it, and how long each call's DELETE took. Bounded: a
fixed number of packets, paced, and a deadline for every wait.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import struct
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import click
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.rtp import RtcpRrPacket

from testbed.callers import ToneTrack, loopback_only, whip_call
from testbed.processes import NO_LOAD_GATE, RelayProcess, TransceiverProcess
from testbed.procfs import udp_drops
from transceiver.call.opus import SILENCE_FRAME

BURST = 100  # packets sent back to back, then a pause: the transceiver's socket never overflows
PAUSE_S = 0.01
ROUNDS = 3  # CPU measurements per call and kind, alternating: the median is printed
DROPPED = "rtcedge_transceiver_dropped_datagrams_total"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class FloodCaller:
    """One real aiortc call whose caller also sends packets of SSRCs that are not its own."""

    def __init__(self, hz: float = 440, seed: int = 21) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.pc.addTrack(ToneTrack(hz))
        self.location = ""
        self.receiver_reports = 0  # RTCP RR packets from the transceiver about our audio
        self.sent_rtp = 0
        self.sent_rtcp = 0
        self._rng = random.Random(seed)
        self._used: set[int] = set()
        self._connected = asyncio.Event()
        self.pc.on("connectionstatechange", self._on_state)

    def _on_state(self) -> None:
        if self.pc.connectionState == "connected":
            self._connected.set()

    async def connect(self, url: str, timeout_s: float = 15) -> None:
        """Offer over WHIP, apply the answer, wait until DTLS is up; count receiver reports."""
        self.location = await whip_call(self.pc, url)
        await asyncio.wait_for(self._connected.wait(), timeout_s)
        sender = self.sender
        handle = sender._handle_rtcp_packet

        async def counting(packet: Any) -> None:
            if isinstance(packet, RtcpRrPacket):
                self.receiver_reports += 1
            await handle(packet)

        sender._handle_rtcp_packet = counting  # the DTLS transport routes RRs to its sender

    @property
    def sender(self) -> Any:
        return self.pc.getTransceivers()[0].sender

    @property
    def dtls(self) -> Any:
        return self.sender.transport

    @property
    def own_ssrc(self) -> int:
        return int(self.sender._ssrc)

    @property
    def payload_type(self) -> int:
        return int(self.pc.getTransceivers()[0]._codecs[0].payloadType)

    def _new_ssrc(self) -> int:
        while True:
            ssrc = self._rng.randrange(1, 2**32)
            if ssrc != self.own_ssrc and ssrc not in self._used:
                self._used.add(ssrc)
                return ssrc

    def junk(self, rtp_ssrcs: int, rtcp_ssrcs: int = 0) -> list[bytes]:
        """``rtp_ssrcs`` RTP packets and ``rtcp_ssrcs`` receiver reports, each of a new SSRC and
        protected with the call's own SRTP session (so each would authenticate)."""
        pt, tx = self.payload_type, self.dtls._tx_srtp
        packets = []
        for i in range(rtp_ssrcs):
            header = struct.pack("!BBHII", 0x80, pt, i & 0xFFFF, (i * 960) & 0xFFFFFFFF, 0)
            ssrc = self._new_ssrc().to_bytes(4, "big")
            packets.append(tx.protect(header[:8] + ssrc + SILENCE_FRAME))
        for _ in range(rtcp_ssrcs):
            packets.append(tx.protect_rtcp(bytes(RtcpRrPacket(ssrc=self._new_ssrc()))))
        self.sent_rtp += rtp_ssrcs
        self.sent_rtcp += rtcp_ssrcs
        return packets

    def forged(self, count: int) -> list[bytes]:
        """``count`` packets of the caller's own SSRC with a made-up payload and tag: they fail
        authentication (the caller's own SRTP state is not touched)."""
        pt, ssrc = self.payload_type, self.own_ssrc
        return [
            struct.pack("!BBHII", 0x80, pt, self._rng.randrange(65536), i * 960, ssrc)
            + self._rng.randbytes(13)  # 3 bytes of payload, a 10-byte tag
            for i in range(count)
        ]

    async def send(self, packets: list[bytes]) -> None:
        """Send ``packets`` on the call's path, in bursts (the transceiver's socket never
        overflows)."""
        transport = self.dtls.transport
        for i, packet in enumerate(packets):
            await transport._send(packet)
            if i % BURST == BURST - 1:
                await asyncio.sleep(PAUSE_S)

    async def flood(self, rtp_ssrcs: int, rtcp_ssrcs: int = 0) -> None:
        """``junk`` sent."""
        await self.send(self.junk(rtp_ssrcs, rtcp_ssrcs))

    async def delete(self, url: str, timeout_s: float = 30) -> tuple[int, float]:
        """DELETE the call's resource: (status, seconds until the answer)."""
        started = time.monotonic()
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http,
            http.delete(f"{url}{self.location}") as resp,
        ):
            return resp.status, time.monotonic() - started

    async def close(self) -> None:
        await self.pc.close()


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (/proc/PID/status VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def direct_transceiver(extra_args: list[str] | None = None) -> TransceiverProcess:
    """``transceiver serve`` that callers reach directly (its media socket is the candidate);
    the relay only names the cluster and the keyring and is never started."""
    trx = TransceiverProcess(RelayProcess({}, workers=1), extra_args=list(extra_args or []))
    trx.advertise = trx.media_address
    return trx


def foreign_ssrc_drops(trx: TransceiverProcess) -> float:
    return trx.metric(DROPPED, reason="foreign_ssrc")


@dataclass
class Result:
    flood_rtp_ssrcs: int
    flood_rtcp_ssrcs: int
    junk_packets: int
    rss_before_bytes: int = 0
    rss_after_flood_bytes: int = 0
    foreign_ssrc_drops: float = 0
    kernel_drops: int = 0
    cpu_us_per_junk: dict[str, float] = field(default_factory=dict)  # "<call>/<kind>": median
    cpu_us_per_junk_runs: dict[str, list[float]] = field(default_factory=dict)
    idle_cpu_pct: float = 0.0  # the transceiver with both calls up, nothing else sent
    delete_s: dict[str, float] = field(default_factory=dict)
    delete_status: dict[str, int] = field(default_factory=dict)
    receiver_reports_after_flood: int = 0


async def _cpu_us_per_packet(pid: int, send: Any, packets: int, idle_per_s: float) -> float:
    """The transceiver's CPU per packet while ``send`` runs, its idle rate taken off."""
    before, started = cpu_s(pid), time.monotonic()
    await send
    await asyncio.sleep(0.2)  # let it read what is queued
    used = cpu_s(pid) - before - idle_per_s * (time.monotonic() - started)
    return max(used, 0.0) * 1e6 / packets


async def run_bench(rtp_ssrcs: int, rtcp_ssrcs: int, junk: int) -> Result:
    result = Result(rtp_ssrcs, rtcp_ssrcs, junk)
    # Admission off: a flooded transceiver (before the latch) refuses new calls as overloaded.
    with direct_transceiver(NO_LOAD_GATE) as trx:
        assert trx.proc is not None
        pid = trx.proc.pid
        flooded, fresh = FloodCaller(440, seed=1), FloodCaller(660, seed=2)
        try:
            await flooded.connect(trx.url)
            await fresh.connect(trx.url)
            await asyncio.sleep(1.0)
            result.rss_before_bytes = rss_bytes(pid)
            drops = udp_drops(trx.media_port)
            await flooded.flood(rtp_ssrcs, rtcp_ssrcs)
            await asyncio.sleep(1.0)
            result.rss_after_flood_bytes = rss_bytes(pid)
            result.foreign_ssrc_drops = foreign_ssrc_drops(trx)
            result.kernel_drops = udp_drops(trx.media_port) - drops
            reports = flooded.receiver_reports
            await asyncio.sleep(3.0)
            result.receiver_reports_after_flood = flooded.receiver_reports - reports
            idle_from, idle_at = cpu_s(pid), time.monotonic()
            await asyncio.sleep(3.0)
            idle_per_s = (cpu_s(pid) - idle_from) / (time.monotonic() - idle_at)
            result.idle_cpu_pct = idle_per_s * 100
            runs: dict[str, list[float]] = {}
            for _ in range(ROUNDS):
                for name, call in (("flooded", flooded), ("fresh", fresh)):
                    for kind, packets in (
                        ("new_ssrc", call.junk(junk)),
                        ("forged", call.forged(junk)),
                    ):
                        cost = await _cpu_us_per_packet(pid, call.send(packets), junk, idle_per_s)
                        runs.setdefault(f"{name}/{kind}", []).append(cost)
            result.cpu_us_per_junk = {key: statistics.median(v) for key, v in runs.items()}
            result.cpu_us_per_junk_runs = runs
            for name, call in (("flooded", flooded), ("fresh", fresh)):
                status, took = await call.delete(trx.url)
                result.delete_status[name], result.delete_s[name] = status, took
        finally:
            await flooded.close()
            await fresh.close()
    return result


@click.command("ssrc")
@click.option(
    "--ssrcs",
    type=click.IntRange(1),
    default=15_000,
    show_default=True,
    help="RTP SSRCs the flooded call's caller protects packets with.",
)
@click.option(
    "--rtcp-ssrcs",
    type=click.IntRange(0),
    default=300,
    show_default=True,
    help="SRTCP SSRCs (receiver reports) it adds to the flood.",
)
@click.option(
    "--junk",
    type=click.IntRange(100),
    default=5_000,
    show_default=True,
    help="Packets per CPU measurement (each call, each kind, 3 rounds).",
)
def ssrc_bench(ssrcs: int, rtcp_ssrcs: int, junk: int) -> None:
    """One call flooded with SSRCs of its own beside a fresh call: RSS, receiver reports,
    transceiver CPU per junk packet on each, and each call's DELETE (issue 21, item 4)."""
    loopback_only()
    result = asyncio.run(asyncio.wait_for(run_bench(ssrcs, rtcp_ssrcs, junk), 300))
    print(json.dumps(asdict(result), indent=2))
    grown = result.rss_after_flood_bytes - result.rss_before_bytes
    print(f"RSS grown by the flood: {grown / 1024:.0f} KiB")
    print(f"receiver reports in the 3 s after the flood: {result.receiver_reports_after_flood}")
    for kind in ("new_ssrc", "forged"):
        flooded = result.cpu_us_per_junk[f"flooded/{kind}"]
        fresh = result.cpu_us_per_junk[f"fresh/{kind}"]
        print(
            f"CPU per junk packet ({kind}): flooded call {flooded:.1f} us,"
            f" fresh call {fresh:.1f} us"
        )
    for key, value in result.delete_s.items():
        print(f"DELETE of the {key} call: {result.delete_status[key]} in {value * 1000:.0f} ms")


if __name__ == "__main__":
    ssrc_bench()
