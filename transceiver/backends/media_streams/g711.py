"""G.711 mu-law, the telephone's 8 kHz codec, by the standard library's ``audioop`` (C).

Python 3.13 removed ``audioop``; its maintained port, ``audioop-lts``, installs the same module
there (a dependency with a ``python_version >= "3.13"`` marker in pyproject.toml), so the same
import works on every Python this project supports. On 3.11 and 3.12 the import warns that the
module is deprecated: that warning is about 3.13, where the port takes over, so it is silenced
here, once.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

__all__ = ["SILENCE", "pcm16_to_ulaw", "ulaw_to_pcm16"]

SILENCE = 0xFF  # the mu-law byte of a zero sample


def pcm16_to_ulaw(pcm: bytes) -> bytes:
    """PCM16 LE mono to mu-law, a byte per sample."""
    return audioop.lin2ulaw(pcm, 2)


def ulaw_to_pcm16(ulaw: bytes) -> bytes:
    """Mu-law to PCM16 LE mono, two bytes per sample."""
    return audioop.ulaw2lin(ulaw, 2)
