"""What the ``grpc`` backend needs, checked at start without importing grpc: a deployment that
names a bad URL or option fails before the first call, whether or not the extra is installed."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from yarl import URL

__all__ = ["SCHEMES", "CallLimits", "GrpcBackendConfig"]

SCHEMES = {"grpc": 80, "grpcs": 443}  # plaintext HTTP/2 and TLS, each with its default port


@dataclass(frozen=True)
class CallLimits:
    """What one backend may make the transceiver hold; past each, the call degrades or ends."""

    # The backend's audio queued toward the caller ahead of what was played (1000: 20 s at 20 ms
    # a frame), under the outbound track's own bound (1500, transceiver.call.outbound_track); a
    # backend that sends more ahead (a flood faster than real time) loses the excess, counted.
    max_playout_frames: int = 1000
    max_protocol_errors: int = 100  # malformed messages dropped before the call ends

    def __post_init__(self) -> None:
        if not 1 <= self.max_playout_frames <= 1500:
            raise ValueError(f"max_playout_frames must be 1..1500, got {self.max_playout_frames!r}")
        if not self.max_protocol_errors >= 1:
            raise ValueError("max_protocol_errors must be >= 1")


@dataclass(frozen=True)
class GrpcBackendConfig:
    """Everything the grpc backend needs; validated once, at start."""

    url: str  # grpc://HOST[:PORT] (plaintext HTTP/2) or grpcs://HOST[:PORT] (TLS)
    bearer: str | None = field(default=None, repr=False)  # sent as authorization: Bearer
    ca_file: str | None = None  # grpcs: the CA bundle that signs the backend (default: system's)
    connect_timeout_s: float = 5.0  # TCP + TLS + HTTP/2 + the stream open + SessionAccept
    keepalive_s: float = 20.0  # HTTP/2 PING interval while a call is up
    keepalive_timeout_s: float = 10.0  # no PING ack within it: the connection (the call) ends
    close_timeout_s: float = 2.0  # bound on SessionEnd + the half-close + the backend's end
    max_message_bytes: int = 4 * 1024 * 1024  # largest backend message; bigger ends the call
    max_queued_frames: int = 50  # caller audio waiting for the stream (1 s); oldest dropped
    max_queued_events: int = 256  # caller events waiting for the stream; oldest dropped
    messages_per_s: float = 250.0  # backend messages read per second past the burst
    message_burst: int = 500
    limits: CallLimits = field(default_factory=CallLimits)

    def __post_init__(self) -> None:
        url = self._url()
        if self.ca_file is not None and url.scheme != "grpcs":
            raise ValueError("a CA file is for grpcs:// backend urls")
        for name in (
            "connect_timeout_s",
            "keepalive_s",
            "keepalive_timeout_s",
            "close_timeout_s",
            "messages_per_s",
        ):
            value = getattr(self, name)
            if not _is_number(value) or not value > 0 or not math.isfinite(value):
                raise ValueError(f"backend option {name} must be a number > 0, got {value!r}")
        for name in ("max_message_bytes", "max_queued_frames", "max_queued_events"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"backend option {name} must be an integer >= 1, got {value!r}")
        if not self.message_burst >= 1:
            raise ValueError("backend option message_burst must be >= 1")

    def _url(self) -> URL:
        try:
            url = URL(self.url)
            port = url.explicit_port
        except (TypeError, ValueError) as exc:
            raise ValueError(f"backend url {self.url!r} is not a URL: {exc}") from None
        if url.scheme not in SCHEMES or not url.host or port == 0:
            raise ValueError(
                f"backend url must be grpc://HOST:PORT or grpcs://HOST:PORT, got {self.url!r}"
            )
        if url.path not in ("", "/") or url.query_string or url.fragment:
            raise ValueError(f"a grpc backend url has no path, query or fragment: {self.url!r}")
        if url.user is not None or url.password is not None:
            raise ValueError("a grpc backend url holds no credential: use --backend-key-file")
        return url

    @property
    def tls(self) -> bool:
        return self._url().scheme == "grpcs"

    @property
    def target(self) -> str:
        """The channel's target, ``host:port`` (an IPv6 host in brackets)."""
        url = self._url()
        host = url.host or ""
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{url.explicit_port or SCHEMES[url.scheme]}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
