"""A session's lifecycle as an explicit state machine (in the manner of h11).

Sans-I/O: every transition is a method call with ``now`` passed in and a reason recorded; an
impossible transition raises ``LifecycleError``. ``due(now)`` says which deadline, if any, has
passed, so the I/O side only has to call it periodically.

    new -> connecting -> connected -> closing -> closed
      \\________________\\______________/
              (any state may go to closing; closing goes to closed)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class State(enum.Enum):
    NEW = "new"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSING = "closing"
    CLOSED = "closed"


ALLOWED = {
    State.NEW: {State.CONNECTING, State.CLOSING},
    State.CONNECTING: {State.CONNECTED, State.CLOSING},
    State.CONNECTED: {State.CLOSING},
    State.CLOSING: {State.CLOSED},
    State.CLOSED: set(),
}

END_REASONS = (
    "deleted",  # DELETE from the client
    "ice_timeout",  # ICE did not connect within the deadline
    "first_check_timeout",  # no authenticated connectivity check soon after the answer
    "ice_failed",  # ICE failed or consent was lost (RFC 7675)
    "dtls_failed",
    "peer_closed",  # the client closed DTLS (hung up without DELETE)
    "idle",  # no audio from the caller for the idle timeout
    "max_duration",
    "backend_error",
    "backend_hangup",  # the backend ended the call (session.hangup event)
    "shutdown",  # the transceiver stopped (drain grace over)
    "migrated",  # the call moved to another transceiver (claimed resume token), then hung up here
    "data_channel_limit",  # the caller's SCTP ignored its window: over a cap (call.sctp)
    "error",  # an unexpected exception while setting up or running
)


class LifecycleError(Exception):
    pass


FIRST_CHECK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Limits:
    ice_timeout_s: float
    idle_timeout_s: float
    max_duration_s: float
    # A real client sends its first check within milliseconds of getting the answer and repeats
    # it for seconds; an offer that is never followed by one only holds a slot, so it gets much
    # less time than a client that is connecting.
    first_check_timeout_s: float = FIRST_CHECK_TIMEOUT_S


@dataclass
class Lifecycle:
    created_at: float
    limits: Limits
    state: State = State.NEW
    end_reason: str | None = None
    connecting_at: float | None = None
    first_check_at: float | None = None
    ice_connected_at: float | None = None
    dtls_connected_at: float | None = None
    last_audio_at: float | None = None
    offer_at: float | None = None  # when its POST arrived (before the offer was read)
    first_audio_in_at: float | None = None  # the caller's first audio frame
    first_audio_out_at: float | None = None  # the first audio frame toward the caller
    history: list[tuple[State, float, str]] = field(default_factory=list)

    def _to(self, state: State, now: float, reason: str) -> None:
        if state not in ALLOWED[self.state]:
            raise LifecycleError(f"{self.state.value} -> {state.value} ({reason})")
        self.state = state
        self.history.append((state, now, reason))

    def start_connecting(self, now: float) -> None:
        self._to(State.CONNECTING, now, "answer sent")
        self.connecting_at = now

    def check_received(self, now: float) -> None:
        """An authenticated connectivity check arrived (the first one counts)."""
        if self.first_check_at is None:
            self.first_check_at = now

    def ice_connected(self, now: float) -> float | None:
        """Record ICE connected; returns seconds since the offer the first time."""
        if self.ice_connected_at is None and self.state is State.CONNECTING:
            self.ice_connected_at = now
            return now - self.created_at
        return None

    def dtls_connected(self, now: float) -> float | None:
        """DTLS up: the session is connected; returns seconds since the offer the first time."""
        if self.state is not State.CONNECTING:
            return None
        self.dtls_connected_at = now
        self.last_audio_at = now
        self._to(State.CONNECTED, now, "dtls connected")
        return now - self.created_at

    def audio_received(self, now: float) -> None:
        self.last_audio_at = now
        if self.first_audio_in_at is None:
            self.first_audio_in_at = now

    def audio_sent(self, now: float) -> None:
        if self.first_audio_out_at is None:
            self.first_audio_out_at = now

    def connect_phases(self) -> dict[str, float]:
        """How long each step of connecting took, in seconds, for the steps that happened:

        - ``offer``: reading and checking the offer (from the POST, if known, to the session);
        - ``answer``: the session's answer (offer applied, backend opened, answer made);
        - ``first_check``: from the answer to the client's first authenticated check (the HTTP
          response, the client applying it: mostly the client's time);
        - ``ice``: from that check to ICE connected (our check's round trip, the nomination);
        - ``dtls``: from ICE to DTLS connected (the handshake);
        - ``audio_in`` / ``audio_out``: from DTLS connected to the first audio frame from the
          caller / toward it (for an echo, the first echo).
        """
        marks = {
            "offer": (self.offer_at, self.created_at),
            "answer": (self.created_at, self.connecting_at),
            "first_check": (self.connecting_at, self.first_check_at),
            "ice": (self.first_check_at, self.ice_connected_at),
            "dtls": (self.ice_connected_at, self.dtls_connected_at),
            "audio_in": (self.dtls_connected_at, self.first_audio_in_at),
            "audio_out": (self.dtls_connected_at, self.first_audio_out_at),
        }
        return {
            phase: end - start
            for phase, (start, end) in marks.items()
            if start is not None and end is not None
        }

    def close(self, now: float, reason: str) -> bool:
        """Begin closing; False (and nothing changes) if already closing or closed."""
        if reason not in END_REASONS:
            raise LifecycleError(f"unknown end reason {reason!r}")
        if self.state in (State.CLOSING, State.CLOSED):
            return False
        self.end_reason = reason
        self._to(State.CLOSING, now, reason)
        return True

    def closed(self, now: float) -> None:
        self._to(State.CLOSED, now, self.end_reason or "error")

    def due(self, now: float) -> str | None:
        """The end reason of a deadline that has passed, if any."""
        if self.state in (State.CLOSING, State.CLOSED):
            return None
        if now - self.created_at >= self.limits.max_duration_s:
            return "max_duration"
        if self.state is not State.CONNECTED:
            if now - self.created_at >= self.limits.ice_timeout_s:
                return "ice_timeout"
            # Counted from the answer, not the offer: a slow backend must not eat the client's
            # time to send its first check.
            if (
                self.first_check_at is None
                and self.connecting_at is not None
                and now - self.connecting_at >= self.limits.first_check_timeout_s
            ):
                return "first_check_timeout"
            return None
        assert self.last_audio_at is not None
        if now - self.last_audio_at >= self.limits.idle_timeout_s:
            return "idle"
        return None
