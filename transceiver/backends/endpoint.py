"""What every WebSocket backend checks of its URL and how it dials TLS: one place for the
websocket, realtime and media-streams backends' ``ws://``/``wss://`` endpoints."""

from __future__ import annotations

import ssl

from yarl import URL


def check_ws_url(url: str, ca_file: str | None) -> URL:
    """The backend URL, parsed: ``ws://HOST...`` or ``wss://HOST...``, a CA file only for
    ``wss``; ValueError naming what is wrong (the option's message at start)."""
    try:
        parsed = URL(url)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"backend url {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("ws", "wss") or not parsed.host:
        raise ValueError(f"backend url must be ws://HOST... or wss://HOST..., got {url!r}")
    if ca_file is not None and parsed.scheme != "wss":
        raise ValueError("a CA file is for wss:// backend urls")
    return parsed


def ws_ssl_context(url: str, ca_file: str | None) -> ssl.SSLContext | None:
    """wss: the TLS context that checks the backend (against ``ca_file``, or the system's CAs);
    None for ws."""
    if URL(url).scheme != "wss":
        return None
    return ssl.create_default_context(cafile=ca_file)
