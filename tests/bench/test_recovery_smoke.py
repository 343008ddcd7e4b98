"""Smoke test of the recovery benchmark: one trial of the fast scenarios, end to end.

It checks that each fail-over was survived (the call went on, the echo came back) and that the
result is complete; not the gap figures against their targets (a shared machine is noisy).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIOS = ("worker", "relay-redis", "path")


def test_one_trial_of_each_fast_scenario_recovers_and_is_recorded(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "bench.recovery", "--trials", "1", "--out", str(tmp_path)]
    for name in SCENARIOS:
        args += ["--scenario", name]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=30)
        pytest.fail(f"benchmark did not finish in 120 s: {stdout[-2000:]}")
    assert proc.returncode == 0, stderr[-2000:]
    files = list(tmp_path.glob("recovery-*.json"))
    assert len(files) == 1, stdout
    result = json.loads(files[0].read_text())
    assert set(result) == set(SCENARIOS)
    for name, s in result.items():
        assert s["trials"] == 1 and len(s["gap_ms"]) == 1
        assert 0 <= s["gap_ms"][0] < 5_000, f"{name}: the echo came back (else >= 5 s)"
        assert s["sessions_ended_during_trials"] == {}, f"{name}: the call survived"
        assert s["caller_jitter_buffer"] == "rtcedge"
    for name in SCENARIOS:
        assert any(line.startswith(name) for line in stdout.splitlines()), stdout
