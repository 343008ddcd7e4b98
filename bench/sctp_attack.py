"""Attacks on a call's data channel (issue 21 #2), measured against real processes.

``SctpAttacker`` is a real aiortc caller (a tone and the ``events`` channel) whose SCTP is
driven by hand once its channel is open: DATA chunks built and sent on its own DTLS
transport, past its own sender, so it can do what a browser never does:

- ``skipped_tsn``: skip one TSN, then send many small DATA chunks behind the gap;
- ``parked_messages``: in-order TSNs whose messages skip one stream sequence number, so each
  waits behind the missing one;
- ``without_sacks``: never acknowledge the transceiver's DATA, while asking the echo backend
  for large events;
- ``bogus_sacks``: SACKs whose gap blocks claim 65,535 TSNs each, none ever sent.

``rtcedge bench sctp-attack`` runs a relay and a transceiver process, a victim caller
(``EchoCaller``) and, in turn, no attack (the reference) and each attack for the same time,
and prints per run the transceiver's CPU per attack chunk (µs, from the first attack packet
until its CPU rate is back to the reference's, that rate for as long subtracted; per event
for ``without_sacks``), the victim's longest audio gap (ms), the transceiver's RSS growth,
and how the attacker's session ended. Every load is bounded in chunks and seconds. Loopback only.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from dataclasses import asdict, dataclass
from typing import Any

import click
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.rtcsctptransport import (
    SCTP_DATA_FIRST_FRAG,
    SCTP_DATA_LAST_FRAG,
    WEBRTC_STRING,
    DataChunk,
    SackChunk,
)
from google_crc32c import value as crc32c

from testbed.callers import EchoCaller, ToneTrack, loopback_only, whip_call
from testbed.processes import NO_LOAD_GATE, RelayProcess, TransceiverProcess, sessions_ended
from testbed.procfs import process_cpu_ns, rss_bytes

GAP_BLOCKS_PER_SACK = 280  # what fits one packet (4 bytes each)
MAX_PACKET_BYTES = 1180  # an SCTP packet that fits one relay slot with DTLS around it
BURST_PACKETS = 20  # packets sent back to back, then the loop yields (the victim shares it)
BURST_PAUSE_S = 0.002
CATCH_UP_STEP_S = 0.25
MAX_CATCH_UP_S = 20.0  # past the run's end: a transceiver still busy is measured until then


def data_channel_drops(trx: TransceiverProcess) -> dict[str, float]:
    """The transceiver's rtcedge_transceiver_data_channel_dropped_total by reason (none on a
    transceiver without the bounds)."""
    text = trx.http("/metrics", port=trx.metrics_port)[1]
    prefix = "rtcedge_transceiver_data_channel_dropped_total{"
    return {
        line.split('reason="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


class SctpAttacker:
    """An aiortc caller whose data channel's SCTP chunks are written by hand."""

    def __init__(self, hz: float = 660) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.pc.addTrack(ToneTrack(hz))
        self.channel = self.pc.createDataChannel("events")
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self.location = ""
        self.chunks_sent = 0
        self.hung_up = False  # the transceiver ended the call while we attacked

    async def connect(self, url: str, timeout_s: float = 15.0) -> None:
        self.location = await whip_call(self.pc, url)
        await asyncio.wait_for(self.opened.wait(), timeout_s)

    @property
    def _sctp(self) -> Any:
        return self.pc.sctp

    def _chunk(self, tsn: int, ssn: int, data: bytes) -> DataChunk:
        chunk = DataChunk(flags=SCTP_DATA_FIRST_FRAG | SCTP_DATA_LAST_FRAG)
        chunk.tsn = tsn % (1 << 32)
        chunk.stream_id = self.channel.id
        chunk.stream_seq = ssn % (1 << 16)
        chunk.protocol = WEBRTC_STRING
        chunk.user_data = data
        return chunk

    def _packet(self, chunks: list[bytes]) -> bytes:
        sctp = self._sctp
        header = struct.pack(
            "!HHL", sctp._local_port, sctp._remote_port, sctp._remote_verification_tag
        )
        body = b"".join(chunks)
        return header + struct.pack("<L", crc32c(header + b"\0\0\0\0" + body)) + body

    async def _send(self, chunks: list[DataChunk], deadline: float) -> int:
        """Packed into packets of at most MAX_PACKET_BYTES, in bursts; stops at ``deadline`` or
        when the transceiver hung up (DTLS closed)."""
        dtls = self._sctp.transport
        packets, pending, size = 0, [], 12
        try:
            for chunk in chunks:
                data = bytes(chunk)
                if pending and size + len(data) > MAX_PACKET_BYTES:
                    await dtls._send_data(self._packet(pending))
                    self.chunks_sent += len(pending)
                    packets += 1
                    pending, size = [], 12
                    if packets % BURST_PACKETS == 0:
                        await asyncio.sleep(BURST_PAUSE_S)
                        if time.monotonic() > deadline:
                            return self.chunks_sent
                pending.append(data)
                size += len(data)
            if pending:
                await dtls._send_data(self._packet(pending))
                self.chunks_sent += len(pending)
        except ConnectionError:
            self.hung_up = True
        return self.chunks_sent

    async def skipped_tsn(self, chunks: int, chunk_bytes: int = 16, seconds: float = 10.0) -> int:
        """TSN n is never sent; n+1 .. n+chunks are (tiny complete messages)."""
        sctp = self._sctp
        first, ssn = sctp._local_tsn, sctp._outbound_stream_seq.get(self.channel.id, 0)
        data = b"x" * chunk_bytes
        batch = [self._chunk(first + 1 + i, ssn + 1 + i, data) for i in range(chunks)]
        return await self._send(batch, time.monotonic() + seconds)

    async def parked_messages(
        self, messages: int, message_bytes: int = 1100, seconds: float = 10.0
    ) -> int:
        """In-order TSNs, one message each, whose stream sequence numbers skip the next one:
        every message waits behind it."""
        sctp = self._sctp
        first, ssn = sctp._local_tsn, sctp._outbound_stream_seq.get(self.channel.id, 0)
        data = b"y" * message_bytes
        batch = [self._chunk(first + i, ssn + 1 + i, data) for i in range(messages)]
        return await self._send(batch, time.monotonic() + seconds)

    async def without_sacks(
        self, events: int, event_bytes: int = 15000, seconds: float = 10.0
    ) -> int:
        """Stop acknowledging, then send ``events`` events of ``event_bytes`` for the echo to
        return (the transceiver still acknowledges ours)."""

        async def no_sack() -> None:
            self._sctp._sack_needed = False

        self._sctp._send_sack = no_sack
        text = json.dumps({"type": "big", "pad": "z" * (event_bytes - 30)})
        deadline = time.monotonic() + seconds
        sent = 0
        for _ in range(events):
            if time.monotonic() > deadline:
                break
            self.channel.send(text)
            sent += 1
            while self.channel.bufferedAmount > 8 * event_bytes and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        self.chunks_sent += sent
        return sent

    async def bogus_sacks(self, sacks: int, seconds: float = 10.0) -> int:
        """SACKs of what it received, each claiming ~280 gap blocks of 65,535 TSNs never sent
        (stock aiortc walks every TSN of every block)."""
        sctp = self._sctp
        sack = SackChunk()
        sack.cumulative_tsn = sctp._last_received_tsn
        sack.advertised_rwnd = 1 << 20
        sack.gaps = [(1, 65535)] * GAP_BLOCKS_PER_SACK
        sack.duplicates = []
        packet = self._packet([bytes(sack)])
        deadline = time.monotonic() + seconds
        try:
            for i in range(sacks):
                await sctp.transport._send_data(packet)
                self.chunks_sent += 1
                if i % BURST_PACKETS == BURST_PACKETS - 1:
                    await asyncio.sleep(BURST_PAUSE_S)
                    if time.monotonic() > deadline:
                        break
        except ConnectionError:
            self.hung_up = True
        return self.chunks_sent

    async def close(self) -> None:
        await self.pc.close()


