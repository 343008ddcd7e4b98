"""A caller abusing its data channel's SCTP cannot grow the transceiver or stall other calls.

Issue 21 #2, with real processes: a relay and a transceiver, a victim aiortc call (its echo
counted) and an attacker aiortc call whose SCTP chunks are written by hand
(``bench.sctp_attack.SctpAttacker``): one TSN skipped then thousands of tiny chunks; messages
parked behind a missing stream sequence number; no SACK while the echo backend returns large
events; SACKs whose gap blocks claim millions of TSNs never sent. The transceiver's RSS
(/proc) grows by less than 1 MB per attack, an attacker over the caps is ended
(``data_channel_limit``), drops are counted by reason, and the victim's echo goes on (its
frames counted, not timed). The figures in time (CPU per chunk, the victim's longest gap) are
``rtcedge bench sctp-attack``'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from bench.sctp_attack import SctpAttacker, data_channel_drops
from testbed.callers import EchoCaller, loopback_only
from testbed.processes import RelayProcess, TransceiverProcess, sessions_ended
from testbed.procfs import rss_bytes
from tests.support.waits import run

MAX_RSS_GROWTH_BYTES = 1_000_000
FRAME_S = 0.02


@pytest.fixture(scope="module")
def trx() -> Iterator[TransceiverProcess]:
    loopback_only()
    relay = RelayProcess({}, workers=1)
    process = TransceiverProcess(relay, extra_args=["--drain-grace", "0"])
    relay.transceivers = {0: process.media_address}
    with relay, process:
        yield process


async def settled(trx: TransceiverProcess, period_s: float = 0.5, timeout_s: float = 10.0) -> None:
    """Until the data channel's drop counts stop changing for ``period_s`` (bounded)."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        now = await asyncio.to_thread(data_channel_drops, trx)
        if now == last:
            return
        last = now
        await asyncio.sleep(period_s)


async def attack(trx: TransceiverProcess, how: str, size: int, seconds: float = 3.0) -> dict:
    """A victim and an attacker call; ``how`` for ``seconds``: what changed meanwhile."""
    assert trx.proc is not None
    victim, attacker = EchoCaller(hz=440), SctpAttacker(hz=880)
    try:
        await victim.connect(trx.url)
        await attacker.connect(trx.url)
        ended, dropped = sessions_ended(trx), data_channel_drops(trx)
        rss = rss_bytes(trx.proc.pid)
        start = time.monotonic()
        await getattr(attacker, how)(size, seconds=seconds)
        await asyncio.sleep(max(0.5, start + seconds - time.monotonic()))
        end = time.monotonic()
        await settled(trx)  # a busy transceiver is still working through the attack's backlog
        return {
            "rss_growth": rss_bytes(trx.proc.pid) - rss,
            "ended": sessions_ended(trx).get("data_channel_limit", 0)
            - ended.get("data_channel_limit", 0),
            "dropped": {k: v - dropped.get(k, 0) for k, v in data_channel_drops(trx).items()},
            "victim_frames": victim.echo.after(start),
            "victim_frames_expected": int((end - start) / FRAME_S),
            "sent": attacker.chunks_sent,
            "hung_up": attacker.hung_up,
        }
    finally:
        await attacker.close()
        await victim.close()


def test_a_skipped_tsn_then_thousands_of_chunks_is_dropped_and_the_caller_ended(trx):
    seen = run(attack(trx, "skipped_tsn", 8000), timeout_s=60)
    assert seen["ended"] == 1, seen  # it kept sending past the window with the gap open
    assert seen["dropped"].get("beyond_window", 0) >= 4000, seen  # past 256 TSNs, unread
    assert seen["rss_growth"] < MAX_RSS_GROWTH_BYTES, seen
    assert seen["victim_frames"] >= 0.8 * seen["victim_frames_expected"], seen


def test_messages_parked_behind_a_missing_sequence_number_end_the_caller(trx):
    seen = run(attack(trx, "parked_messages", 3000), timeout_s=60)
    assert seen["ended"] == 1 and seen["hung_up"], seen  # reassembly over the 64 KiB window
    assert seen["rss_growth"] < MAX_RSS_GROWTH_BYTES, seen
    assert seen["victim_frames"] >= 0.8 * seen["victim_frames_expected"], seen


def test_sacks_claiming_millions_of_tsns_do_not_stall_the_other_calls(trx):
    # Stock aiortc walks each of a SACK's gap blocks TSN by TSN: 2.6 s of CPU per such SACK.
    seen = run(attack(trx, "bogus_sacks", 40), timeout_s=60)
    assert seen["sent"] == 40, seen
    assert seen["victim_frames"] >= 0.8 * seen["victim_frames_expected"], seen


def test_a_caller_sending_no_sack_holds_at_most_the_unacknowledged_cap(trx):
    seen = run(attack(trx, "without_sacks", 1500), timeout_s=60)
    # 1500 echoes of 15 KB: 256 KiB of them unacknowledged at most, the rest dropped, oldest first
    assert seen["dropped"].get("unacked_full", 0) >= 1000, seen
    assert seen["ended"] == 0, seen  # a slow reader is not over a cap: it loses events
    assert seen["rss_growth"] < MAX_RSS_GROWTH_BYTES, seen
    assert seen["victim_frames"] >= 0.8 * seen["victim_frames_expected"], seen
