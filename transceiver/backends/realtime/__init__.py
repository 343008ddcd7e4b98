"""The ``realtime`` backend: calls answered by an OpenAI-Realtime-compatible model server.

``conversation`` decides (sans-I/O), ``playout`` knows what the caller heard, ``policy`` is the
operator's allowlist of caller events, ``backend`` moves the bytes with the ``openai`` package.
"""

from transceiver.backends.realtime.backend import (
    RealtimeBackend,
    RealtimeBackendConfig,
    RealtimeSession,
)

__all__ = ["RealtimeBackend", "RealtimeBackendConfig", "RealtimeSession"]
