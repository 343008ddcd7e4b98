"""docs/deploy.md's examples as the tests run them: every fenced ``sh`` or ``yaml`` block, named by
its section and its place in it, so that a test takes the text the reader copies rather than a
copy of its own that could drift (tests/deploy/test_deploy_docs.py checks that each is taken)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.render import ROOT

DEPLOY = ROOT / "docs" / "deploy.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


@dataclass(frozen=True)
class Example:
    section: str  # the ``## `` heading above it
    index: int  # 0 for the section's first example
    lang: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.section} #{self.index}"

    def commands(self) -> list[str]:
        """Its shell commands, one per logical line (continuations joined), comments kept."""
        return [c for c in self.text.replace("\\\n", " ").splitlines() if c.strip()]


def examples(doc: Path = DEPLOY) -> list[Example]:
    """Every ``sh`` and ``yaml`` block of ``doc``, in order."""
    text = doc.read_text()
    found: list[Example] = []
    for match in FENCE.finditer(text):
        if match.group(1) not in ("sh", "yaml"):
            continue
        heading = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        section = heading[-1] if heading else ""
        index = sum(1 for e in found if e.section == section)
        found.append(Example(section, index, match.group(1), match.group(2)))
    return found


def example(section: str, index: int = 0) -> Example:
    """The ``index``-th example of ``section`` (what a test names to say it runs it)."""
    for e in examples():
        if (e.section, e.index) == (section, index):
            return e
    raise LookupError(f"docs/deploy.md has no example {section} #{index}")


def run_shell(
    text: str, *, cwd: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """``text`` run by bash as a reader would paste it, but stopping at the first failure."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
