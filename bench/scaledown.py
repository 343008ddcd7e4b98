"""The ``scale-down`` scenario of ``rtcedge bench recovery``: the audio gap callers hear when
the transceiver carrying their calls is scaled down and their calls move (docs/transceiver.md,
"Moving calls on scale-down").

A relay, ``TRANSCEIVERS`` transceivers that know each other's WHIP ports, a round-robin HTTP
front before them (``testbed.front``: a load-balanced Service), and ``CALLERS`` real aiortc
callers that act on ``session.migrate`` (``testbed.callers.EchoCaller``), each with a tone of
its own. The calls start on transceiver 0; each trial SIGTERMs the transceiver carrying the most
calls, waits for each of its callers to move (a resume offer through the front, retried after a
503 from the draining pod), measures each moved caller's gap (the longest silence in the echo
it hears, from 0.5 s before the SIGTERM to 0.5 s after its switch, minus one frame), waits for
the old process to exit and starts a new one with the same id, as a StatefulSet does. A caller
that did not move counts as a gap of ``FAILED_GAP_MS``. Bounded: every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.harness.progress import Progress
from common.sessionid import verify_session_id
from testbed.callers import EchoCaller
from testbed.fleet import migrating_fleet
from testbed.front import RoundRobinFront
from testbed.processes import RelayProcess, TransceiverProcess, sessions_ended

TRANSCEIVERS = 3
CALLERS = 4
MIGRATE_DEADLINE_S = 10.0
FAILED_GAP_MS = 10_000.0  # a caller that did not move (its old call would end at the drain)
MOVE_TIMEOUT_S = MIGRATE_DEADLINE_S + 5


@dataclass
class Fleet:
    relay: RelayProcess
    transceivers: list[TransceiverProcess]
    front: RoundRobinFront
    callers: list[EchoCaller]

    def owner(self, caller: EchoCaller) -> int:
        """The transceiver id the caller's current WHIP resource names."""
        resource = caller.location.rsplit("/", 1)[1]
        return verify_session_id(self.relay.keyring, resource, time.time(), 3600).transceiver_id


async def trial_scale_down(fleet: Fleet) -> tuple[list[float], Counter[str]]:
    """SIGTERM the busiest transceiver: each of its callers' gap, and how their moves went."""
    owners = [fleet.owner(c) for c in fleet.callers]
    victim = fleet.transceivers[max(set(owners), key=owners.count)]
    moving = [c for c, o in zip(fleet.callers, owners, strict=True) if o == victim.tid]
    moves_before = [len(c.moves) for c in moving]
    assert victim.proc is not None
    at = time.monotonic()
    victim.proc.terminate()

    def settled(c: EchoCaller, before: int) -> bool:
        return len(c.moves) > before and c.moves[-1].outcome != "under way"

    deadline = at + MOVE_TIMEOUT_S
    while time.monotonic() < deadline and not all(map(settled, moving, moves_before)):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    end = time.monotonic()
    gaps, outcomes = [], Counter[str]()
    for caller, before in zip(moving, moves_before, strict=True):
        move = caller.moves[-1] if len(caller.moves) > before else None
        outcome = move.outcome if move is not None else "not asked"
        outcomes[outcome.split(":")[0]] += 1
        gaps.append(caller.echo.gap_ms(at - 0.5, end) if outcome == "moved" else FAILED_GAP_MS)
    # The old pod exits once its calls have moved (or at its drain grace); a new one with the
    # same id takes its place, off the callers' event loop.
    await asyncio.to_thread(victim.stop, 40.0)
    await asyncio.to_thread(victim.start)
    return gaps, outcomes


async def run_scale_down(
    trials: int, stock_jitter_buffer: bool, progress: Progress
) -> tuple[list[float], dict[str, float], dict[str, Any]]:
    """Start the fleet and the callers, run the trials, stop everything. Returns the gaps (one
    per moved caller per trial), the surviving transceivers' ended sessions by reason, and what
    else the report says (the fleet's size, the moves' outcomes)."""
    relay = RelayProcess({}, workers=2)
    trxs = migrating_fleet(relay, TRANSCEIVERS, MIGRATE_DEADLINE_S)
    front = RoundRobinFront([t.url for t in trxs])
    callers = [
        EchoCaller(stock_jitter_buffer, migrate=True, hz=440 + 110 * i) for i in range(CALLERS)
    ]
    fleet = Fleet(relay, trxs, front, callers)
    gaps: list[float] = []
    outcomes: Counter[str] = Counter()
    started: list[Any] = []
    try:
        for process in (relay, *trxs):
            await asyncio.to_thread(process.start)
            started.append(process)
        url = await front.start()
        for caller in callers:  # all on transceiver 0; moves go through the front
            await caller.connect(trxs[0].url)
            caller.whip_url = url
        await asyncio.sleep(1.0)
        for i in range(trials):
            trial_gaps, trial_outcomes = await trial_scale_down(fleet)
            gaps += trial_gaps
            outcomes += trial_outcomes
            worst = max(trial_gaps, default=0.0)
            progress.step(
                f"scale-down trial {i + 1}/{trials}: {len(trial_gaps)} call(s) moved, "
                f"longest gap {worst:.0f} ms"
            )
            await asyncio.sleep(0.5)
        ended: dict[str, float] = {}
        for t in trxs:
            for reason, count in sessions_ended(t).items():
                ended[reason] = ended.get(reason, 0.0) + count
        return gaps, ended, {"transceivers": TRANSCEIVERS, "callers": CALLERS,
                             "moves": dict(outcomes)}  # fmt: skip
    finally:
        await asyncio.gather(*(c.close() for c in callers), return_exceptions=True)
        await front.close()
        for process in reversed(started):
            await asyncio.to_thread(process.stop)
