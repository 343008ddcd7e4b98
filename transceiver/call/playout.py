"""When a call's outbound audio leaves, and with which RTP timestamp: the playout decision.

Sans I/O: time is passed in. ``transceiver.call.outbound_track.BackendAudioTrack`` asks it, for
the slot at the head of its queue, ``decide(now, queued, ahead)``: ``SEND`` the backend's next
packet (or frame) now, ``FILL`` the slot with silence, or ``WAIT``; then tells it what it did
(``advance``), and the slot's RTP timestamp offset is ``pts``: one clock, never a jump, whatever
left when. The track is asked on every push (``on_due``: out of the clock's tick) and on each
of the process's 20 ms ticks (``transceiver.call.outbound``).

The grid: slot ``pts`` is due at ``slot_at``, real time from the first tick on. The rules:

- **Live audio leaves when it comes.** A backend that sends in real time (an echo, a streaming
  backend: audio frame by frame) has a phase of its own against the ticks; its packet leaves on
  the push that brings it, up to ``lead_s`` before its slot (a frame: whatever its phase
  against the grid), instead of waiting for the tick (Janus hands a passed-through packet
  straight back; here that wait was 12 ms on the median, 26 ms at p90: issue 26).
- **A backend ahead of real time is paced.** One whose audio queues up (``ahead``: a model
  server's deltas, 4x real time or more) gets each slot on its time, no sooner, except the first
  after a silence, which may go a slot early (the burst's first frame takes the next slot at
  once). And live audio only runs ahead of the grid within ``lead_s``: past it, it waits too.
- **The grid follows a live source.** A live packet that leaves late (after its slot, by no
  more than ``MAX_HOLD_S``; later, it is a stalled loop's backlog, whose packets are all due at
  once: the grid stays) moves the grid to it: the source is behind the grid, its next packet
  is due a frame after this one, not earlier. One that leaves early pulls the grid toward it
  by at most
  ``creep`` of its duration (2.5 %): after a late spell, the grid comes back to the source within
  a second, so a later hiccup again finds ``lead_s`` to spare; and a source faster than real time
  that pushes frame by frame still gets paced, to 1.025 x real time plus ``lead_s``.
- **A backlog leaves at once.** Live audio that comes after silence filled its slots (a source
  or a path that stalled and then delivers what it held) leaves when it comes too, beyond the
  lead by as much as the silence it displaced (at most ``MAX_CREDIT_S``, 100 ms): the grid
  steps back by what it spends, instead of holding the backlog behind it for the rest of the
  call. The stream runs that much ahead of real time once; the caller's jitter buffer takes it.
- **A slot with nothing is held open for ``hold_s``, then silence fills it.** For live audio the
  hold adapts to the backend's measured jitter (``InterarrivalJitter`` over its pushes: RFC 3550,
  x ``HOLD_JITTER_K``), between ``MIN_HOLD_S`` and ``MAX_HOLD_S``: a hold costs no latency (audio
  that comes meanwhile leaves at once, in its own slot); too short, it puts a silent frame in
  front of audio that was only late (one frame more in the caller's jitter buffer). A backend
  ahead of real time has no hold: its empty slot is silence on its tick.
"""

from __future__ import annotations

from transceiver.call.jitter import InterarrivalJitter

RATE = 48000  # the RTP clock of Opus
SLOT_S = 0.02  # one 20 ms frame
LEAD_S = SLOT_S  # live audio may leave this long before its slot: any phase against the grid
CREEP = 0.025  # the grid moves toward early live audio by this share of each packet's duration
# The hold of an empty slot for live audio: HOLD_JITTER_K x the backend's jitter, within these.
HOLD_JITTER_K = 3.0
MIN_HOLD_S = 0.004  # a clean source still has the event loop's own noise
MAX_HOLD_S = SLOT_S  # beyond it, the next frame's audio is due: the slot was lost
# A live source's audio that comes late, after silence filled its slots (a stalled source or
# path whose backlog then comes at once), leaves at once too, up to the silence it displaced
# and at most this much: the grid steps back by it.
MAX_CREDIT_S = 5 * SLOT_S
# Pushes further apart than this are a pause of the backend (it was quiet), not jitter.
MAX_PUSH_GAP_S = 3 * SLOT_S

SEND = "send"  # the queue's head leaves now, in this slot
FILL = "fill"  # nothing came for this slot: silence fills it now
WAIT = "wait"  # nothing is due yet

__all__ = ["FILL", "LEAD_S", "SEND", "WAIT", "Playout"]


