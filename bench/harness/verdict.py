"""The word a report puts before an acceptance criterion. A quick run is a smoke test: too short
and too small to meet a criterion, so it does not judge one rather than print FAIL."""

from __future__ import annotations

QUICK_SKIP = "SKIP (quick run: criterion not judged)"


def verdict(passed: bool, quick: bool) -> str:
    if quick:
        return QUICK_SKIP
    return "PASS" if passed else "FAIL"
