"""What every harness shares: how an invariant fails, how tolerated surprises are recorded.

This module must not import project code: harnesses import the modules under test inside
``atheris.instrument_imports`` and a module imported earlier would escape instrumentation.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable

OBSERVATIONS_ENV = "RTCEDGE_FUZZ_OBSERVATIONS"
"""File (JSON lines) where a run's observations go; the runner sets it and summarises it."""

MAX_OBSERVATION_KINDS = 64


class Finding(AssertionError):
    """An invariant of a target was broken. Uncaught, so libFuzzer stops and saves the input."""


def require(condition: object, message: str) -> None:
    """``assert`` that survives ``python -O``: a broken invariant must never go unnoticed."""
    if not condition:
        raise Finding(message)


class Observations:
    """Exceptions that are not findings of the target but that somebody must hear about.

    Example: aioice raising ``struct.error`` on a datagram our strict parser let through. Each
    distinct (kind, exception type, message) is written once, with the input that showed it, so a
    run of millions of executions leaves a short file.
    """

    def __init__(self) -> None:
        self.path = os.environ.get(OBSERVATIONS_ENV)
        self._seen: set[tuple[str, str, str]] = set()

    def record(
        self, kind: str, exc: BaseException, data: bytes, context: str = "", why: str = ""
    ) -> None:
        """Note ``exc`` once per kind and message; ``why`` tells a reader of the run's output
        why it is expected (an observation is never a failure of the run by itself)."""
        signature = (kind, type(exc).__name__, str(exc))
        if signature in self._seen or len(self._seen) >= MAX_OBSERVATION_KINDS:
            return
        self._seen.add(signature)
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        entry = {
            "kind": kind,
            "exception": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc),
            "raised_at": where,
            "input_hex": bytes(data).hex(),
            "context": context,
            "why": why,
        }
        print(
            f"observation (recorded, not a failure) {kind}: {entry['exception']}: {exc} at {where}",
            file=sys.stderr,
        )
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")


def main(test_one_input: Callable[[bytes], None]) -> None:
    """libFuzzer's entry point: flags and corpus directories come from ``sys.argv``."""
    import atheris

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
