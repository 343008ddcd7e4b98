"""The ``media-streams`` backend: calls answered by a telephony bot over Twilio's Media Streams.

``protocol`` decides (sans-I/O: the messages, the bot's audio, its marks and clears), ``g711``
is the telephone's codec, ``backend`` moves the bytes with aiohttp. docs/media-streams.md.
"""

from transceiver.backends.media_streams.backend import (
    MediaStreamsBackend,
    MediaStreamsBackendConfig,
    MediaStreamsSession,
)

__all__ = ["MediaStreamsBackend", "MediaStreamsBackendConfig", "MediaStreamsSession"]
