"""Smoke test of the relay benchmark: ``--quick`` runs end to end and writes a complete result.

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


def test_quick_run_writes_complete_result(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.relay_pps", "--quick", "--out", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the benchmark stops the processes it started
        stdout, stderr = proc.communicate(timeout=20)
        pytest.fail(f"benchmark did not finish in 60 s: {stdout[-2000:]}")
    assert proc.returncode == 0, stderr[-2000:]
    files = list(tmp_path.glob("relay_pps-*.json"))
    assert len(files) == 1, stdout
    result = json.loads(files[0].read_text())
    assert_plot_beside(files[0], stdout)

    assert result["config"]["rounds"] == 2
    assert result["config"]["window_s"] == 1.0
    measured = {k: v for k, v in result["variants"].items() if "skipped" not in v}
    assert {"relay", "route", "plain"} <= set(measured)
    for name, variant in measured.items():
        summary = variant["summary"]
        assert summary["rounds"] == 2, name
        assert summary["packets_per_s"]["median"] > 0, name
        assert summary["cpu_us_per_packet"]["median"] > 0, name
        assert len(variant["windows"]) == 2, name
        for window in variant["windows"]:
            assert window["packets_per_s"] > 0, name
            assert {"cpu_fraction_min", "listen_drops", "saturated"} <= set(window), name

    ratio = result["ratios"]["relay/plain"]
    assert ratio["n"] > 0 and ratio["median"] > 0
    assert "relay/route" not in result["ratios"], "the route is no reference forwarder"
    tier = result["tier_ratios"]["route/relay"]
    assert tier["n"] > 0 and tier["median"] > 0
    paths = result["latency"]["paths"]
    assert {"direct", "plain", "relay"} <= set(paths)
    for name, path in paths.items():
        assert path["samples"] > 0, name
        assert path["p50_us"] > 0, name
    assert {c["name"].split()[0] for c in result["criteria"]} == {"cpu", "added"}
    assert_quick_run_output(stdout, steps=2 * len(measured) + 1)
