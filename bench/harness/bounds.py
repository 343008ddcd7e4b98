"""Deadlines: every wait of a benchmark is bounded, so that a stuck peer ends a run with a
reason instead of hanging it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Deadline:
    """A moment on the monotonic clock that a run, a step or a reply must not pass."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def left_s(self) -> float:
        return self.at - time.monotonic()

    def passed(self) -> bool:
        return self.left_s() <= 0


def poll_until(
    probe: Callable[[], T], done: Callable[[T], bool], timeout_s: float, interval_s: float
) -> T:
    """``probe()`` every ``interval_s`` until ``done`` says yes to its value or ``timeout_s``
    passed; returns the last value either way."""
    deadline = Deadline.after(timeout_s)
    while True:
        value = probe()
        if done(value) or deadline.passed():
            return value
        time.sleep(interval_s)