class Playout:
    """One call's outbound slots: which is next (``pts``, ``slot_at``), and whether it is due."""

    def __init__(
        self,
        lead_s: float = LEAD_S,
        creep: float = CREEP,
        min_hold_s: float = MIN_HOLD_S,
        max_hold_s: float = MAX_HOLD_S,
    ) -> None:
        if not 0 <= min_hold_s <= max_hold_s or lead_s < 0 or not 0 <= creep < 1:
            raise ValueError("need 0 <= min_hold_s <= max_hold_s, lead_s >= 0, 0 <= creep < 1")
        self.lead_s = lead_s
        self.creep = creep
        self.min_hold_s = min_hold_s
        self.max_hold_s = max_hold_s
        self.pts = 0  # the next slot's RTP timestamp offset, in 48 kHz samples
        self._slot_at: float | None = None  # when the next slot is due (None: not started)
        self._gap = False  # the last slot was silence
        # Silence filled since live audio last left on or after its slot: what a backlog may
        # still take at once.
        self._credit_s = 0.0
        self._audio_at = float("-inf")  # when live audio last left
        self.jitter = InterarrivalJitter()
        self._pushed_s = 0.0  # media time the backend pushed (its own clock)
        self.pushed_at: float | None = None  # the backend's last push

    @property
    def started(self) -> bool:
        return self._slot_at is not None

    @property
    def slot_at(self) -> float:
        """When the next slot is due on the grid; infinity before the clock started."""
        return float("inf") if self._slot_at is None else self._slot_at

    def start(self, now: float, grid_at: float | None = None) -> None:
        """The first tick starts the grid, at its place on the clock's grid when given (a
        sound card's first read): its slots then fall due on its ticks, not just after them."""
        if self._slot_at is None:
            self._slot_at = now if grid_at is None else min(grid_at, now)

    @property
    def hold_s(self) -> float:
        """How long a live source's empty slot stays open: its jitter x ``HOLD_JITTER_K``."""
        return min(self.max_hold_s, max(self.min_hold_s, HOLD_JITTER_K * self.jitter.jitter_s))

    def pushed(self, now: float, samples: int) -> None:
        """The backend gave ``samples`` of audio at ``now``: its jitter, for the hold."""
        if self.pushed_at is not None and now - self.pushed_at > MAX_PUSH_GAP_S:
            self.jitter.restart()  # it was quiet: a pause is no jitter
        self.pushed_at = now
        self.jitter.update(now, self._pushed_s)
        self._pushed_s += samples / RATE

    def decide(self, now: float, queued: bool, ahead: bool) -> str:
        """``SEND``, ``FILL`` or ``WAIT`` for the next slot, given whether audio is queued for
        it and whether the backend is ahead of real time."""
        if self._slot_at is None:
            return WAIT
        early = self._slot_at - now
        if queued:
            allowed = (SLOT_S if self._gap else 0.0) if ahead else self.lead_s + self._credit_s
            return SEND if early <= allowed else WAIT
        return FILL if -early >= (0.0 if ahead else self.hold_s) else WAIT

    def advance(self, now: float, samples: int, audio: bool, ahead: bool, more: bool) -> int:
        """The slot went at ``now``: ``samples`` long, the backend's ``audio`` (or silence),
        ``more`` audio still queued behind it. Returns its RTP timestamp offset."""
        assert self._slot_at is not None, "advance before start"
        pts = self.pts
        slot_at = self._slot_at
        if not audio:
            if not ahead:
                self._credit_s = min(MAX_CREDIT_S, self._credit_s + samples / RATE)
        elif not ahead:
            if slot_at - now > self.lead_s:  # a backlog in the slots silence took: the grid
                used = slot_at - now - self.lead_s  # steps back by what it spends of them
                self._credit_s = max(0.0, self._credit_s - used)
                slot_at -= used
            if not self._gap and now - self._audio_at >= SLOT_S / 2:
                self._credit_s = 0.0  # audio in its rhythm again, not a backlog's burst
            self._audio_at = now
            if not more:
                if now - self.max_hold_s <= slot_at < now:  # late: the grid follows the source
                    slot_at = now  # (later still: a stall's backlog, due at once; the grid stays)
                elif slot_at > now:  # early: the grid creeps toward it, bounded
                    slot_at = max(now, slot_at - self.creep * samples / RATE)
        self._gap = not audio
        self._slot_at = slot_at + samples / RATE
        self.pts += samples
        return pts
