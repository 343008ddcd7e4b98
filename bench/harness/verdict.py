"""The word a report puts before an acceptance criterion. A quick run is a smoke test: too short
and too small to meet a criterion, so it does not judge one rather than print FAIL."""

from __future__ import annotations

from typing import Any

QUICK_SKIP = "SKIP (quick run: criterion not judged)"
# Said at a quick run's start (its plan) and end: its figures, from a few seconds and a few
# calls or packets, are a smoke test's; on a busy machine they read worse than they are.
QUICK_PLAN = "a quick run: a smoke test, its figures are not judged"
QUICK_END = (
    "quick run: a smoke test of a few seconds; no figure above is judged, and on a busy machine "
    "they read worse than they are (losses, a generator behind its rate, steps that stop "
    "early). To judge them: the same command without --quick"
)


def verdict(passed: bool, quick: bool) -> str:
    if quick:
        return QUICK_SKIP
    return "PASS" if passed else "FAIL"


def verdict_lines(result: dict[str, Any]) -> list[str]:
    """A report's last lines: each criterion with its verdict, then the run's notes."""
    quick = result["config"].get("quick", False)
    lines = [f"{verdict(c['pass'], quick)} {c['name']}: {c['detail']}" for c in result["criteria"]]
    return lines + [f"note: {note}" for note in result.get("notes", [])]
