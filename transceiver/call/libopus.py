"""libopus's decoder, called directly: Opus packets to PCM16 at any of Opus's rates.

A backend may take the caller's audio at 8, 16, 24 or 48 kHz (docs/backend-protocol.md). libopus
decodes to each of them natively (RFC 6716 4: the decoder's output rate is its own choice), so no
resampler is needed, but FFmpeg's wrapper (PyAV, which aiortc uses) always asks libopus for 48
kHz. This binds the five functions of libopus's decoder API with ctypes instead: the system's
libopus (Debian's libopus0) or, when there is none, the copy PyAV's wheel carries. No maintained
Python binding exists (opuslib's last release is from 2018). Calling libopus straight also skips
PyAV's packet and frame objects, so it costs less per packet than ``opus.Decoder``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from functools import cache

__all__ = ["RATES", "LibopusDecoder", "LibopusError", "load"]

RATES = (8000, 12000, 16000, 24000, 48000)  # what libopus decodes to
MAX_PACKET_MS = 120  # the longest Opus packet (RFC 6716 3.2.1): the PCM buffer's size
OPUS_OK = 0


class LibopusError(Exception):
    """libopus is missing or refused something (a packet it cannot decode)."""


@cache
def load() -> ctypes.CDLL:
    """The libopus shared library, with the decoder functions' signatures declared."""
    candidates = []
    found = ctypes.util.find_library("opus")
    if found:
        candidates.append(found)
    try:
        import av

        libs = os.path.join(os.path.dirname(av.__file__), os.pardir, "av.libs")
        candidates.extend(sorted(glob.glob(os.path.join(libs, "libopus*.so*"))))
    except ImportError:
        pass
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        raise LibopusError("libopus not found (install libopus0, or PyAV's wheel carries one)")
    lib.opus_decoder_create.restype = ctypes.c_void_p
    lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.opus_decoder_destroy.restype = None
    lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
    lib.opus_decode.restype = ctypes.c_int
    lib.opus_decode.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
    ]
    lib.opus_strerror.restype = ctypes.c_char_p
    lib.opus_strerror.argtypes = [ctypes.c_int]
    return lib


class LibopusDecoder:
    """Opus packets -> PCM16 LE mono at ``rate`` (one per call: libopus keeps state)."""

    _state: int | None = None

    def __init__(self, rate: int) -> None:
        if rate not in RATES:
            raise ValueError(f"libopus decodes at {RATES} Hz, not {rate}")
        self._lib = lib = load()
        error = ctypes.c_int(0)
        state = lib.opus_decoder_create(rate, 1, ctypes.byref(error))
        if error.value != OPUS_OK or not state:
            raise LibopusError(f"opus_decoder_create: {lib.opus_strerror(error.value).decode()}")
        self._state = state
        self.rate = rate
        self._max_samples = rate * MAX_PACKET_MS // 1000
        self._pcm = ctypes.create_string_buffer(self._max_samples * 2)

    def decode(self, packet: bytes) -> bytes:
        """One packet's PCM (its duration, whatever the packet says: 2.5 to 120 ms)."""
        if self._state is None:
            raise LibopusError("decoder is closed")
        n = self._lib.opus_decode(self._state, packet, len(packet), self._pcm, self._max_samples, 0)
        if n < 0:
            raise LibopusError(f"libopus refused the packet: {self._lib.opus_strerror(n).decode()}")
        return self._pcm.raw[: n * 2]

    def conceal(self, samples: int) -> bytes:
        """``samples`` of packet-loss concealment (a lost packet's place)."""
        if self._state is None:
            raise LibopusError("decoder is closed")
        samples = min(samples, self._max_samples)
        n = self._lib.opus_decode(self._state, None, 0, self._pcm, samples, 0)
        if n < 0:
            raise LibopusError(f"libopus concealment failed: {self._lib.opus_strerror(n).decode()}")
        return self._pcm.raw[: n * 2]

    def close(self) -> None:
        if self._state is not None:
            self._lib.opus_decoder_destroy(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()
