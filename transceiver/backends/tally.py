"""A backend's running totals over its calls (``Backend.counters``): what the calls that ended
did, plus what the live ones did so far, so a total never goes down when a call ends."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar


class Counted(Protocol):
    def counters(self) -> Mapping[str, int]: ...


S = TypeVar("S", bound=Counted)


class SessionTally(Generic[S]):
    """The live sessions of a backend and the totals of those that ended."""

    def __init__(self) -> None:
        self.live: set[S] = set()
        self._ended: collections.Counter[str] = collections.Counter()

    def add(self, session: S) -> None:
        self.live.add(session)

    def ended(self, session: S) -> None:
        """A call closed: its counts join the ended calls' totals."""
        self.live.discard(session)
        self._ended.update(session.counters())

    def totals(self) -> dict[str, int]:
        totals = collections.Counter(self._ended)
        for session in self.live:
            totals.update(session.counters())
        return dict(totals)
