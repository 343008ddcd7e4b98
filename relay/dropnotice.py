"""A log line when the relay drops packets for a reason an operator can fix, rate-limited.

Drops are counters (relay.counters), visible only to whoever reads ``/metrics``. One reason is
nearly always a configuration mistake rather than an attack: ``denied_address``, a client on a
loopback or private network that the built-in deny list refuses (relay.addresspolicy). A relay
and a transceiver tried by hand on one machine, or a deployment whose clients come through a
VPN, drop every call that way, and the only symptom is calls that never connect. So the
supervisor, which reads every worker's counters anyway, says so in its log, with the counts and
the option that fixes it: at once for the first drops, then at most once per ``interval_s``
(never per packet: the workers only count). Sans-I/O: totals and ``now`` come in.
"""

from __future__ import annotations

from dataclasses import dataclass

NOTICE_INTERVAL_S = 60.0

DENIED_ADVICE = (
    "their addresses are in the relay's deny list (built in: loopback, private, link-local and "
    "other special-purpose ranges; docs/relay.md, 'Denied client addresses'); if your clients "
    "really come from such a network, allow it with --allow-network CIDR"
)


@dataclass
class DropNotice:
    """Watches one drop counter's total; ``observe`` returns the line to log, or None."""

    what: str  # the drops, in words: "from denied client addresses (denied_address)"
    advice: str  # what to do about them, naming the option
    interval_s: float = NOTICE_INTERVAL_S
    reported: int = 0  # the total the last line accounted for
    reported_at: float | None = None  # when it was logged; None: never

    def observe(self, total: int, now: float) -> str | None:
        """A line for the drops since the last one: at once the first time, then no sooner
        than ``interval_s`` after the previous line."""
        if total <= self.reported:
            return None
        if self.reported_at is not None and now - self.reported_at < self.interval_s:
            return None
        return self._line(total, now)

    def flush(self, total: int, now: float) -> str | None:
        """At stop: the drops no line accounted for yet, whatever the interval."""
        return self._line(total, now) if total > self.reported else None

    def _line(self, total: int, now: float) -> str:
        since = "since start"
        if self.reported_at is not None:
            since = f"in the last {now - self.reported_at:.0f} s"
        count = total - self.reported
        self.reported, self.reported_at = total, now
        packets = "packet" if count == 1 else "packets"
        return f"dropped {count} {packets} {self.what} {since} ({total} in all): {self.advice}"
