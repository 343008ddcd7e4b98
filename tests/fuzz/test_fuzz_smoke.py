"""The fuzz harnesses run: every seed replays clean, a short fuzzing run finds nothing, and the
runner turns a finding into a failing exit status. Long runs are a separate CI step (fuzz/run.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# The fuzz extra; .ci/run installs every extra and fails on this skip.
pytest.importorskip("atheris", reason="the fuzz extra: pip install -e '.[fuzz]'")

from fuzz.run import TARGETS

ROOT = Path(__file__).resolve().parents[2]
SMOKE_RUNS = 20_000
SMOKE_SECONDS = 5


def fuzz_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fuzz.run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def executions(output: str) -> int:
    found = re.findall(r"^== fuzz \w+: (\d+) executions", output, re.MULTILINE)
    assert found, output[-3000:]
    return int(found[-1])


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_seed_replays_without_a_finding(target):
    seeds = list((ROOT / "fuzz" / "corpus" / target).iterdir())
    assert seeds, f"no seed corpus for {target}"
    result = fuzz_run(target, "--runs", str(len(seeds)), "--seed", "1")
    assert result.returncode == 0, result.stdout[-4000:]
    assert executions(result.stdout) >= len(seeds)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_short_fuzzing_run_finds_nothing(target):
    result = fuzz_run(target, "--runs", str(SMOKE_RUNS), "--seconds", str(SMOKE_SECONDS))
    assert result.returncode == 0, result.stdout[-4000:]
    assert executions(result.stdout) > 100


def test_a_finding_fails_the_run_and_names_the_crash_file(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "boom").write_bytes(b"a crash input")
    result = fuzz_run("selftest", "--runs", "10", "--corpus", str(corpus), "--no-seeds")
    assert result.returncode == 1, result.stdout[-4000:]
    crash = re.search(r"^!! FINDING (\S+)", result.stdout, re.MULTILINE)
    assert crash and Path(crash.group(1)).read_bytes() == b"a crash input"


def test_every_run_must_be_bounded():
    result = fuzz_run("stun")
    assert result.returncode == 2
    assert "--seconds or --runs" in result.stderr


def test_observations_read_as_expected_not_as_failures():
    """The aioice seeds make aioice raise: the output says these are expected and why they are
    harmless, and nothing in it looks like a failure."""
    seeds = list((ROOT / "fuzz" / "corpus" / "aioice").iterdir())
    result = fuzz_run("aioice", "--runs", str(len(seeds)), "--seed", "1")
    assert result.returncode == 0, result.stdout[-4000:]
    assert "observation (expected, not a failure) aioice_raises_on_accepted_stun" in result.stdout
    assert result.stdout.count("why it is harmless: ") == 1  # once per kind
    assert "??" not in result.stdout and "OBSERVATION" not in result.stdout
