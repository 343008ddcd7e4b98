"""The shared progress lines and quick-run verdict of the benchmarks (bench/harness/)."""

from __future__ import annotations

import threading

from bench.harness.coreshare import MAX_SLOWDOWN, measured_slowdown
from bench.harness.progress import Progress
from bench.harness.verdict import QUICK_PLAN, QUICK_SKIP, verdict
from tests.support.bench_output import PLAN_LINE, PROGRESS_LINE


def test_a_line_per_step_numbered_with_what_is_left() -> None:
    lines: list[str] = []
    progress = Progress([1.0, 1.0, 2.0], lines.append, slowdown=1.0)
    progress.announce("plan")
    progress.step("first")
    progress.insert(1.0)  # a repeat
    progress.step("again")
    progress.skip(1)  # the run stopped early: the last step will not run
    progress.step("last")
    assert lines[0] == "plan: 3 steps, about 4 s"
    assert PLAN_LINE.match(lines[0])
    assert [line.split("  (")[0] for line in lines[1:]] == [
        "[1/3] first",
        "[2/4] again",
        "[3/3] last",
    ]
    assert all(PROGRESS_LINE.match(line) for line in lines[1:]), lines
    assert lines[-1].endswith("~0 s left)")


def test_on_a_busy_machine_the_plan_follows_the_measured_slowdown() -> None:
    """The a-priori (quiet machine's) durations, and up to them times the slowdown measured at
    the start: steps that only wait take the first, steps that only compute the second."""
    lines: list[str] = []
    Progress([10.0, 10.0], lines.append, slowdown=2.0).announce("plan")
    assert lines[0] == (
        "plan: 2 steps, about 20 s on a quiet machine, up to 40 s on this one (a busy loop gets "
        "50% of a core now)"
    )
    assert PLAN_LINE.match(lines[0])


def test_a_quick_runs_plan_says_its_figures_are_not_judged() -> None:
    lines: list[str] = []
    Progress([1.0], lines.append, quick=True, slowdown=1.0).announce("plan")
    assert lines == [f"plan: 1 step, about 1 s; {QUICK_PLAN}"]


def test_a_neighbour_holding_the_core_shows_as_a_slowdown() -> None:
    """A thread that holds the GIL is a neighbour this one must share its time with, as another
    process on its core would be: the probe's wall time over its CPU time rises to about 2."""
    assert 1.0 <= measured_slowdown(0.05) <= MAX_SLOWDOWN
    stop = threading.Event()

    def neighbour() -> None:
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=neighbour, daemon=True)
    thread.start()
    try:
        shared = measured_slowdown(0.2)
    finally:
        stop.set()
        thread.join()
    assert shared >= 1.5, shared


def test_a_quick_run_judges_no_criterion() -> None:
    assert verdict(True, quick=False) == "PASS"
    assert verdict(False, quick=False) == "FAIL"
    assert verdict(False, quick=True) == verdict(True, quick=True) == QUICK_SKIP
