"""A test skipped for want of an extra is a skip that names it, except where every extra is
installed (.ci/run: CI_EVERY_EXTRA=1), where it fails the run. A real pytest run in a child."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.extras import EVERY_EXTRA

ROOT = Path(__file__).resolve().parent.parent
NEEDS_AN_EXTRA = """
import pytest

pytest.importorskip("no_such_module_for_rtcedge", reason="the nope extra: pip install -e '.[nope]'")


def test_it():
    pass
"""


def run_pytest(tmp_path: Path, every_extra: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_needs_an_extra.py").write_text(NEEDS_AN_EXTRA)
    (tmp_path / "test_needs_none.py").write_text("def test_it():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != EVERY_EXTRA}
    env["PYTHONPATH"] = str(ROOT)
    if every_extra:
        env[EVERY_EXTRA] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "tests.support.extras"]
    return subprocess.run(
        [*command, "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip


def test_a_missing_extra_is_a_skip_naming_it(tmp_path):
    result = run_pytest(tmp_path, every_extra=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the nope extra: pip install -e '.[nope]'" in result.stdout


def test_where_every_extra_is_installed_a_missing_one_fails_the_run(tmp_path):
    result = run_pytest(tmp_path, every_extra=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "tests skipped for want of the extra(s) nope: add them to .ci/run" in result.stdout
