"""Admission by load: whether this transceiver has headroom for one more session. Sans-I/O.

Past its core a transceiver collapses (aiortc's per-call decoder threads starve and most calls
lose audio), so it must refuse new sessions *before* the calls in progress degrade. Two
measurements say how close it is, sampled by a thin loop (``TransceiverServer._sample_load``)
every ``TICK_S`` and passed in here with the time:

- **event-loop lag**: how late a periodic timer fires. It rises when the loop has more work than
  time, whatever the cause: our own calls, or a neighbour taking the core (then our CPU share
  stays low and only the lag tells).
- **CPU share**: this process's CPU time (every thread) over wall time, in % of one core (one
  process ~ one core, docs/design.md).

Both are averaged over ``WINDOW_S``. A transceiver is *overloaded* once either is over its limit,
and stays so (hysteresis) until both are back under ``RESUME_FRACTION`` of their limits: while
overloaded every new session is refused. Otherwise a session is admitted only if the CPU share
*projected* with it stays under the limit: the measured share, plus one session's cost for each
session whose cost the window does not show yet (connecting, or connected less than a window
ago: ``unsettled``) and for the new one. So a burst of offers admitted at once cannot overshoot:
each admitted offer counts before its first packet does.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from common.verdict import Refuse

TICK_S = 0.1  # the sampling timer's period; its lateness is the loop lag
WINDOW_S = 2.0  # averages over this; a session connected this long shows in the CPU share
RESUME_FRACTION = 0.8  # overloaded until both inputs are under this fraction of their limits
# One echo session's CPU, % of a core (``rtcedge bench sessions`` on main, 2026-12-01: 1.77-2.2):
# the cost of an unsettled session until enough settled ones measure it.
SESSION_CPU_PCT = 2.2
MIN_SESSIONS_TO_LEARN = 5  # settled sessions before their measured cost replaces the prior
# Sessions connecting at once, at most: the projection assumes a whole core, and a neighbour
# taking it shows only in the loop's lag, a window later. Bursts are let in by tens so the lag of
# one shows before the next (measured: 30 offers at once into a core a neighbour held at 84 %
# were all admitted and all lost their audio).
MAX_UNSETTLED = 10


@dataclass(frozen=True)
class LoadLimits:
    """When to refuse; a limit of 0 turns that input off."""

    max_cpu_pct: float = 85.0  # this process's CPU, % of one core
    max_loop_lag_ms: float = 20.0  # mean lateness of the sampling timer
    retry_after_s: int = 5  # told to a client refused while overloaded


CAPACITY = "capacity"  # the kind of a refusal for want of capacity (common.verdict.Refuse)


def no_capacity(reason: str, text: str, retry_after_s: int) -> Refuse:
    """A new session refused for want of capacity: ``reason`` labels the metric, ``text`` is
    the 503's body, ``retry_after_s`` its Retry-After."""
    return Refuse(reason, text, 503, retry_after_s, CAPACITY)


class Headroom:
    """The estimator: samples in, admit (None) or a refusal (``no_capacity``) out."""

    def __init__(self, limits: LoadLimits, window_s: float = WINDOW_S) -> None:
        self.limits = limits
        self.window_s = window_s
        self._cpu: deque[tuple[float, float]] = deque()  # (now, process CPU seconds)
        self._lag: deque[tuple[float, float]] = deque()  # (now, lag seconds)
        self.overloaded = False
        self.cpu_pct = 0.0
        self.loop_lag_ms = 0.0

    def sample(self, now: float, loop_lag_s: float, cpu_s: float) -> None:
        """One tick: how late the timer fired, and the process's CPU seconds so far."""
        self._cpu.append((now, cpu_s))
        self._lag.append((now, max(0.0, loop_lag_s)))
        while self._cpu[0][0] < now - self.window_s and len(self._cpu) > 2:
            self._cpu.popleft()
        while self._lag[0][0] < now - self.window_s:
            self._lag.popleft()
        (t0, c0), (t1, c1) = self._cpu[0], self._cpu[-1]
        self.cpu_pct = 100.0 * (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0
        self.loop_lag_ms = 1000.0 * sum(lag for _, lag in self._lag) / len(self._lag)
        self._update_overloaded()

    def _update_overloaded(self) -> None:
        over = [self._ratio(self.cpu_pct, self.limits.max_cpu_pct)]
        over.append(self._ratio(self.loop_lag_ms, self.limits.max_loop_lag_ms))
        if any(r > 1.0 for r in over):
            self.overloaded = True
        elif all(r < RESUME_FRACTION for r in over):
            self.overloaded = False

    @staticmethod
    def _ratio(value: float, limit: float) -> float:
        return value / limit if limit > 0 else 0.0

    def session_cpu_pct(self, settled: int) -> float:
        """One session's CPU: measured once enough sessions are settled, else the prior."""
        if settled >= MIN_SESSIONS_TO_LEARN:
            return max(self.cpu_pct / settled, SESSION_CPU_PCT / 2)
        return SESSION_CPU_PCT

    def projected_cpu_pct(self, sessions: int, unsettled: int) -> float:
        """The CPU share once the unsettled sessions and one more show in it."""
        per = self.session_cpu_pct(sessions - unsettled)
        return self.cpu_pct + (unsettled + 1) * per

    def refusal(self, sessions: int, unsettled: int) -> Refuse | None:
        """Whether one more session fits, given the live ``sessions`` of which ``unsettled``
        are connecting or connected less than a window ago."""
        limits = self.limits
        if self.overloaded:
            if self._ratio(self.loop_lag_ms, limits.max_loop_lag_ms) >= RESUME_FRACTION:
                return no_capacity(
                    "loop_lag",
                    f"overloaded: event loop {self.loop_lag_ms:.0f} ms late",
                    limits.retry_after_s,
                )
            return no_capacity(
                "cpu", f"overloaded: CPU {self.cpu_pct:.0f}% of a core", limits.retry_after_s
            )
        if unsettled >= MAX_UNSETTLED and (limits.max_cpu_pct > 0 or limits.max_loop_lag_ms > 0):
            return no_capacity(
                "headroom",
                f"no headroom: {unsettled} sessions connecting",
                math.ceil(self.window_s),
            )
        if limits.max_cpu_pct > 0:
            projected = self.projected_cpu_pct(sessions, unsettled)
            if projected > limits.max_cpu_pct:
                # Unsettled sessions settle within a window: the projection is then measured.
                wait_s = math.ceil(self.window_s) if unsettled else limits.retry_after_s
                return no_capacity(
                    "headroom",
                    f"no headroom: CPU {self.cpu_pct:.0f}% of a core, {projected:.0f}% with "
                    f"{unsettled} connecting and one more",
                    wait_s,
                )
        return None
