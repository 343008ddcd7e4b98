"""What the caller has actually been sent of each assistant audio item: the exact truncate.

A Realtime model server sends an answer's audio faster than real time; the transceiver queues it
and plays it at 20 ms per frame. When the caller interrupts, the server must be told how much of
the item the caller heard (``conversation.item.truncate``'s ``audio_end_ms``), or the model's
context keeps words nobody heard. A client-side player can only estimate that; the transceiver
knows it to the frame, because its outbound queue is FIFO: every frame given to it and no longer
queued has left toward the caller.

The media-streams backend keeps its bot's marks here too: the audio between two marks is an
item, and a mark is due once its item has been sent in full (``forget_played`` returns it).

Sans-I/O: ``queued`` (frames still waiting in the outbound queue) is read by the caller of these
methods from the transceiver and passed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["ItemAudio", "Playout", "Truncation"]

MAX_ITEMS = 64  # items remembered; older ones were played long ago (the queue holds 30 s)


@dataclass
class ItemAudio:
    """One assistant item's audio as queued toward the caller."""

    item_id: str
    content_index: int
    frames: int = 0  # 20 ms frames queued for this item (the last one padded with silence)
    samples: int = 0  # real samples in them: the item's true length


@dataclass(frozen=True)
class Truncation:
    """Where an item was cut: what ``conversation.item.truncate`` says."""

    item_id: str
    content_index: int
    audio_end_ms: int


class Playout:
    """The order of items in the outbound queue and how many frames each put there."""

    def __init__(self, sample_rate: int, frame_samples: int, max_items: int = MAX_ITEMS) -> None:
        self.sample_rate = sample_rate
        self.frame_samples = frame_samples
        self.max_items = max_items
        self._items: deque[ItemAudio] = deque()
        self._queued_total = 0  # frames given to the queue since the last clear, all items

    def queued(self, item_id: str, content_index: int, frames: int, samples: int) -> None:
        """``frames`` of ``item_id`` were given to the outbound queue, ``samples`` of them real."""
        last = self._items[-1] if self._items else None
        if last is None or last.item_id != item_id or last.content_index != content_index:
            last = ItemAudio(item_id, content_index)
            self._items.append(last)
            if len(self._items) > self.max_items:
                dropped = self._items.popleft()
                self._queued_total -= dropped.frames
        last.frames += frames
        last.samples += samples
        self._queued_total += frames

    def playing(self, queued: int) -> Truncation | None:
        """The item the caller is hearing now, and how much of it it has been sent; None when
        every queued frame has been sent (nothing would be cut)."""
        sent = self._queued_total - queued
        if queued <= 0:
            return None
        for item in self._items:
            if sent < item.frames:
                samples = min(sent * self.frame_samples, item.samples)
                return Truncation(
                    item.item_id, item.content_index, samples * 1000 // self.sample_rate
                )
            sent -= item.frames
        return None

    def cut(self, queued: int) -> Truncation | None:
        """The caller interrupted and the queue is being emptied: where the playing item was cut.
        Forgets every item (what was queued will never be played)."""
        truncation = self.playing(queued)
        self._items.clear()
        self._queued_total = 0
        return truncation

    def forget_played(self, queued: int) -> list[ItemAudio]:
        """Drop the items already sent in full (keeps the table short on long calls); returns
        them, oldest first (an item of no frames is sent once all before it are)."""
        sent = self._queued_total - queued
        played: list[ItemAudio] = []
        while self._items and self._items[0].frames <= sent:
            item = self._items.popleft()
            played.append(item)
            sent -= item.frames
            self._queued_total -= item.frames
        return played

    def frames_before_end_of(self, item_id: str, queued: int) -> int | None:
        """Frames still to be sent before ``item_id`` has been sent in full (0: it has); None
        when no such item is queued. When to look again, without polling every frame."""
        sent = self._queued_total - queued
        ahead = 0
        for item in self._items:
            ahead += item.frames
            if item.item_id == item_id:
                return max(ahead - sent, 0)
        return None
