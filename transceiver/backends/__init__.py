"""Built-in backends (the interface is in ``transceiver.backend``): ``echo``, embedded;
``websocket``, a bridge to an external service in our protocol; ``realtime``, a bridge to an
OpenAI-Realtime-compatible model server; ``media-streams``, a bridge to a telephony bot over
Twilio's Media Streams protocol; ``grpc``, our protocol over one gRPC stream per call.
``create_backend`` builds one by name."""

from __future__ import annotations

from dataclasses import fields

from transceiver.backend import AUDIO_SAMPLE_RATE, BACKEND_NAMES, PCM16, Backend
from transceiver.backends.echo import EchoBackend
from transceiver.backends.websocket import WebSocketBackend, WebSocketBackendConfig


def create_backend(name: str = "echo", url: str | None = None, **options) -> Backend:
    """Build a backend from configuration: 'echo' (no url) or 'websocket' (ws:// or wss:// url).

    ``options`` are backend-specific (for ``echo``: ``audio_format``, 'pcm16' or 'opus', and
    ``sample_rate``; for ``realtime``: see ``RealtimeBackendConfig``; for ``media-streams``:
    ``MediaStreamsBackendConfig``; for ``grpc``: ``GrpcBackendConfig``; for ``websocket``: see
    ``WebSocketBackendConfig``). Any problem raises ValueError naming it, so a bad deployment
    fails at start, not at the first call.
    """
    if name == "echo":
        if url is not None:
            raise ValueError(f"the echo backend takes no url (got {url!r})")
        audio_format = options.pop("audio_format", PCM16)
        sample_rate = options.pop("sample_rate", AUDIO_SAMPLE_RATE)
        if options:
            raise ValueError(
                f"unknown option(s) for the echo backend: {', '.join(sorted(options))}"
            )
        return EchoBackend(audio_format, sample_rate)
    if name == "realtime":
        if not url:
            raise ValueError("the realtime backend needs a url (ws(s)://host/.../realtime?model=)")
        from transceiver.backends.realtime import RealtimeBackend, RealtimeBackendConfig

        known = {f.name for f in fields(RealtimeBackendConfig)} - {"url"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown option(s) for the realtime backend: {', '.join(unknown)}")
        return RealtimeBackend(RealtimeBackendConfig(url=url, **options))
    if name == "media-streams":
        if not url:
            raise ValueError("the media-streams backend needs a url (ws://... or wss://...)")
        from transceiver.backends.media_streams import (
            MediaStreamsBackend,
            MediaStreamsBackendConfig,
        )

        known = {f.name for f in fields(MediaStreamsBackendConfig)} - {"url"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"unknown option(s) for the media-streams backend: {', '.join(unknown)}"
            )
        return MediaStreamsBackend(MediaStreamsBackendConfig(url=url, **options))
    if name == "grpc":
        return _grpc_backend(url, options)
    if name == "websocket":
        if not url:
            raise ValueError("the websocket backend needs a url (ws://... or wss://...)")
        return WebSocketBackend(WebSocketBackendConfig.from_options(url, options))
    raise ValueError(f"unknown backend {name!r} (expected one of: {', '.join(BACKEND_NAMES)})")


def _grpc_backend(url: str | None, options: dict) -> Backend:
    """The grpc backend, its configuration checked before grpc is imported (only here)."""
    if not url:
        raise ValueError("the grpc backend needs a url (grpc://HOST:PORT or grpcs://HOST:PORT)")
    from transceiver.backends.grpc import GrpcBackendConfig

    known = {f.name for f in fields(GrpcBackendConfig)} - {"url"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option(s) for the grpc backend: {', '.join(unknown)}")
    config = GrpcBackendConfig(url=url, **options)
    from transceiver.backends.grpc.backend import GrpcBackend

    return GrpcBackend(config)
