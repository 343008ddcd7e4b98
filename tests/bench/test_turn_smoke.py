"""Smoke test of the turn benchmark: ``--quick`` (one call, two turns) runs end to end with the
real example agent behind a realtime transceiver and writes a result in which every turn is
matched and split into parts that are present, non-negative and add up to its total.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
Skipped, with the reason, where the agent cannot run (its extra or espeak-ng missing).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from bench.turn_split import PARTS, STAGES
from testbed.voice_agent import agent_missing
from tests.support.bench_output import assert_plot_beside, assert_quick_run_output, run_benchmark

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
    pytest.mark.skipif(bool(agent_missing()), reason=f"the agent needs {agent_missing()}"),
]

TOLERANCE_MS = 0.01  # the stages are differences of the same moments: only rounding is left
MOMENTS = {"caller_sent", *(end for _, _, end in STAGES)}


def number(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_quick_run_splits_every_turn_into_parts_that_add_up(tmp_path: Path) -> None:
    code, stdout, stderr = run_benchmark("bench.turn", ["--quick", "--out", str(tmp_path)], 150)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    assert_quick_run_output(stdout, steps=1)
    (path,) = tmp_path.glob("turn-*.json")
    assert_plot_beside(path, stdout)
    result = json.loads(path.read_text())
    (step,) = result["steps"]
    assert step["ok"] and step["connected"] == 1 and step["sessions_active_after"] == 0
    assert step["unpaired_calls"] == 0, "the call was paired with its agent session"
    summary = step["summary"]
    assert (summary["turns"], summary["matched"], summary["unmatched"]) == (2, 2, {}), stdout
    for turn in step["turns"]:
        assert set(turn["moments"]) == MOMENTS, turn
        times = [turn["moments"][m] for m in ("caller_sent", *(e for _, _, e in STAGES))]
        assert times == sorted(times), "each moment at or after the one before"
        stages, parts = turn["stages_ms"], turn["parts_ms"]
        assert set(stages) == {name for name, _, _ in STAGES} and set(parts) == set(PARTS)
        assert all(number(v) and v >= 0 for v in (*stages.values(), *parts.values())), turn
        assert turn["total_ms"] > 0
        assert abs(sum(stages.values()) - turn["total_ms"]) <= TOLERANCE_MS
        assert abs(sum(parts.values()) - turn["total_ms"]) <= TOLERANCE_MS
        assert abs(turn["residual_ms"]) <= TOLERANCE_MS
        assert turn["vad"]["silence_ms"] == 500, "the session's silence, on the audio clock"
        assert turn["transcript"] is not None and turn["response_id"]
        if not step["capture"].get("error"):  # root (or CAP_NET_RAW): the downlink's hops
            hops = turn["downlink_stages_ms"]
            assert set(hops) == {"agent", "transceiver", "relay", "caller"}, turn
            assert all(v >= 0 for v in hops.values()), hops
            assert abs(sum(hops.values()) - stages["downlink"]) <= TOLERANCE_MS
    for key in ("total_ms", "residual_ms", *(f"parts_ms.{p}" for p in PARTS)):
        figures = summary
        for name in key.split("."):
            figures = figures[name]
        assert figures["n"] == 2 and number(figures["p50"]) and number(figures["p95"]), key
    assert "residual" in stdout and "vad wait" in stdout
