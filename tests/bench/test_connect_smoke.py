"""Smoke test of the connect benchmark: ``--quick`` runs end to end and writes a complete result.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.bench_output import assert_plot_beside, assert_quick_run_output, run_benchmark

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SINGLE_STEPS = {
    "post_to_answer",
    "answer_to_ice",
    "ice_to_connected",
    "connected_to_first_echo",
    "answer_to_connected",
    "post_to_connected",
    "post_to_channel_open",
}
PHASES = {"offer", "answer", "first_check", "ice", "dtls", "audio_in", "audio_out"}


def test_quick_run_measures_single_calls_a_burst_and_memory(tmp_path: Path) -> None:
    code, stdout, stderr = run_benchmark(
        "bench.connect", ["--quick", "--out", str(tmp_path)], timeout_s=120
    )
    assert code == 0, stderr[-2000:]
    files = list(tmp_path.glob("connect-*.json"))
    assert len(files) == 1, stdout
    result = json.loads(files[0].read_text())
    assert_plot_beside(files[0], stdout)

    single, first, more = result["stages"]
    assert single["name"] == "single" and len(single["calls"]) == 3, single["errors"]
    assert not single["errors"], single["errors"]
    assert set(single["ms"]) == SINGLE_STEPS
    for step in SINGLE_STEPS:
        assert single["ms"][step]["n"] == 3, (step, single["calls"])
    # The transceiver's own breakdown of the same calls: every step seen.
    assert set(single["transceiver_phases_ms"]) == PHASES
    assert all(v is not None for v in single["transceiver_phases_ms"].values()), single
    # Each connect's own CPU at the transceiver (idle subtracted): a figure for every call.
    assert single["connect_cpu_ms"]["n"] == 3 and single["connect_cpu_ms"]["p50"] > 0
    assert single["idle_cpu_ms_per_s"] >= 0
    for stage in (first, more):
        assert len(stage["calls"]) == 4 and not stage["errors"], stage["errors"]
        assert all(c["connected"] for c in stage["calls"])
        assert stage["transceiver_cpu_ms"] > 0 and stage["callers_cpu_ms"] > 0
    points = result["memory"]["points"]
    assert [p["sessions_active"] for p in points] == [0, 4, 8]
    assert all(p["rss_mb"] > 0 for p in points)
    assert result["memory"]["mb_per_call"] is not None
    assert len(result["criteria"]) == 4
    assert_quick_run_output(stdout, steps=3)


def test_connect_cpu_subtracts_what_the_idle_transceiver_spends_in_as_long() -> None:
    from bench.connect import connect_cpu_ms

    # 9 ms of CPU over a 40 ms window, idle at 3 ms of CPU per s: 0.12 ms of it was idle work.
    assert connect_cpu_ms(9_000_000, 0.040, 3_000_000.0) == pytest.approx(8.88)
    assert connect_cpu_ms(9_000_000, 0.040, 0.0) == pytest.approx(9.0)
