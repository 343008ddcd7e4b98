"""Smoke test of the realtime benchmark: ``--quick`` (one call, a 3 s window, realtime then echo)
runs end to end against the example agent and writes a result whose latencies are numbers.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tests.support.bench_output import assert_plot_beside, assert_quick_run_output, run_benchmark

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

STEP_FIELDS = {
    "sessions",
    "backend",
    "connected",
    "connect_ms",
    "transceiver_cpu_pct",
    "cpu_per_session_pct",
    "uplink_ms",
    "downlink_ms",
    "downlink_split",
    "round_trip_ms",
    "jitter_events",
    "unmatched",
    "caller_late_ms",
    "agent_late_ms",
    "agent_cpu_pct",
    "uplink_stages_ms",
    "downlink_stages_ms",
    "capture",
    "sessions_active_after",
    "ok",
    "calls",
}


def number(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_quick_run_times_both_directions_and_the_echo(tmp_path: Path) -> None:
    code, stdout, stderr = run_benchmark("bench.realtime", ["--quick", "--out", str(tmp_path)], 150)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    assert_quick_run_output(stdout, steps=2)
    (path,) = tmp_path.glob("realtime-*.json")
    assert_plot_beside(path, stdout)
    result = json.loads(path.read_text())
    realtime, echo = result["steps"]
    assert (realtime["backend"], echo["backend"]) == ("realtime", "echo-24000")
    for step in (realtime, echo):
        assert set(step) >= STEP_FIELDS, STEP_FIELDS - set(step)
        assert step["ok"] and step["connected"] == 1 and step["sessions_active_after"] == 0
        assert number(step["cpu_per_session_pct"]) and step["cpu_per_session_pct"] > 0
    for direction in ("uplink_ms", "downlink_ms"):
        figures = realtime[direction]
        assert figures["n"] >= 1, (direction, realtime["calls"])
        assert all(number(figures[k]) for k in ("p50", "p95", "max")), figures
    assert echo["round_trip_ms"]["n"] >= 1 and number(echo["round_trip_ms"]["p95"])
    (call,) = realtime["calls"]
    assert call["session"], "the call was paired with its agent session"
    assert call["appends"] > 0 and call["deltas"] > 0
    assert set(realtime["jitter_events"]) == {"lost", "late", "trimmed", "resync"}
    if not realtime["capture"].get("error"):  # root (or CAP_NET_RAW): the hops are timed
        for direction in ("uplink_stages_ms", "downlink_stages_ms"):
            stages = realtime[direction]
            assert set(stages) == {"caller", "relay", "transceiver", "agent"}, stages
            assert stages["transceiver"]["n"] >= 1 and number(stages["transceiver"]["p95"])
    assert number(result["summary"]["cpu_ratio_by_n"]["realtime"]["1"])
    assert [c["pass"] for c in result["summary"]["criteria"]] == [False, False], "not at N=20"
