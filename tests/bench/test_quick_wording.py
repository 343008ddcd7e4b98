"""What a quick run says where its few seconds on a busy machine fall short: words that do not
read as a failure ("not counted", "no round counted", "no step met its conditions") instead of
"NOT PACED", "median nan" and "no step passed", which a full run keeps. Pure functions."""

from __future__ import annotations

import math

from bench.relay_tcp import Window, spread_criterion, unpaced_note
from bench.sessions import criterion
from tests.support.bench_output import READS_AS_FAILURE


def window(paced: bool) -> Window:
    return Window(
        transport="tcp", round=0, offered_frames=100, refused_frames=0, wall_s=1.0,
        forwarded_frames=100, dropped_frames=0, cpu_us=100.0, cpu_us_per_frame=1.0,
        worker_busy=0.1, paced=paced,
    )  # fmt: skip


def test_an_unpaced_window_is_not_counted_in_words_fit_for_the_run():
    assert unpaced_note(window(paced=True), quick=True) == ""
    quick = unpaced_note(window(paced=False), quick=True)
    assert "not counted" in quick and not READS_AS_FAILURE.search(quick)
    assert "NOT PACED" in unpaced_note(window(paced=False), quick=False)


def test_a_ratio_without_a_counted_round_says_so_instead_of_nan():
    none = {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    c = spread_criterion("cpu per frame tcp/udp <= 2.5", none, ok=False)
    assert c["pass"] is False
    assert c["detail"].startswith("no round counted") and not READS_AS_FAILURE.search(c["detail"])


def test_a_quick_sessions_series_that_stopped_does_not_say_no_step_passed():
    steps = [{"ok": False, "sessions": 2, "stop_reason": "1 of 2 calls did not connect"}]
    figures = {"cpu_per_session_pct": None}
    quick = criterion("pcm16", steps, None, figures, 1.0, quick=True)
    assert not READS_AS_FAILURE.search(quick["detail"]), quick["detail"]
    assert quick["detail"].startswith("no step met its conditions (a quick run is not judged)")
    full = criterion("pcm16", steps, None, figures, 1.0)
    assert full["detail"].startswith("no step passed") and full["pass"] is False
