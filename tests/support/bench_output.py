"""What every benchmark's ``--quick`` run prints: a progress line per step with an estimate of
what is left, and no PASS/FAIL against an acceptance criterion it cannot meet."""

from __future__ import annotations

import re

from bench.harness.verdict import QUICK_SKIP

PROGRESS_LINE = re.compile(r"^\[(\d+)/(\d+)\] .*\(\d+ s elapsed, ~\d+ s left\)$")


def assert_quick_run_output(stdout: str, steps: int) -> None:
    lines = stdout.splitlines()
    progress = [m for line in lines if (m := PROGRESS_LINE.match(line))]
    assert [(int(m[1]), int(m[2])) for m in progress] == [
        (i, steps) for i in range(1, steps + 1)
    ], stdout
    assert not any(re.search(r"\b(PASS|FAIL)\b", line) for line in lines), stdout
    assert QUICK_SKIP in stdout, stdout
