"""Smoke test of the recovery benchmark: ``--quick`` (one trial of the fast scenarios) end to
end, and what it does on a machine without redis-server.

It checks that each fail-over was survived (the call went on, the echo came back) and that the
result is complete; not the gap figures against their targets (a shared machine is noisy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench_output import assert_plot_beside, assert_quick_run_output

QUICK_SCENARIOS = ("worker", "relay-redis", "path")
INSTALL_HINT = "apt-get install redis-server"


def run_recovery(args: list[str], out: Path, env: dict[str, str] | None = None) -> tuple:
    """The benchmark as a child process: (return code, stdout, stderr)."""
    cmd = [sys.executable, "-m", "bench.recovery", "--out", str(out), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the benchmark stops the processes it started
        stdout, stderr = proc.communicate(timeout=30)
        pytest.fail(f"benchmark did not finish in 120 s: {stdout[-2000:]}")
    return proc.returncode, stdout, stderr


def without_redis(tmp_path: Path) -> dict[str, str]:
    """This environment with a PATH that holds no redis-server (the benchmark starts its other
    children with this interpreter's absolute path)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    return {**os.environ, "PATH": str(empty)}


def test_quick_run_recovers_shows_progress_and_judges_nothing(tmp_path: Path) -> None:
    code, stdout, stderr = run_recovery(["--quick"], tmp_path)
    assert code == 0, stderr[-2000:]
    files = list(tmp_path.glob("recovery-*.json"))
    assert len(files) == 1, stdout
    result = json.loads(files[0].read_text())
    assert_plot_beside(files[0], stdout)
    assert set(result) == set(QUICK_SCENARIOS)
    for name, s in result.items():
        assert s["trials"] == 1 and len(s["gap_ms"]) == 1
        assert 0 <= s["gap_ms"][0] < 5_000, f"{name}: the echo came back (else >= 5 s)"
        assert s["sessions_ended_during_trials"] == {}, f"{name}: the call survived"
        assert s["caller_jitter_buffer"] == "rtcedge"
    for name in QUICK_SCENARIOS:
        assert any(line.startswith(name) for line in stdout.splitlines()), stdout
    assert_quick_run_output(stdout, steps=len(QUICK_SCENARIOS))


def test_without_redis_server_a_redis_only_run_stops_at_once_with_an_install_hint(
    tmp_path: Path,
) -> None:
    env = without_redis(tmp_path)
    code, stdout, stderr = run_recovery(["--scenario", "relay-redis"], tmp_path, env)
    assert code == 1, stdout + stderr
    assert "redis-server" in stderr and INSTALL_HINT in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert not list(tmp_path.glob("recovery-*.json")), "nothing ran"


def test_without_redis_server_its_scenarios_are_skipped_with_a_note(tmp_path: Path) -> None:
    args = ["--quick", "--scenario", "worker", "--scenario", "path"]
    code, stdout, stderr = run_recovery(args, tmp_path, without_redis(tmp_path))
    assert code == 0, stderr[-2000:]
    assert "Traceback" not in stderr, stderr
    first = stdout.splitlines()[0]
    assert first.startswith("note: redis-server not found") and INSTALL_HINT in first, stdout
    result_json = next(tmp_path.glob("recovery-*.json"))
    result = json.loads(result_json.read_text())
    assert "redis-server" in result["path"]["skipped"]
    assert_plot_beside(result_json, stdout)  # drawn with the skipped scenario named
    assert result["worker"]["trials"] == 1
    assert_quick_run_output(stdout, steps=1)


def test_quick_scale_down_moves_every_call_and_judges_nothing(tmp_path: Path) -> None:
    """SIGTERM the transceiver carrying four callers, once: each moves (same call, another
    transceiver) and its gap is measured; the quick run does not judge the target."""
    code, stdout, stderr = run_recovery(["--quick", "--scenario", "scale-down"], tmp_path)
    assert code == 0, stderr[-2000:]
    result_json = next(tmp_path.glob("recovery-*.json"))
    s = json.loads(result_json.read_text())["scale-down"]
    assert s["trials"] == 1 and s["callers"] == 4 and s["transceivers"] == 3
    assert s["moves"] == {"moved": 4}, s["moves"]
    assert len(s["gap_ms"]) == 4 and all(0 <= g < 10_000 for g in s["gap_ms"]), s["gap_ms"]
    assert s["target_p95_ms"] == 250 and s["max_ms"] == max(s["gap_ms"])
    assert_plot_beside(result_json, stdout)
    assert_quick_run_output(stdout, steps=1)
