"""Built-in backends (the interface is in ``transceiver.backend``): ``echo``, embedded, and
``websocket``, a bridge to an external service; ``create_backend`` builds one by name."""

from __future__ import annotations

from transceiver.backend import BACKEND_NAMES, PCM16, Backend
from transceiver.backends.echo import EchoBackend
from transceiver.backends.websocket import WebSocketBackend, WebSocketBackendConfig


def create_backend(name: str = "echo", url: str | None = None, **options) -> Backend:
    """Build a backend from configuration: 'echo' (no url) or 'websocket' (ws:// or wss:// url).

    ``options`` are backend-specific (for ``echo``: ``audio_format``, 'pcm16' or 'opus'; for
    ``websocket``: see ``WebSocketBackendConfig``). Any problem raises ValueError naming it, so a
    bad deployment fails at start, not at the first call.
    """
    if name == "echo":
        if url is not None:
            raise ValueError(f"the echo backend takes no url (got {url!r})")
        audio_format = options.pop("audio_format", PCM16)
        if options:
            raise ValueError(
                f"unknown option(s) for the echo backend: {', '.join(sorted(options))}"
            )
        return EchoBackend(audio_format)
    if name == "websocket":
        if not url:
            raise ValueError("the websocket backend needs a url (ws://... or wss://...)")
        return WebSocketBackend(WebSocketBackendConfig.from_options(url, options))
    raise ValueError(f"unknown backend {name!r} (expected one of: {', '.join(BACKEND_NAMES)})")
