"""Smoke test of the peer benchmark: ``--quick`` runs rtcedge's opus echo and Janus's EchoTest
end to end (Janus in the benchmark's own network namespace) and writes a complete result, in
which Janus echoed the callers' audio. Run through ``rtcedge bench sessions --reference janus``,
the spelling issue 26 gives it.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
Janus (Debian package ``janus``) is installed by ``.ci/run``: a missing one fails the test."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from testbed.janus import janus_missing
from testbed.netns import NAME_PREFIX, ip
from tests.support.bench_output import assert_plot_beside, assert_quick_run_output, run_benchmark

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="Janus runs in a network namespace: Linux and root (CAP_NET_ADMIN)",
)

TRIAL_FIELDS = {
    "server",
    "sessions",
    "round",
    "connected",
    "connect_ms",
    "echo_delay_ms",
    "frame_loss_pct",
    "rtp_loss_pct",
    "server_cpu_pct",
    "cpu_per_call_pct",
    "parts_cpu_pct",
    "echo_frames",
    "ok",
    "calls",
}
SERVER_FIGURES = {"cpu_per_call_pct", "worst_loss_pct", "connect_ms", "echo_delay_ms"}


def test_quick_run_measures_both_servers_and_janus_echoes(tmp_path: Path) -> None:
    assert not janus_missing(), f"{janus_missing()} (.ci/run installs it)"
    args = ["bench", "sessions", "--reference", "janus", "--quick", "--out", str(tmp_path)]
    code, stdout, stderr = run_benchmark("rtcedge", args, timeout_s=150)
    assert code == 0, stderr[-2000:]
    (path,) = tmp_path.glob("peer-*.json")
    result = json.loads(path.read_text())
    assert_plot_beside(path, stdout)
    assert_quick_run_output(stdout, steps=2)

    assert result["config"]["sessions"] == [2] and result["config"]["janus_event_loops"] == 0
    assert [t["server"] for t in result["trials"]] == ["rtcedge", "janus"], result["notes"]
    for trial in result["trials"]:
        assert set(trial) >= TRIAL_FIELDS
        assert trial["connected"] == 2, trial["errors"]
        assert trial["server_cpu_pct"] > 0 and trial["server_on_its_core"]
        assert trial["echo_frames"] > 0, f"{trial['server']} echoed no audio"
        assert "worst" in trial["frame_loss_pct"]
        for call in trial["calls"]:
            assert call["echo_frames"] > 0 and call["rtp_packets"] > 0
            assert call["tone_checks_own"] == call["tone_checks"] >= 1, "its own tone"
            assert call["echo_delay_ms"] is not None  # passed through, matched byte for byte
    rtcedge, janus = result["trials"]
    assert set(rtcedge["parts_cpu_pct"]) == {"transceiver", "relay"}
    assert set(janus["parts_cpu_pct"]) == {"janus"}
    assert janus["janus_open_ms"]["n"] == 2  # session and handle made before the offer

    row = result["summary"]["by_n"]["2"]
    assert set(row["rtcedge"]) >= SERVER_FIGURES and set(row["janus"]) >= SERVER_FIGURES
    assert row["cpu_ratio"] > 0
    assert row["janus"]["echo_frames"] > 0 and row["janus"]["worst_loss_pct"] is not None
    assert "Janus" in stdout and "ratio" in stdout

    # The namespace and its veth went with the run.
    link = result["link"]
    assert link["namespace"].startswith(NAME_PREFIX)
    assert link["namespace"] not in ip("netns", "list")
    assert link["host"] not in ip("-4", "addr", "show")
