"""The worker loop's coalescing wait (--coalesce-us): fewer wake-ups at moderate load.

At saturation every recvmmsg returns a full batch; at a moderate rate (40 echo calls send a
worker a datagram every ~250 us) each datagram would pay a whole wake-up of its own (poll, a
recvmmsg returning one, the Python round, one send). So, when datagrams come densely, a round
that found only a few is followed by a short sleep, and the next round takes all that came
meanwhile with one recvmmsg and one sendmmsg per socket.

Sans I/O: the loop tells this what happened (how long it was idle, how many a round found) and
it answers whether to sleep ``wait_s``; the loop owns the sockets and the clock.
"""

from __future__ import annotations


class Coalescing:
    """When the worker sleeps briefly before its next round.

    An idle worker woken by a datagram forwards it at once. If its idle spells before such
    datagrams (a moving average over the last few, so one short gap in sparse traffic does not
    start a wait that gathers nothing) were shorter than ``dense_s``, a round that found fewer
    than ``few`` datagrams is followed by a sleep of ``wait_s``. The worker stops waiting when
    a wait gathered fewer than two, and goes back to poll(2) when a round finds nothing; a
    loaded worker (``few`` or more per round) never sleeps. A datagram waits at most ``wait_s``
    plus the kernel's timer slack (~50 us)."""

    IDLE_WEIGHT = 0.25  # the moving average's weight of the latest idle spell

    def __init__(self, coalesce_us: int, batch_size: int) -> None:
        self.coalesce_us = coalesce_us
        self.batch_size = batch_size
        self.dense = False  # the recent idle spells were short: rounds that find few wait
        self.waited = False  # the round before this one was followed by a wait
        self.idle_avg_s = 1.0

    @property
    def wait_s(self) -> float:
        return self.coalesce_us / 1e6

    @property
    def dense_s(self) -> float:
        """Idle for less than this before datagrams woke it: the worker is to wait (three are
        due per wait; at two, a sequential ping every 500 us would wait at each)."""
        return self.wait_s / 3

    @property
    def few(self) -> int:
        """Below this many datagrams in a round, wait (0: never); an eighth of a batch."""
        return max(1, self.batch_size // 8) if self.coalesce_us > 0 else 0

    def idled(self, seconds: float) -> None:
        """A round found nothing and the worker slept ``seconds`` in poll(2) until woken."""
        self.idle_avg_s += (seconds - self.idle_avg_s) * self.IDLE_WEIGHT
        self.dense = self.idle_avg_s < self.dense_s
        self.waited = False

    def wait_after(self, found: int) -> bool:
        """A round found ``found`` (> 0) datagrams: whether to sleep ``wait_s`` now."""
        if self.waited and found < 2:
            self.dense = False  # the last wait gathered one: not dense enough to wait
        self.waited = self.dense and found < self.few
        return self.waited
