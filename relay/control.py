"""The supervisor's published routing configuration, shared with workers through memory.

The supervisor alone reads files and resolves DNS; it publishes the result (keyring and the
transceiver allowlist as resolved addresses) as a JSON document in a shared mapping guarded by a
sequence counter. Workers poll the counter on their coarse tick and re-read only when it changed,
so SIGHUP reloads and background DNS changes reach every worker without dropping a flow and
without any I/O or locking in the workers.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass, field

from common.hint import Keyring

_HEAD = struct.Struct("<QI")  # sequence (odd while writing), payload length


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """What a worker needs to route: the keyring, transceiver id -> (host, port), and cluster
    id -> the (host, port) of that cluster's relay ingresses, most preferred first (--route)."""

    keyring: Keyring
    transceivers: dict[int, tuple[str, int]]
    routes: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc = {
            "keyring": json.loads(self.keyring.to_json()),
            "transceivers": {str(k): [h, p] for k, (h, p) in sorted(self.transceivers.items())},
            "routes": {str(c): [[h, p] for h, p in a] for c, a in sorted(self.routes.items())},
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RoutingConfig:
        doc = json.loads(raw)
        return cls(
            keyring=Keyring.from_json(json.dumps(doc["keyring"])),
            transceivers={int(k): (h, int(p)) for k, (h, p) in doc["transceivers"].items()},
            routes={
                int(c): tuple((h, int(p)) for h, p in a) for c, a in doc.get("routes", {}).items()
            },
        )


class ControlBlock:
    """Single writer (supervisor), many readers (workers); a seqlock over one payload."""

    def __init__(self, capacity: int = 1 << 20) -> None:
        self._map = mmap.mmap(-1, capacity)
        self._mv = memoryview(self._map)
        self.capacity = capacity - _HEAD.size

    def publish(self, raw: bytes) -> int:
        if len(raw) > self.capacity:
            raise ValueError(f"routing configuration too large ({len(raw)} bytes)")
        seq, _ = _HEAD.unpack_from(self._mv, 0)
        _HEAD.pack_into(self._mv, 0, seq + 1, 0)
        self._mv[_HEAD.size : _HEAD.size + len(raw)] = raw
        _HEAD.pack_into(self._mv, 0, seq + 2, len(raw))
        return (seq + 2) // 2

    def generation(self) -> int:
        """Completed publications so far (0 before the first)."""
        return _HEAD.unpack_from(self._mv, 0)[0] // 2

    def read(self) -> tuple[int, bytes]:
        """A consistent (generation, payload) snapshot; retries while a write is in progress."""
        while True:
            seq, n = _HEAD.unpack_from(self._mv, 0)
            if seq % 2:
                continue
            raw = bytes(self._mv[_HEAD.size : _HEAD.size + n])
            if _HEAD.unpack_from(self._mv, 0)[0] == seq:
                return seq // 2, raw