@dataclass
class Run:
    attack: str
    seconds: float
    chunks: int  # attack chunks (or events) sent
    cpu_ms: float  # the transceiver's CPU during the run
    cpu_us_per_chunk: float | None  # the reference's CPU rate subtracted
    victim_gap_ms: float
    victim_frames: int
    rss_growth_bytes: int
    ended: dict[str, float]  # the transceiver's sessions ended during the run, by reason
    dropped: dict[str, float]  # its data-channel drops during the run, by reason


ATTACKS = ("none", "skipped_tsn", "parked_messages", "without_sacks", "bogus_sacks")


async def one_run(
    trx: TransceiverProcess, attack: str, size: int, seconds: float, reference_cpu_ns_per_s: float
) -> Run:
    """A victim call and an attacker call; the attack (or none) for ``seconds``."""
    assert trx.proc is not None
    pid = trx.proc.pid
    victim = EchoCaller(hz=440)
    attacker = SctpAttacker(hz=880)
    try:
        await victim.connect(trx.url)
        await attacker.connect(trx.url)
        await asyncio.sleep(1.0)  # both calls settled
        ended_before = sessions_ended(trx)
        dropped_before = data_channel_drops(trx)
        rss_before, (cpu_before, _) = rss_bytes(pid), process_cpu_ns(pid)
        start = time.monotonic()
        if attack == "skipped_tsn":
            await attacker.skipped_tsn(size, seconds=seconds)
        elif attack == "parked_messages":
            await attacker.parked_messages(size, seconds=seconds)
        elif attack == "without_sacks":
            await attacker.without_sacks(size, seconds=seconds)
        elif attack == "bogus_sacks":
            await attacker.bogus_sacks(size, seconds=seconds)
        # The CPU of the attack: until the transceiver is back to the reference's rate (the same
        # two calls without an attack), less that rate for as long.
        await caught_up(pid, reference_cpu_ns_per_s, start + seconds + MAX_CATCH_UP_S)
        cpu_attack_ns = process_cpu_ns(pid)[0] - cpu_before
        attack_s = time.monotonic() - start
        await asyncio.sleep(max(0.0, start + seconds - time.monotonic()))
        end = time.monotonic()
        cpu_after, _ = process_cpu_ns(pid)
        rss_after = rss_bytes(pid)
        ended = {
            reason: count - ended_before.get(reason, 0)
            for reason, count in sessions_ended(trx).items()
            if count - ended_before.get(reason, 0)
        }
        dropped = {
            reason: count - dropped_before.get(reason, 0)
            for reason, count in data_channel_drops(trx).items()
            if count - dropped_before.get(reason, 0)
        }
        cpu_ns = cpu_after - cpu_before
        chunks = attacker.chunks_sent
        per_chunk = None
        if chunks and reference_cpu_ns_per_s >= 0:
            extra_ns = cpu_attack_ns - reference_cpu_ns_per_s * attack_s
            per_chunk = max(0.0, extra_ns) / chunks / 1000
        return Run(
            attack,
            round(end - start, 2),
            chunks,
            round(cpu_ns / 1e6, 1),
            None if per_chunk is None else round(per_chunk, 1),
            round(victim.echo.gap_ms(start, end), 1),
            victim.echo.after(start),
            rss_after - rss_before,
            ended,
            dropped,
        )
    finally:
        await attacker.close()
        await victim.close()


