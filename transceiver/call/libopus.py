"""libopus called directly: Opus packets to PCM16 at any of Opus's rates, and the outbound
encoder with its settings set, and readable, by libopus's own CTLs.

A backend may take the caller's audio at 8, 16, 24 or 48 kHz (docs/backend-protocol.md). libopus
decodes to each of them natively (RFC 6716 4: the decoder's output rate is its own choice), so no
resampler is needed, but FFmpeg's wrapper (PyAV, which aiortc uses) always asks libopus for 48
kHz. The encoder is here for its settings (``EncoderSettings``): FFmpeg's wrapper sets them once
and offers no way to read them back, so neither a test nor an operator could tell what a call's
encoder really runs with; ``LibopusEncoder.get`` asks libopus itself (``OPUS_GET_COMPLEXITY``...).
Calling libopus straight also skips PyAV's frame and packet objects, so it costs less per frame.

The functions are bound with ctypes: no maintained Python binding exists (opuslib's last release
is from 2018). The library is the copy PyAV's wheel carries, the one PyAV's own codecs already
loaded into the process (libopus 1.6.1 with av 16), so that this encoder and FFmpeg's make the
same packets (``tests/transceiver/test_libopus.py``) and the version is the wheel's, the same on
a developer's machine and in the image; the system's (Debian's libopus0, 1.3.1 on bookworm) only
where PyAV's wheel has none (a PyAV built against the system's).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from dataclasses import asdict, dataclass
from functools import cache

__all__ = [
    "APPLICATIONS",
    "DEFAULTS",
    "RATES",
    "EncoderSettings",
    "LibopusDecoder",
    "LibopusEncoder",
    "LibopusError",
    "load",
]

RATES = (8000, 12000, 16000, 24000, 48000)  # what libopus decodes to (and encodes from)
MAX_PACKET_MS = 120  # the longest Opus packet (RFC 6716 3.2.1): the PCM buffer's size
MAX_PACKET_BYTES = 1275  # one frame's most (RFC 6716 3.4 [R2]): the encoder's output buffer
OPUS_OK = 0
# opus_defines.h: the applications, and the CTL requests (a SET's GET is the next number).
APPLICATIONS = {"voip": 2048, "audio": 2049, "restricted-lowdelay": 2051}
SET_APPLICATION, GET_APPLICATION = 4000, 4001
SET_BITRATE, GET_BITRATE = 4002, 4003
SET_VBR, GET_VBR = 4006, 4007
SET_COMPLEXITY, GET_COMPLEXITY = 4010, 4011
SET_INBAND_FEC, GET_INBAND_FEC = 4012, 4013
SET_PACKET_LOSS_PERC, GET_PACKET_LOSS_PERC = 4014, 4015
SET_DTX, GET_DTX = 4016, 4017
SET_VBR_CONSTRAINT, GET_VBR_CONSTRAINT = 4020, 4021
GET_LOOKAHEAD = 4027
GET_IN_DTX = 4049
# The ranges the options take: libopus's own for complexity and loss; for the bitrate, what
# RFC 7587 3.1.1 gives Opus (6 to 510 kbit/s; libopus would clamp anything else silently).
BITRATE_RANGE_BPS = (6000, 510000)
COMPLEXITY_RANGE = (0, 10)
PACKET_LOSS_RANGE_PCT = (0, 100)


@dataclass(frozen=True)
class EncoderSettings:
    """What a call's outbound encoder runs with (the ``--opus-*`` options, docs/transceiver.md
    "The Opus encoder"). The defaults are what FFmpeg's wrapper ran with before the options
    existed: ``voip`` (speech: SILK or hybrid, a high-pass filter), 32 kbit/s, complexity 10
    (FFmpeg's default, above libopus's own 9), no in-band FEC, no expected loss, no DTX. Always:
    unconstrained VBR (FFmpeg's ``vbr=on``; libopus's own default is constrained) and 20 ms
    frames."""

    application: str = "voip"  # APPLICATIONS
    bitrate_bps: int = 32000
    complexity: int = 10
    fec: bool = False  # in-band FEC (SILK's LBRR): only with packet_loss_pct > 0
    packet_loss_pct: int = 0  # the loss the encoder expects, and protects against
    dtx: bool = False  # discontinuous transmission: no packets in silence

    def describe(self) -> str:
        """One line, as the benchmarks and the logs say it."""
        fec = f"FEC on at {self.packet_loss_pct}% expected loss" if self.fec else "FEC off"
        if not self.fec and self.packet_loss_pct:
            fec += f" ({self.packet_loss_pct}% expected loss)"
        return (
            f"{self.application}, {self.bitrate_bps} bit/s, complexity {self.complexity}, "
            f"{fec}, DTX {'on' if self.dtx else 'off'}"
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


DEFAULTS = EncoderSettings()


class LibopusError(Exception):
    """libopus is missing or refused something (a packet it cannot decode)."""


@cache
def load() -> ctypes.CDLL:
    """The libopus shared library, with the decoder functions' signatures declared."""
    candidates = []
    try:
        import av

        libs = os.path.join(os.path.dirname(av.__file__), os.pardir, "av.libs")
        candidates.extend(sorted(glob.glob(os.path.join(libs, "libopus*.so*"))))
    except ImportError:
        pass
    found = ctypes.util.find_library("opus")
    if found:
        candidates.append(found)
    for name in candidates:  # PyAV's copy first (the module's docstring says why)
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
    lib.opus_get_version_string.restype = ctypes.c_char_p
    lib.opus_get_version_string.argtypes = []
    lib.opus_encoder_create.restype = ctypes.c_void_p
    lib.opus_encoder_create.argtypes = [
        ctypes.c_int32,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_int),
    ]
    lib.opus_encoder_destroy.restype = None
    lib.opus_encoder_destroy.argtypes = [ctypes.c_void_p]
    lib.opus_encode.restype = ctypes.c_int32
    lib.opus_encode.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_int32,
    ]
    # opus_encoder_ctl is variadic: no argtypes, each call passes typed values (an int32 to
    # set, a pointer to an int32 to get), which the x86-64 and AArch64 Linux ABIs pass as
    # they pass fixed arguments.
    lib.opus_encoder_ctl.restype = ctypes.c_int
    return lib


