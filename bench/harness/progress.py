"""Progress of a long run: one line per finished step, with the time spent and an estimate of
what is left. Plain lines rather than a redrawn bar, so that a CI log or a pipe reads the same
as a terminal. The estimates follow this machine: the plan's by the core share measured at the
start (bench.harness.coreshare), the later ones by the pace of the finished steps.
A quick run says in its plan that its figures are not judged."""

from __future__ import annotations

import time
from collections.abc import Sequence

from bench.harness.cli import Echo
from bench.harness.coreshare import measured_slowdown
from bench.harness.verdict import QUICK_PLAN

SHOWN_SLOWDOWN = 1.2  # the plan names the quiet machine's estimate beyond this slowdown


class Progress:
    """Steps of a run announced up front, each with an a-priori duration (a quiet machine's);
    the plan gives the range the measured ``slowdown`` allows (a step that only waits takes its
    a-priori time, one that only computes that times the slowdown), and the estimate of what is
    left scales the durations still ahead by how the finished steps compared with theirs."""

    def __init__(
        self,
        expected_s: Sequence[float],
        echo: Echo,
        quick: bool = False,
        slowdown: float | None = None,  # None: measured now (0.2 s)
    ) -> None:
        self.expected_s = list(expected_s)
        self.echo = echo
        self.quick = quick
        self.slowdown = measured_slowdown() if slowdown is None else slowdown
        self.done = 0
        self.started = time.monotonic()

    @property
    def total(self) -> int:
        return len(self.expected_s)

    def announce(self, what: str) -> None:
        """The plan: how many steps and about how long, before the first one starts."""
        steps = f"{self.total} step" + ("" if self.total == 1 else "s")
        quiet_s = sum(self.expected_s)
        about = f"about {_duration(quiet_s)}"
        if self.slowdown >= SHOWN_SLOWDOWN:  # between all waiting and all work, stretched
            about = (
                f"about {_duration(quiet_s)} on a quiet machine, up to "
                f"{_duration(self.slowdown * quiet_s)} on this one (a busy loop gets "
                f"{100 / self.slowdown:.0f}% of a core now)"
            )
        self.echo(f"{what}: {steps}, {about}" + (f"; {QUICK_PLAN}" if self.quick else ""))

    def left_s(self) -> float:
        """Seconds still ahead: the remaining a-priori durations, scaled by the pace so far."""
        elapsed_s = time.monotonic() - self.started
        expected_done_s = sum(self.expected_s[: self.done])
        pace = elapsed_s / expected_done_s if expected_done_s > 0 else 1.0
        return pace * sum(self.expected_s[self.done :])

    def step(self, line: str) -> None:
        """A step finished: its line, prefixed by its number and followed by the times."""
        self.done = min(self.done + 1, self.total)
        elapsed_s = time.monotonic() - self.started
        self.echo(
            f"[{self.done}/{self.total}] {line}  "
            f"({_duration(elapsed_s)} elapsed, ~{_duration(self.left_s())} left)"
        )

    def insert(self, expected_s: float) -> None:
        """One more step next (a repeat): part of what is left."""
        self.expected_s.insert(self.done, expected_s)

    def skip(self, count: int = 1) -> None:
        """Steps that will not run (a deadline, a stop): no longer part of what is left."""
        for _ in range(count):
            if self.done < self.total:
                del self.expected_s[-1]


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"