async def caught_up(pid: int, reference_ns_per_s: float, deadline: float) -> None:
    """Until a CATCH_UP_STEP_S of the transceiver's costs no more than the reference's rate (+
    10 %, + 5 ms/s of noise): the attack is read and handled. ``deadline`` at the latest."""
    if reference_ns_per_s < 0:
        return
    cpu = process_cpu_ns(pid)[0]
    while time.monotonic() < deadline:
        await asyncio.sleep(CATCH_UP_STEP_S)
        now = process_cpu_ns(pid)[0]
        if now - cpu <= (1.1 * reference_ns_per_s + 5e6) * CATCH_UP_STEP_S:
            return
        cpu = now


async def idle(trx: TransceiverProcess, timeout_s: float) -> None:
    """Until the transceiver has no session left (the calls hung up), ``timeout_s`` at most."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not await asyncio.to_thread(trx.metric, "rtcedge_transceiver_sessions_active"):
            return
        await asyncio.sleep(0.2)


async def run_all(attacks: list[str], sizes: dict[str, int], seconds: float) -> list[Run]:
    relay = RelayProcess({}, workers=1)
    # No admission by load: an attack that overloads the transceiver (stock aiortc's) must not
    # turn the next run's calls away; what it did shows in that run's figures.
    trx = TransceiverProcess(
        relay,
        extra_args=["--drain-grace", "0", *NO_LOAD_GATE],
    )
    relay.transceivers = {0: trx.media_address}
    runs: list[Run] = []
    with relay, trx:
        reference = await one_run(trx, "none", 0, seconds, -1)
        runs.append(reference)
        rate = reference.cpu_ms * 1e6 / reference.seconds
        for attack in attacks:
            runs.append(await one_run(trx, attack, sizes[attack], seconds, rate))
            await idle(trx, 30.0)
    return runs


def _attack_list(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    attacks = [a for a in value.split(",") if a]
    unknown = sorted(set(attacks) - set(ATTACKS[1:]))
    if unknown:
        raise click.BadParameter(f"unknown attack {unknown}; known: {', '.join(ATTACKS[1:])}")
    return attacks


@click.command("sctp-attack")
@click.option(
    "--attacks",
    default=",".join(ATTACKS[1:]),
    show_default=True,
    callback=_attack_list,
    help="Comma-separated attacks to run after the reference.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(0, 30, min_open=True),
    default=4.0,
    show_default=True,
    help="Each run's length.",
)
@click.option("--chunks", type=click.IntRange(1, 100_000), default=6000, show_default=True,
              help="skipped_tsn's chunks.")  # fmt: skip
@click.option("--messages", type=click.IntRange(1, 100_000), default=20000, show_default=True,
              help="parked_messages' messages.")  # fmt: skip
@click.option("--events", type=click.IntRange(1, 10_000), default=1500, show_default=True,
              help="without_sacks' 15 KB events.")  # fmt: skip
@click.option("--sacks", type=click.IntRange(1, 10_000), default=200, show_default=True,
              help="bogus_sacks' SACKs.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON line per run.")
def sctp_attack_bench(
    attacks: list[str],
    seconds: float,
    chunks: int,
    messages: int,
    events: int,
    sacks: int,
    as_json: bool,
) -> None:
    """A call's data channel attacked (skipped TSN, parked messages, no SACKs, bogus SACKs):
    the transceiver's CPU per chunk and RSS, and a victim call's longest gap, beside no attack.

    \b
    Examples:
      rtcedge bench sctp-attack
      rtcedge bench sctp-attack --attacks skipped_tsn --seconds 2
    """
    loopback_only()
    sizes = {
        "skipped_tsn": chunks,
        "parked_messages": messages,
        "without_sacks": events,
        "bogus_sacks": sacks,
    }
    runs = asyncio.run(asyncio.wait_for(run_all(attacks, sizes, seconds), 120 + 20 * seconds))
    for r in runs:
        if as_json:
            print(json.dumps(asdict(r)))
            continue
        per_chunk = "-" if r.cpu_us_per_chunk is None else f"{r.cpu_us_per_chunk:.1f}"
        print(
            f"{r.attack:16} {r.chunks:6d} sent  transceiver CPU {r.cpu_ms:7.1f} ms"
            f" ({per_chunk} us/chunk over the reference)"
            f"  victim longest gap {r.victim_gap_ms:6.1f} ms ({r.victim_frames} frames)"
            f"  RSS {r.rss_growth_bytes / 1e6:+.2f} MB  ended {r.ended}  dropped {r.dropped}"
        )


if __name__ == "__main__":
    sctp_attack_bench()