def version() -> str:
    """The loaded libopus's version ("libopus 1.6.1"), for the benchmarks' reports."""
    return str(load().opus_get_version_string().decode())


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


class LibopusEncoder:
    """PCM16 LE mono at ``rate``, 20 ms a call -> one Opus packet (one per call: libopus keeps
    state), with ``settings`` set by CTL at creation."""

    _state: int | None = None

    def __init__(self, rate: int, settings: EncoderSettings = DEFAULTS) -> None:
        if rate not in RATES:
            raise ValueError(f"libopus encodes from {RATES} Hz, not {rate}")
        if settings.application not in APPLICATIONS:
            raise ValueError(f"unknown application {settings.application!r} ({APPLICATIONS})")
        self._lib = lib = load()
        error = ctypes.c_int(0)
        state = lib.opus_encoder_create(
            rate, 1, APPLICATIONS[settings.application], ctypes.byref(error)
        )
        if error.value != OPUS_OK or not state:
            raise LibopusError(f"opus_encoder_create: {lib.opus_strerror(error.value).decode()}")
        self._state = state
        self.rate = rate
        self.settings = settings
        self.frame_samples = rate // 50
        self._frame_bytes = self.frame_samples * 2
        self._out = ctypes.create_string_buffer(MAX_PACKET_BYTES)
        for request, value in (
            (SET_BITRATE, settings.bitrate_bps),
            (SET_COMPLEXITY, settings.complexity),
            (SET_VBR, 1),
            (SET_VBR_CONSTRAINT, 0),
            (SET_INBAND_FEC, int(settings.fec)),
            (SET_PACKET_LOSS_PERC, settings.packet_loss_pct),
            (SET_DTX, int(settings.dtx)),
        ):
            self._ctl(request, ctypes.c_int32(value))

    def _ctl(self, request: int, argument: object) -> None:
        if self._state is None:
            raise LibopusError("encoder is closed")
        status = self._lib.opus_encoder_ctl(ctypes.c_void_p(self._state), request, argument)
        if status != OPUS_OK:
            error = self._lib.opus_strerror(status).decode()
            raise LibopusError(f"opus_encoder_ctl({request}): {error}")

    def get(self, request: int) -> int:
        """An ``OPUS_GET_*`` of the encoder (``GET_COMPLEXITY``...): what libopus runs with."""
        value = ctypes.c_int32(0)
        self._ctl(request, ctypes.byref(value))
        return value.value

    def encode(self, pcm: bytes) -> bytes:
        """One 20 ms frame's packet; a DTX frame (``settings.dtx``, in silence) is 1-2 bytes."""
        if self._state is None:
            raise LibopusError("encoder is closed")
        if len(pcm) != self._frame_bytes:
            raise ValueError(f"a 20 ms frame at {self.rate} Hz is {self._frame_bytes} bytes")
        n = self._lib.opus_encode(self._state, pcm, self.frame_samples, self._out, MAX_PACKET_BYTES)
        if n < 0:
            raise LibopusError(f"libopus refused to encode: {self._lib.opus_strerror(n).decode()}")
        return ctypes.string_at(self._out, n)

    def close(self) -> None:
        if self._state is not None:
            self._lib.opus_encoder_destroy(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()
