"""What a benchmark needs from the machine, checked before it starts anything: a missing
program either stops the run at once with how to install it, or (when only some of the run
needs it) leaves that part out with a note saying so."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class Program:
    """A program looked up on PATH, and how to get it."""

    name: str
    install_hint: str

    def found(self) -> bool:
        return shutil.which(self.name) is not None

    def missing_note(self, needed_for: str) -> str:
        return f"{self.name} not found on PATH ({self.install_hint}): {needed_for} skipped"

    def require(self, needed_for: str) -> None:
        """Stop the run before it starts when the program is missing."""
        if not self.found():
            raise click.ClickException(
                f"{needed_for} needs {self.name}, which is not on PATH; {self.install_hint}"
            )


REDIS_SERVER = Program(
    "redis-server",
    "install it: apt-get install redis-server, brew install redis, or dnf install redis",
)
