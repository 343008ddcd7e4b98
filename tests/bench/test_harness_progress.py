"""The shared progress lines and quick-run verdict of the benchmarks (bench/harness/)."""

from __future__ import annotations

from bench.harness.progress import Progress
from bench.harness.verdict import QUICK_SKIP, verdict
from tests.support.bench_output import PROGRESS_LINE


def test_a_line_per_step_numbered_with_what_is_left() -> None:
    lines: list[str] = []
    progress = Progress([1.0, 1.0, 2.0], lines.append)
    progress.announce("plan")
    progress.step("first")
    progress.insert(1.0)  # a repeat
    progress.step("again")
    progress.skip(1)  # the run stopped early: the last step will not run
    progress.step("last")
    assert lines[0] == "plan: 3 steps, about 4 s"
    assert [line.split("  (")[0] for line in lines[1:]] == [
        "[1/3] first",
        "[2/4] again",
        "[3/3] last",
    ]
    assert all(PROGRESS_LINE.match(line) for line in lines[1:]), lines
    assert lines[-1].endswith("~0 s left)")


def test_a_quick_run_judges_no_criterion() -> None:
    assert verdict(True, quick=False) == "PASS"
    assert verdict(False, quick=False) == "FAIL"
    assert verdict(False, quick=True) == verdict(True, quick=True) == QUICK_SKIP
