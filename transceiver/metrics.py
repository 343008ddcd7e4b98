"""The transceiver's Prometheus metrics, in a registry of their own (one per process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from transceiver.call.sctp import DROP_REASONS as DATA_CHANNEL_DROP_REASONS
from transceiver.migration import FAILURE_REASONS
from transceiver.ownership import REFUSAL_REASONS
from transceiver.signaling.offer import OFFER_REFUSAL_REASONS

CONNECT_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
# A connect's steps take from under a millisecond (an answer) to seconds (a slow client).
PHASE_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
CONNECT_PHASES = ("offer", "answer", "first_check", "ice", "dtls", "audio_in", "audio_out")


class Tally:
    """A counter for the per-packet path: a plain int, folded into its Prometheus counter by
    ``flush`` (before every scrape). prometheus_client's ``inc`` takes a lock each time: with
    four counts per packet that was ~3 % of a busy transceiver's CPU. The event loop is the only
    writer, so no lock is needed until the fold."""

    __slots__ = ("_counter", "count")

    def __init__(self, counter: Counter) -> None:
        self.count = 0
        self._counter = counter

    def inc(self, amount: int = 1) -> None:
        self.count += amount

    def flush(self) -> None:
        if self.count:
            count, self.count = self.count, 0
            self._counter.inc(count)


M = TypeVar("M", Counter, Gauge, Histogram)


@dataclass(frozen=True)
class Declared(Generic[M]):
    """A metric declared as a class attribute of ``TransceiverMetrics``, which makes it per
    instance (the instance's own attribute then hides this one). Label values in ``presets``
    show at 0 before their first count."""

    kind: type[M]
    name: str
    doc: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    presets: tuple[str, ...] = ()

    def make(self, registry: CollectorRegistry) -> M:
        extra = {} if self.buckets is None else {"buckets": self.buckets}
        metric = self.kind(self.name, self.doc, self.labels, registry=registry, **extra)
        for value in self.presets:
            metric.labels(value)
        return metric

    @overload
    def __get__(self, instance: None, owner: type) -> Declared[M]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> M: ...
    def __get__(self, instance: object | None, owner: type) -> Declared[M] | M:
        if instance is not None:  # __init__ made every one: a declaration never made is a bug
            raise AttributeError(f"{self.name} was declared but not made")
        return self


@dataclass(frozen=True)
class SessionMetrics:
    """The metrics a session writes, and no others (``TransceiverMetrics.for_sessions``)."""

    audio_frames_in: Tally
    audio_frames_out: Tally
    jitter_events: Counter  # labelled by event
    backend_errors: Counter
    ice_connected: Histogram
    dtls_connected: Histogram
    connect_phase: (
        Histogram  # labelled by phase (transceiver.call.lifecycle.Lifecycle.connect_phases)
    )
    # SRTP/SRTCP of an SSRC the call's latch refused (transceiver.call.ssrc), per packet
    foreign_ssrc: Tally
    # RTP whose payload type the answer's audio m-line does not name (transceiver.call.bundle)
    not_audio: Tally
    data_channel_dropped: Counter | None = None  # labelled by reason (transceiver.call.sctp)


@dataclass(frozen=True)
class SignalingMetrics:
    """The metrics the WHIP handlers write, and no others (``TransceiverMetrics.for_signaling``)."""

    whip_requests: Counter  # labelled by method and status
    refusals: Counter  # new sessions refused for want of capacity, by reason
    offers_refused: Counter  # by reason
    migrations_failed: Counter  # by reason: here, a resume offer refused
    session_requests_refused: Counter  # DELETE/PATCH nobody here answers, by reason
    session_requests_forwarded: Counter  # by method
    backend_errors: Counter


class BackendEvents(Collector):
    """``rtcedge_transceiver_backend_events_total{event}``: what the backend's calls did, read
    from the backend when scraped (the realtime backend's barge-ins, truncates, caller events
    refused or limited, appends dropped...; docs/realtime.md)."""

    NAME = "rtcedge_transceiver_backend_events"

    def __init__(self, counters: Callable[[], Mapping[str, int]]) -> None:
        self._counters = counters

    def describe(self) -> list[CounterMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        for event, value in sorted(self._counters().items()):
            family.add_metric([event], value)
        yield family

    def _family(self) -> CounterMetricFamily:
        doc = "What the backend's calls did, by event (docs/realtime.md for the realtime backend)."
        return CounterMetricFamily(self.NAME, doc, labels=["event"])


class TransceiverMetrics:
    """Every metric of the transceiver, declared once below in the order /metrics shows them;
    an instance makes them in a registry of its own."""

    sessions_active = Declared(
        Gauge, "rtcedge_transceiver_sessions_active", "Sessions not yet ended."
    )
    session_utilization = Declared(
        Gauge,
        "rtcedge_transceiver_session_utilization",
        "Sessions not yet ended over --max-sessions (0-1): what an autoscaler keeps pods at.",
    )
    client_addresses = Declared(
        Gauge,
        "rtcedge_transceiver_client_addresses",
        "Client addresses the sessions can be reached at (one per call, more for a while"
        " after a NAT rebinding or during ICE).",
    )
    http_connections_closed = Declared(
        Counter,
        "rtcedge_transceiver_http_connections_closed",
        "HTTP connections a listener closed itself, by listener (http, metrics) and reason:"
        " max_connections (refused at accept: --http-max-connections open), header_timeout"
        " (no request headers within --http-header-timeout).",
        labels=("listener", "reason"),
    )
    http_connections = Declared(
        Gauge,
        "rtcedge_transceiver_http_connections",
        "HTTP connections open now, by listener (http, metrics).",
        labels=("listener",),
    )
    sessions_started = Declared(
        Counter, "rtcedge_transceiver_sessions_started", "Sessions created by an accepted offer."
    )
    region_sessions = Declared(
        Counter,
        "rtcedge_transceiver_region_sessions",
        "Sessions created, by the region whose relay addresses their answer advertised"
        " (a configured --region, or default).",
        labels=("region",),
    )
    paths_selected = Declared(
        Counter,
        "rtcedge_transceiver_paths_selected",
        "Client addresses ICE moved a session's media to (its first, and one more per NAT"
        " rebinding), by the transport the client reached the relay with: udp, or tcp"
        " (ICE-TCP, when UDP is blocked).",
        labels=("transport",),
        presets=("udp", "tcp"),
    )
    sessions_ended = Declared(
        Counter,
        "rtcedge_transceiver_sessions_ended",
        "Sessions ended, by reason.",
        labels=("reason",),
    )
    ice_connected = Declared(
        Histogram,
        "rtcedge_transceiver_ice_connected_seconds",
        "Time from the offer to ICE connected.",
        buckets=CONNECT_BUCKETS,
    )
    dtls_connected = Declared(
        Histogram,
        "rtcedge_transceiver_dtls_connected_seconds",
        "Time from the offer to DTLS connected (media can flow).",
        buckets=CONNECT_BUCKETS,
    )
    connect_phase = Declared(
        Histogram,
        "rtcedge_transceiver_connect_phase_seconds",
        "A session's connect, step by step: reading the offer (offer), making the answer"
        " (answer), answer to the first authenticated check (first_check), to ICE connected"
        " (ice), to DTLS connected (dtls), then to the first audio frame from the caller"
        " (audio_in) and toward it (audio_out).",
        labels=("phase",),
        buckets=PHASE_BUCKETS,
        presets=CONNECT_PHASES,
    )
    audio_frames = Declared(
        Counter,
        "rtcedge_transceiver_audio_frames",
        "20 ms audio frames, from callers (in) and toward them (out).",
        labels=("direction",),
    )
    jitter_events = Declared(
        Counter,
        "rtcedge_transceiver_audio_jitter_events",
        "Inbound audio packets the jitter buffer gave up on (lost), dropped as late or to cut"
        " latency (trimmed), sequence restarts (resync), packets that are not Opus or that"
        " libopus refused (undecodable), packets of another codec (foreign), and SRTP that"
        " failed authentication (srtp_failed) or did not parse (malformed).",
        labels=("event",),
    )
    backend_errors = Declared(Counter, "rtcedge_transceiver_backend_errors", "Backend failures.")
    data_channel_dropped = Declared(
        Counter,
        "rtcedge_transceiver_data_channel_dropped",
        "The data channel's drops (transceiver.call.sctp), by reason: DATA chunks from a caller"
        " outside the receive window (beyond_window) or for a stream past the negotiated"
        " count (invalid_stream); events toward a caller dropped oldest first because it"
        " acknowledges too little (unacked_full), or larger than its max-message-size"
        " (too_large).",
        labels=("reason",),
        presets=DATA_CHANNEL_DROP_REASONS,
    )
    datagrams = Declared(
        Counter,
        "rtcedge_transceiver_datagrams",
        "Datagrams on the media socket.",
        labels=("direction",),
    )
    dropped = Declared(
        Counter,
        "rtcedge_transceiver_dropped_datagrams",
        "Datagrams dropped by the demultiplexer, by reason; foreign_ssrc: SRTP or SRTCP of"
        " an SSRC that is not the caller's (a call latches at most 4), before unprotect;"
        " not_audio: RTP of a payload type the answer's audio m-line does not name (video"
        " sent for an m-line answered inactive), before the latch.",
        labels=("reason",),
    )
    refusals = Declared(
        Counter,
        "rtcedge_transceiver_admission_refusals",
        "New sessions refused with 503 + Retry-After, by reason: draining, max_sessions,"
        " cpu or loop_lag (overloaded), headroom (one more would overload it).",
        labels=("reason",),
        presets=("draining", "max_sessions", "cpu", "loop_lag", "headroom"),
    )
    loop_lag = Declared(
        Gauge,
        "rtcedge_transceiver_loop_lag_seconds",
        "How late the event loop's 100 ms timer fires, mean over 2 s: admission's input.",
    )
    cpu_ratio = Declared(
        Gauge,
        "rtcedge_transceiver_cpu_ratio",
        "The process's CPU time over wall time (1 = one core), over 2 s: admission's input.",
    )
    sessions_unsettled = Declared(
        Gauge,
        "rtcedge_transceiver_sessions_unsettled",
        "Sessions connecting or connected < 2 s ago: admission counts their cost ahead.",
    )
    overloaded = Declared(
        Gauge,
        "rtcedge_transceiver_overloaded",
        "1 while CPU or loop lag is over its --admit-max-* limit (until both are under 80 %"
        " of it): every new session is refused.",
    )
    session_requests_refused = Declared(
        Counter,
        "rtcedge_transceiver_session_requests_refused",
        "DELETE/PATCH of a session resource not answered by its owner, by reason: the id"
        " does not verify (malformed, version, unknown_key, bad_tag, expired, future), names"
        " another cluster, arrived already forwarded (looped), names a transceiver with no"
        " --peer-http address (no_peer), an ended session (no_session), an owner that is"
        " gone or failed (owner_gone, owner_failed), too many forwards at once (busy), to"
        " one owner (owner_busy) or from one client (client_busy), an owner that timed out"
        " a moment ago (owner_failing).",
        labels=("reason",),
        presets=REFUSAL_REASONS,
    )
    session_requests_forwarded = Declared(
        Counter,
        "rtcedge_transceiver_session_requests_forwarded",
        "DELETE/PATCH passed on to the owning transceiver and answered by it, by method.",
        labels=("method",),
        presets=("DELETE", "PATCH"),
    )
    migrations_offered = Declared(
        Counter,
        "rtcedge_transceiver_migrations_offered",
        "Callers asked to move on drain (session.migrate with a resume token).",
    )
    migrations_claimed = Declared(
        Counter,
        "rtcedge_transceiver_migrations_claimed",
        "Resume tokens of this transceiver's calls claimed by another transceiver.",
    )
    migrations_resumed = Declared(
        Counter,
        "rtcedge_transceiver_migrations_resumed",
        "Sessions started here for a call that moved from another transceiver.",
    )
    migrations_completed = Declared(
        Counter,
        "rtcedge_transceiver_migrations_completed",
        "Claimed calls whose caller then hung up the old session: moves completed.",
    )
    migrations_failed = Declared(
        Counter,
        "rtcedge_transceiver_migrations_failed",
        "Moves that failed, by reason: a resume offer refused here (the token's malformed,"
        " version, unknown_key, bad_tag, expired, future; cluster, self, no_peer; the"
        " owner's no_session, replayed; owner_gone, owner_failed, busy, owner_failing), or,"
        " at the owner, an offer never claimed (unclaimed) or a claimed call never hung up"
        " (not_switched).",
        labels=("reason",),
        presets=FAILURE_REASONS,
    )
    whip_requests = Declared(
        Counter,
        "rtcedge_transceiver_whip_requests",
        "Signaling requests (WHIP, and /v1/realtime/calls with --backend realtime), by method"
        " and status.",
        labels=("method", "status"),
    )
    realtime_client_secrets = Declared(
        Counter,
        "rtcedge_transceiver_realtime_client_secrets",
        "POST /v1/realtime/client_secrets answers, by status (200: a client secret minted).",
        labels=("status",),
    )
    offers_refused = Declared(
        Counter,
        "rtcedge_transceiver_offers_refused",
        "WHIP offers refused before any WebRTC state is made, by reason: over --max-sdp-bytes"
        " (too_large, 413), not UTF-8, over a limit of transceiver.signaling.offer.OfferLimits"
        " (m_lines, rtpmap_lines, fmtp_lines, section_lines, lines), or invalid (400).",
        labels=("reason",),
        presets=OFFER_REFUSAL_REASONS,
    )

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        for attribute, declared in vars(TransceiverMetrics).items():
            if isinstance(declared, Declared):
                setattr(self, attribute, declared.make(r))

        self.tallies = {
            name: Tally(counter.labels(direction))
            for name, counter, direction in (
                ("datagrams_in", self.datagrams, "in"),
                ("datagrams_out", self.datagrams, "out"),
                ("audio_frames_in", self.audio_frames, "in"),
                ("audio_frames_out", self.audio_frames, "out"),
                ("foreign_ssrc", self.dropped, "foreign_ssrc"),
                ("not_audio", self.dropped, "not_audio"),
            )
        }

    def watch_backend(self, counters: Callable[[], Mapping[str, int]]) -> None:
        """Show the backend's running totals (``Backend.counters``) at every scrape."""
        self.registry.register(BackendEvents(counters))

    def flush(self) -> None:
        """Fold the per-packet tallies into their counters (before a scrape)."""
        for tally in self.tallies.values():
            tally.flush()

    def for_signaling(self) -> SignalingMetrics:
        return SignalingMetrics(
            self.whip_requests,
            self.refusals,
            self.offers_refused,
            self.migrations_failed,
            self.session_requests_refused,
            self.session_requests_forwarded,
            self.backend_errors,
        )

    def for_sessions(self) -> SessionMetrics:
        return SessionMetrics(
            self.tallies["audio_frames_in"],
            self.tallies["audio_frames_out"],
            self.jitter_events,
            self.backend_errors,
            self.ice_connected,
            self.dtls_connected,
            self.connect_phase,
            self.tallies["foreign_ssrc"],
            self.tallies["not_audio"],
            self.data_channel_dropped,
        )
