"""Tests that need an optional extra skip without it, naming the extra (``pytest.importorskip(
MODULE, reason="the X extra: pip install -e '.[X]'")``), so that the README's ``pip install -e
'.[test]' && python3 -m pytest -q`` collects cleanly; where every extra is installed (.ci/run
sets ``CI_EVERY_EXTRA=1``) such a skip fails the run instead: an extra dropped from CI's pip line
would otherwise turn its tests into quiet skips. A pytest plugin (tests/conftest.py uses its
hook; ``-p tests.support.extras`` elsewhere)."""

from __future__ import annotations

import os
import re

import pytest

EVERY_EXTRA = "CI_EVERY_EXTRA"  # not RTCEDGE_*: `rtcedge up` names those it does not read
MISSING_EXTRA = re.compile(r"the ([\w-]+) extra: pip install")


def missing_extras(skipped: list[pytest.TestReport]) -> list[str]:
    """The extras named by the reasons of these skips."""
    found = (MISSING_EXTRA.search(str(report.longrepr)) for report in skipped)
    return sorted({m.group(1) for m in found if m})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(EVERY_EXTRA) != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    missing = missing_extras(reporter.stats.get("skipped", [])) if reporter else []
    if missing:
        reporter.write_line(
            f"!! {EVERY_EXTRA}=1 (every extra installed), yet tests skipped for want of the "
            f"extra(s) {', '.join(missing)}: add them to .ci/run's pip install line",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
