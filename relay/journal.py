"""A worker's confirmed flows mirrored into shared memory, so its replacement starts with them.

The supervisor maps one journal per worker before forking; a worker writes a fixed-size record
when a confirmed flow is created or re-pointed and clears it when the flow expires (never per
packet). After a crash the replacement worker inherits the same sockets *and* this journal, so the
packets that queued in the socket during the gap are forwarded instead of dropped as unknown.

Record layout (32 bytes): state (1 B: 0 free, 1 live) | key length (1 B) | target id, low 16
bits (2 B, big endian) | key (up to 24 B, see relay.addrkey) | target id, high 16 bits (2 B: a
route's id, relay.flows.ROUTE_ID_BASE and up) | padding. The state byte is written last and
cleared first, so a worker killed mid-write leaves at most one record that reads as free.

A journal made with ``extra_len`` (a cluster relay's peer flows, relay.edgeflows) appends to each
record a length byte and up to ``extra_len`` bytes (the edge's sockaddr), written before the
state byte like the rest; its records are 32 bytes longer per 32 bytes of extra.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator

RECORD_LEN = 32
MAX_KEY_LEN = 24
_HIGH = 4 + MAX_KEY_LEN  # offset of the target id's high 16 bits


class FlowJournal:
    def __init__(self, capacity: int, extra_len: int = 0) -> None:
        self.capacity = capacity
        self.extra_len = extra_len
        extra_records = -(-(extra_len + 1) // RECORD_LEN) if extra_len else 0  # length byte too
        self.record_len = RECORD_LEN * (1 + extra_records)
        self._map = mmap.mmap(-1, max(capacity * self.record_len, mmap.PAGESIZE))
        self._mv = memoryview(self._map)
        self._free: list[int] = []

    def attach(self) -> Iterator[tuple[int, bytes, int]]:
        """Called once by a (re)started worker: yields (slot, key, target id) of live records and
        rebuilds the free list."""
        mv = self._mv
        self._free = []
        for slot in range(self.capacity - 1, -1, -1):
            off = slot * self.record_len
            if mv[off] != 1:
                self._free.append(slot)
                continue
            n = mv[off + 1]
            if not 0 < n <= MAX_KEY_LEN:
                mv[off] = 0
                self._free.append(slot)
                continue
            yield (
                slot,
                bytes(mv[off + 4 : off + 4 + n]),
                int.from_bytes(mv[off + _HIGH : off + _HIGH + 2], "big") << 16
                | int.from_bytes(mv[off + 2 : off + 4], "big"),
            )

    def write(self, key: bytes, target_id: int, slot: int = -1, extra: bytes = b"") -> int:
        """Store (or overwrite) a record; returns its slot, or -1 when the journal is full."""
        if slot < 0:
            if not self._free:
                return -1
            slot = self._free.pop()
        off = slot * self.record_len
        mv = self._mv
        mv[off] = 0
        if self.extra_len:
            if len(extra) > self.extra_len:
                raise ValueError("journal extra longer than its records hold")
            mv[off + RECORD_LEN] = len(extra)
            mv[off + RECORD_LEN + 1 : off + RECORD_LEN + 1 + len(extra)] = extra
        mv[off + 1] = len(key)
        tid = target_id.to_bytes(4, "big")
        mv[off + 2 : off + 4] = tid[2:]
        mv[off + _HIGH : off + _HIGH + 2] = tid[:2]
        mv[off + 4 : off + 4 + len(key)] = key
        mv[off] = 1
        return slot

    def extra(self, slot: int) -> bytes:
        """The extra bytes of a live record (b"" in a journal without them)."""
        if not self.extra_len:
            return b""
        off = slot * self.record_len + RECORD_LEN
        n = min(self._mv[off], self.extra_len)
        return bytes(self._mv[off + 1 : off + 1 + n])

    def clear(self, slot: int) -> None:
        if slot >= 0:
            self._mv[slot * self.record_len] = 0
            self._free.append(slot)

    def reset(self) -> None:
        """Forget everything (used when the worker's table is rebuilt from scratch)."""
        self._mv[:] = bytes(len(self._mv))
        self._free = list(range(self.capacity - 1, -1, -1))
