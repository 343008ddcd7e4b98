"""Smoke test of the session benchmark: ``--quick`` runs end to end and writes a complete result.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench_output import assert_plot_beside, assert_quick_run_output

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

STEP_FIELDS = {
    "sessions",
    "connected",
    "connect_ms",
    "first_echo_ms",
    "frame_loss_pct",
    "rtp_loss_pct",
    "echo_lag_ms",
    "transceiver_cpu_pct",
    "cpu_per_session_pct",
    "clients_cpu_pct",
    "relay_cpu_pct",
    "sessions_active_after",
    "ok",
    "calls",
}
CALL_FIELDS = {
    "offer_to_connected_s",
    "offer_to_first_echo_s",
    "echo_frames",
    "expected_frames",
    "frame_loss_pct",
    "rtp_packets",
    "rtp_loss_pct",
    "tone_checks",
    "tone_checks_own",
}


def test_quick_run_connects_calls_that_hear_their_own_echo(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.sessions", "--quick", "--out", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the benchmark stops the processes it started
        stdout, stderr = proc.communicate(timeout=30)
        pytest.fail(f"benchmark did not finish in 120 s: {stdout[-2000:]}")
    assert proc.returncode == 0, stderr[-2000:]
    files = list(tmp_path.glob("sessions-*.json"))
    assert len(files) == 1, stdout
    result = json.loads(files[0].read_text())
    assert_plot_beside(files[0], stdout)

    assert result["config"]["sessions"] == [2]
    assert result["config"]["window_s"] == 2.0
    assert set(result["formats"]) == {"pcm16", "opus"}
    for figures in result["formats"].values():
        assert figures["transceiver_idle_cpu_pct"] > 0
        assert figures["transceiver_idle_rss_mb"] > 10
    assert {"transceiver", "clients", "relay"} <= set(result["cpus"])
    # The codec-only reference, measured on the transceiver's core before and after the steps.
    for when in ("before", "after"):
        codec = result["codec"][when]
        assert codec["calls"] == 2 and codec["decode_pct"] > 0 and codec["encode_pct"] > 0
    assert result["codec"]["per_call_pct"] > 0
    assert [s["audio_format"] for s in result["steps"]] == ["pcm16", "opus"], result["notes"]
    for step in result["steps"]:
        check_step(step)
    for summary in result["summary"]["by_format"].values():
        assert {"sessions_per_core_derived", "codec_ratio", "rss_mb_per_call", "criterion"} <= set(
            summary
        )
        assert summary["criterion"]["basis"] in {"measured", "derived"}
    assert_quick_run_output(stdout, steps=2)


def check_step(step: dict) -> None:
    assert set(step) >= STEP_FIELDS
    assert step["connected"] == 2, step["errors"]
    assert step["transceiver_cpu_pct"] > 0
    assert step["sessions_active_after"] == 0, "every call hung up"
    assert len(step["calls"]) == 2
    for call in step["calls"]:
        assert set(call) >= CALL_FIELDS, call
        assert call["connected"], call["error"]
        assert call["offer_to_first_echo_s"] is not None, "heard its own echo"
        assert call["echo_frames"] > 0
        assert call["rtp_packets"] > 0
        assert call["tone_checks"] >= 1
        assert call["tone_checks_own"] == call["tone_checks"], "no cross-talk"
    assert step["transceiver_rss_mb"] > 10
