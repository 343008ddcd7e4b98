"""What every benchmark's ``--quick`` run prints: a plan and a progress line per step with an
estimate of what is left, no PASS/FAIL against an acceptance criterion it cannot meet, nothing
that reads as a failure ("NOT PACED", "no step passed", "median nan"), and at both ends that its
figures are not judged; and the plot it draws beside its JSON."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness.verdict import QUICK_END, QUICK_PLAN, QUICK_SKIP

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIN_PLOT_BYTES = 15_000  # a blank canvas of this size is a few KB; axes, text and data are more

PROGRESS_LINE = re.compile(r"^\[(\d+)/(\d+)\] .*\(\d+ s elapsed, ~\d+ s left\)$")
PLAN_LINE = re.compile(r"^.*: \d+ steps?, about \d+ (s|min)")
READS_AS_FAILURE = re.compile(r"\bnan\b|NOT PACED|no step passed", re.IGNORECASE)


def assert_quick_run_output(stdout: str, steps: int) -> None:
    lines = stdout.splitlines()
    progress = [m for line in lines if (m := PROGRESS_LINE.match(line))]
    assert [(int(m[1]), int(m[2])) for m in progress] == [
        (i, steps) for i in range(1, steps + 1)
    ], stdout
    assert not any(re.search(r"\b(PASS|FAIL)\b", line) for line in lines), stdout
    assert QUICK_SKIP in stdout, stdout
    plans = [line for line in lines if PLAN_LINE.match(line)]
    assert len(plans) == 1 and plans[0].endswith(QUICK_PLAN), stdout
    assert QUICK_END in lines, stdout
    assert not READS_AS_FAILURE.search(stdout), stdout


def assert_plot_beside(result_json: Path, stdout: str) -> None:
    """The run drew its plot: a PNG named like its JSON, said in its output, with more in it than
    an empty canvas."""
    png = result_json.with_suffix(".png")
    assert f"plot: {png}" in stdout, stdout
    assert_png(png)


def assert_png(path: Path) -> None:
    """``path`` is a PNG image of a readable size and more than a blank canvas."""
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), path
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    assert width >= 600 and height >= 300, (width, height)
    assert len(data) > MIN_PLOT_BYTES, f"{path}: {len(data)} bytes, a blank canvas?"


def run_benchmark(module: str, args: list[str], timeout_s: float) -> tuple[int, str, str]:
    """``python -m MODULE ARGS`` as a child process: (return code, stdout, stderr); stopped by
    SIGTERM (it stops the processes it started) and failed if it outlives ``timeout_s``."""
    cmd = [sys.executable, "-m", module, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=30)
        pytest.fail(f"{module} did not finish in {timeout_s:.0f} s: {stdout[-2000:]}")
    return proc.returncode, stdout, stderr
