"""Smoke test of the relay benchmark's rate mode: ``--rate ... --quick`` runs end to end, with
the C reference built and measured, and writes a complete result and its plot.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench_output import assert_plot_beside, assert_quick_run_output

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
    pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the C reference"),
]
RATES = ("2000", "4000")


def test_quick_rate_run_measures_every_forwarder_at_every_rate(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "bench.relay_pps", "--rate", ",".join(RATES), "--quick"]
    proc = subprocess.Popen(
        [*args, "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the benchmark stops the processes it started
        stdout, stderr = proc.communicate(timeout=20)
        pytest.fail(f"benchmark did not finish in 90 s: {stdout[-2000:]}")
    assert proc.returncode == 0, stderr[-2000:]
    (path,) = tmp_path.glob("relay_rate-*.json")
    result = json.loads(path.read_text())
    assert_plot_beside(path, stdout)

    variants = ["relay", "relay-nowait", "relay-500us", "c"]
    assert result["variants"] == variants and not result["skipped"]
    summary = result["summary"]
    assert list(summary) == [*RATES, "saturated"]
    for key, entry in summary.items():
        assert set(entry["variants"]) == set(variants), key
        for name, v in entry["variants"].items():
            assert v["packets_per_s"]["median"] > 0, (key, name)
            assert v["cpu_us_per_packet"]["median"] > 0, (key, name)
            if key != "saturated":
                assert v["delay_us"]["pings"] > 0, (key, name)
        assert {"relay/c", "relay-nowait/c", "relay/relay-nowait"} <= set(entry["ratios"]), key
    names = {c["name"] for c in result["criteria"]}
    assert any("4000/s" in n and "saturated cost" in n for n in names)
    assert any("relay / C saturated" in n for n in names)
    assert_quick_run_output(stdout, steps=len(variants) * (len(RATES) + 1))
