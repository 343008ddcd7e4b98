"""The transceiver's Prometheus metrics, in a registry of their own (one per process)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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


class TransceiverMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.sessions_active = Gauge(
            "rtcedge_transceiver_sessions_active", "Sessions not yet ended.", registry=r
        )
        self.session_utilization = Gauge(
            "rtcedge_transceiver_session_utilization",
            "Sessions not yet ended over --max-sessions (0-1): what an autoscaler keeps pods at.",
            registry=r,
        )
        self.client_addresses = Gauge(
            "rtcedge_transceiver_client_addresses",
            "Client addresses the sessions can be reached at (one per call, more for a while"
            " after a NAT rebinding or during ICE).",
            registry=r,
        )
        self.http_connections_closed = Counter(
            "rtcedge_transceiver_http_connections_closed",
            "HTTP connections a listener closed itself, by listener (http, metrics) and reason:"
            " max_connections (refused at accept: --http-max-connections open), header_timeout"
            " (no request headers within --http-header-timeout).",
            ["listener", "reason"],
            registry=r,
        )
        self.http_connections = Gauge(
            "rtcedge_transceiver_http_connections",
            "HTTP connections open now, by listener (http, metrics).",
            ["listener"],
            registry=r,
        )
        self.sessions_started = Counter(
            "rtcedge_transceiver_sessions_started",
            "Sessions created by an accepted offer.",
            registry=r,
        )
        self.region_sessions = Counter(
            "rtcedge_transceiver_region_sessions",
            "Sessions created, by the region whose relay addresses their answer advertised"
            " (a configured --region, or default).",
            ["region"],
            registry=r,
        )
        self.paths_selected = Counter(
            "rtcedge_transceiver_paths_selected",
            "Client addresses ICE moved a session's media to (its first, and one more per NAT"
            " rebinding), by the transport the client reached the relay with: udp, or tcp"
            " (ICE-TCP, when UDP is blocked).",
            ["transport"],
            registry=r,
        )
        for transport in ("udp", "tcp"):  # both show, at 0 until their first
            self.paths_selected.labels(transport)
        self.sessions_ended = Counter(
            "rtcedge_transceiver_sessions_ended",
            "Sessions ended, by reason.",
            ["reason"],
            registry=r,
        )
        self.ice_connected = Histogram(
            "rtcedge_transceiver_ice_connected_seconds",
            "Time from the offer to ICE connected.",
            buckets=CONNECT_BUCKETS,
            registry=r,
        )
        self.dtls_connected = Histogram(
            "rtcedge_transceiver_dtls_connected_seconds",
            "Time from the offer to DTLS connected (media can flow).",
            buckets=CONNECT_BUCKETS,
            registry=r,
        )
        self.connect_phase = Histogram(
            "rtcedge_transceiver_connect_phase_seconds",
            "A session's connect, step by step: reading the offer (offer), making the answer"
            " (answer), answer to the first authenticated check (first_check), to ICE connected"
            " (ice), to DTLS connected (dtls), then to the first audio frame from the caller"
            " (audio_in) and toward it (audio_out).",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=r,
        )
        for phase in CONNECT_PHASES:
            self.connect_phase.labels(phase)
        self.audio_frames = Counter(
            "rtcedge_transceiver_audio_frames",
            "20 ms audio frames, from callers (in) and toward them (out).",
            ["direction"],
            registry=r,
        )
        self.jitter_events = Counter(
            "rtcedge_transceiver_audio_jitter_events",
            "Inbound audio packets the jitter buffer gave up on (lost), dropped as late or to cut"
            " latency (trimmed), sequence restarts (resync), packets that are not Opus or that"
            " libopus refused (undecodable), packets of another codec (foreign), and SRTP that"
            " failed authentication (srtp_failed) or did not parse (malformed).",
            ["event"],
            registry=r,
        )
        self.backend_errors = Counter(
            "rtcedge_transceiver_backend_errors", "Backend failures.", registry=r
        )
        self.data_channel_dropped = Counter(
            "rtcedge_transceiver_data_channel_dropped",
            "The data channel's drops (transceiver.call.sctp), by reason: DATA chunks from a caller"
            " outside the receive window (beyond_window) or for a stream past the negotiated"
            " count (invalid_stream); events toward a caller dropped oldest first because it"
            " acknowledges too little (unacked_full), or larger than its max-message-size"
            " (too_large).",
            ["reason"],
            registry=r,
        )
        for reason in DATA_CHANNEL_DROP_REASONS:
            self.data_channel_dropped.labels(reason)
        self.datagrams = Counter(
            "rtcedge_transceiver_datagrams",
            "Datagrams on the media socket.",
            ["direction"],
            registry=r,
        )
        self.dropped = Counter(
            "rtcedge_transceiver_dropped_datagrams",
            "Datagrams dropped by the demultiplexer, by reason; foreign_ssrc: SRTP or SRTCP of"
            " an SSRC that is not the caller's (a call latches at most 4), before unprotect.",
            ["reason"],
            registry=r,
        )
        self.refusals = Counter(
            "rtcedge_transceiver_admission_refusals",
            "New sessions refused with 503 + Retry-After, by reason: draining, max_sessions,"
            " cpu or loop_lag (overloaded), headroom (one more would overload it).",
            ["reason"],
            registry=r,
        )
        for reason in ("draining", "max_sessions", "cpu", "loop_lag", "headroom"):
            self.refusals.labels(reason)
        self.loop_lag = Gauge(
            "rtcedge_transceiver_loop_lag_seconds",
            "How late the event loop's 100 ms timer fires, mean over 2 s: admission's input.",
            registry=r,
        )
        self.cpu_ratio = Gauge(
            "rtcedge_transceiver_cpu_ratio",
            "The process's CPU time over wall time (1 = one core), over 2 s: admission's input.",
            registry=r,
        )
        self.sessions_unsettled = Gauge(
            "rtcedge_transceiver_sessions_unsettled",
            "Sessions connecting or connected < 2 s ago: admission counts their cost ahead.",
            registry=r,
        )
        self.overloaded = Gauge(
            "rtcedge_transceiver_overloaded",
            "1 while CPU or loop lag is over its --admit-max-* limit (until both are under 80 %"
            " of it): every new session is refused.",
            registry=r,
        )
        self.session_requests_refused = Counter(
            "rtcedge_transceiver_session_requests_refused",
            "DELETE/PATCH of a session resource not answered by its owner, by reason: the id"
            " does not verify (malformed, version, unknown_key, bad_tag, expired, future), names"
            " another cluster, arrived already forwarded (looped), names a transceiver with no"
            " --peer-http address (no_peer), an ended session (no_session), an owner that is"
            " gone or failed (owner_gone, owner_failed), too many forwards at once (busy), to"
            " one owner (owner_busy) or from one client (client_busy), an owner that timed out"
            " a moment ago (owner_failing).",
            ["reason"],
            registry=r,
        )
        for reason in REFUSAL_REASONS:
            self.session_requests_refused.labels(reason)
        self.session_requests_forwarded = Counter(
            "rtcedge_transceiver_session_requests_forwarded",
            "DELETE/PATCH passed on to the owning transceiver and answered by it, by method.",
            ["method"],
            registry=r,
        )
        for method in ("DELETE", "PATCH"):
            self.session_requests_forwarded.labels(method)
        self.migrations_offered = Counter(
            "rtcedge_transceiver_migrations_offered",
            "Callers asked to move on drain (session.migrate with a resume token).",
            registry=r,
        )
        self.migrations_claimed = Counter(
            "rtcedge_transceiver_migrations_claimed",
            "Resume tokens of this transceiver's calls claimed by another transceiver.",
            registry=r,
        )
        self.migrations_resumed = Counter(
            "rtcedge_transceiver_migrations_resumed",
            "Sessions started here for a call that moved from another transceiver.",
            registry=r,
        )
        self.migrations_completed = Counter(
            "rtcedge_transceiver_migrations_completed",
            "Claimed calls whose caller then hung up the old session: moves completed.",
            registry=r,
        )
        self.migrations_failed = Counter(
            "rtcedge_transceiver_migrations_failed",
            "Moves that failed, by reason: a resume offer refused here (the token's malformed,"
            " version, unknown_key, bad_tag, expired, future; cluster, self, no_peer; the"
            " owner's no_session, replayed; owner_gone, owner_failed, busy, owner_failing), or,"
            " at the owner, an offer never claimed (unclaimed) or a claimed call never hung up"
            " (not_switched).",
            ["reason"],
            registry=r,
        )
        for reason in FAILURE_REASONS:
            self.migrations_failed.labels(reason)
        self.whip_requests = Counter(
            "rtcedge_transceiver_whip_requests",
            "WHIP requests, by method and status.",
            ["method", "status"],
            registry=r,
        )
        self.offers_refused = Counter(
            "rtcedge_transceiver_offers_refused",
            "WHIP offers refused before any WebRTC state is made, by reason: over --max-sdp-bytes"
            " (too_large, 413), not UTF-8, over a limit of transceiver.signaling.offer.OfferLimits"
            " (m_lines, rtpmap_lines, fmtp_lines, section_lines, lines), or invalid (400).",
            ["reason"],
            registry=r,
        )
        for reason in OFFER_REFUSAL_REASONS:
            self.offers_refused.labels(reason)

        self.tallies = {
            name: Tally(counter.labels(direction))
            for name, counter, direction in (
                ("datagrams_in", self.datagrams, "in"),
                ("datagrams_out", self.datagrams, "out"),
                ("audio_frames_in", self.audio_frames, "in"),
                ("audio_frames_out", self.audio_frames, "out"),
                ("foreign_ssrc", self.dropped, "foreign_ssrc"),
            )
        }

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
            self.data_channel_dropped,
        )
