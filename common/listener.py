"""The bounds of one HTTP listener: how many connections it holds open, and how long a connection
may take to send a request's headers (the transceiver's WHIP and ``--metrics`` ports, the relay's
``--metrics`` port).

Neither aiohttp nor ``http.server`` has a header timeout: a client that opens a connection and
sends its request line a byte at a time (slowloris) holds a descriptor, and in the relay's
threading server a thread, for as long as it likes (issue 21 #7: 400 such connections held 95 s).
``ConnectionGuard`` is the sans-I/O core both services share, with ``now`` passed in: the I/O
around it asks ``admit`` for each accepted connection, says when a request's handler starts and
when it is done, and closes what ``expired`` returns. The deadline runs whenever a connection is
not inside a handler: from the accept to the first request's headers, and from each response to
the next request's headers (an idle keep-alive connection is closed after the same time). The
body of a request is the handler's to bound (the transceiver's ``--body-timeout``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from common.config import ConfigError

K = TypeVar("K", bound=Hashable)

HEADER_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 1024
# Why a listener closed a connection itself, the label of the services' counters.
CLOSE_REASONS = ("max_connections", "header_timeout")


@dataclass(frozen=True)
class ListenerLimits:
    """Seconds a connection may wait outside a handler (for its headers), and connections open
    at once; beyond the cap a newcomer is refused at once (HTTP 503, closed)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS

    def validate(self, timeout_option: str, max_option: str) -> ListenerLimits:
        """ConfigError naming the option of the first bad value; returns self for chaining."""
        if not self.header_timeout_s > 0:
            raise ConfigError(timeout_option, f"must be > 0, got {self.header_timeout_s}")
        if self.max_connections < 1:
            raise ConfigError(max_option, f"must be >= 1, got {self.max_connections}")
        return self


class ConnectionGuard(Generic[K]):
    """The open connections of one listener (filled by whoever connects; bound: the limits'
    ``max_connections``, newcomers beyond it refused) and the deadlines of those waiting for
    headers.

    Every deadline is ``now + header_timeout_s`` when set, so the waiting table, kept in the
    order deadlines were set, is also in deadline order: ``expired`` pops from its front only.
    """

    def __init__(self, limits: ListenerLimits) -> None:
        self.limits = limits
        self._waiting: OrderedDict[K, float] = OrderedDict()  # connection -> deadline
        self._busy: set[K] = set()  # inside a handler: no deadline
        self.closed = dict.fromkeys(CLOSE_REASONS, 0)  # what the guard made its I/O close

    @property
    def open(self) -> int:
        return len(self._waiting) + len(self._busy)

    def admit(self, conn: K, now: float) -> bool:
        """A connection was accepted: True to serve it (its header deadline starts now), False
        to refuse it (the listener is full; counted ``max_connections``)."""
        if self.open >= self.limits.max_connections:
            self.closed["max_connections"] += 1
            return False
        self._waiting[conn] = now + self.limits.header_timeout_s
        return True

    def request_started(self, conn: K) -> None:
        """A request's headers are in and its handler runs: no deadline until it is done."""
        if self._waiting.pop(conn, None) is not None:
            self._busy.add(conn)

    def request_done(self, conn: K, now: float) -> None:
        """A handler returned: the connection has ``header_timeout_s`` for its next request."""
        if conn in self._busy:
            self._busy.discard(conn)
            self._waiting[conn] = now + self.limits.header_timeout_s

    def forget(self, conn: K) -> None:
        """The connection closed (whoever closed it)."""
        self._waiting.pop(conn, None)
        self._busy.discard(conn)

    def expired(self, now: float) -> list[K]:
        """Connections past their deadline, forgotten here and counted ``header_timeout``: the
        I/O closes them."""
        out: list[K] = []
        while self._waiting:
            conn, deadline = next(iter(self._waiting.items()))
            if deadline > now:
                break
            del self._waiting[conn]
            out.append(conn)
        self.closed["header_timeout"] += len(out)
        return out
