"""Smoke test of the geo benchmark: ``--quick`` runs end to end through the emulated links and
writes a complete result. The only figure asserted is a lower bound that proves the callers'
media crossed the emulated link both ways (nothing bypassed it); the rest is for people."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.bench_output import assert_quick_run_output, run_benchmark

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SUMMARY_FIELDS = {"connect_ms", "first_echo_ms", "frame_loss_pct", "rtp_loss_pct", "jitter_ms",
                  "forward_jitter_ms", "rtt_ms"}  # fmt: skip
DIRECTION_FIELDS = {"sent", "received", "loss_pct", "loss_ci95_pct", "mean_delay_ms",
                    "sd_delay_ms", "delay_ok", "loss_verdict"}  # fmt: skip


def test_quick_run_calls_through_the_emulated_links(tmp_path: Path) -> None:
    returncode, stdout, stderr = run_benchmark(
        "bench.geo", ["--quick", "--out", str(tmp_path)], timeout_s=120
    )
    assert returncode == 0, stderr[-2000:]
    files = list(tmp_path.glob("geo-*.json"))
    assert len(files) == 1, stdout
    result = json.loads(files[0].read_text())

    assert "direct" in result["variants"]
    for name, variant in result["variants"].items():
        summary = variant["summary"]
        assert summary["connected"] == 2 == summary["heard_own_echo"], summary["errors"]
        assert set(summary) >= SUMMARY_FIELDS
        first = next(iter(variant["links"].values()))
        delay_ms = first["settings"]["delay_ms"]
        for call in variant["calls"]:
            assert call["tone_checks_own"] == call["tone_checks"] >= 1, "its own echo"
            if name == "direct":  # 80 ms each way on the public link, jitter cut at 3 sd
                assert call["rtt_ms"] > 2 * (delay_ms - 3 * first["settings"]["jitter_ms"])
        for link in variant["links"].values():
            assert link["media"]["up"]["packets"] > 0 and link["media"]["down"]["packets"] > 0
            for direction in ("up", "down"):
                assert set(link[direction]) >= DIRECTION_FIELDS
                assert link[direction]["received"] > 0
    if len(result["variants"]) == 2:
        assert set(result["ratios_edge_over_direct"]) == SUMMARY_FIELDS
    assert result["emulator_check"]["verdict"].startswith("SKIP")
    assert_quick_run_output(stdout, steps=len(result["variants"]))
