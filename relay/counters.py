"""Per-worker counters in shared memory, and their export in Prometheus format.

A worker only adds integers into a preallocated ``memoryview`` of unsigned 64-bit slots (once per
batch, or once per drop); it never builds metric objects. The supervisor, which created the
shared mapping before forking, reads every worker's slots when ``/metrics`` is scraped. The mapping
outlives a crashed worker, so counters stay monotonic across restarts.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from relay.flows import EVICTIONS
from relay.tcpconns import CLOSE_REASONS

DIRECTIONS = ("client_to_transceiver", "transceiver_to_client")
# The ``peer`` label of the packet and byte counters: whom a worker exchanged the packets with
# on its internal side. Bounded: this relay's transceivers, the edges at its peer ingress, and
# one value per configured route (another cluster's relays).
PEER_TRANSCEIVER, PEER_EDGE, PEER_ROUTES = 0, 1, 2  # + cluster id for a route
PEER_SLOTS = PEER_ROUTES + 256


def peer_label(index: int) -> str:
    if index == PEER_TRANSCEIVER:
        return "transceiver"
    if index == PEER_EDGE:
        return "edge"
    return f"cluster_{index - PEER_ROUTES}"


DROP_REASONS = (
    "no_flow",  # non-STUN packet from a client without a flow
    "not_confirmed",  # non-STUN packet from a client whose flow is still pending
    "empty_or_oversize",
    "denied_address",  # client address in a --deny-network range: no flow, in either direction
    "first_packet_rate",  # the source /24 or /64 sent STUN first packets over --first-packet-rate
    "first_packet_overflow",  # the prefix table is full and the prefixes beyond it over theirs
    "stun_malformed",  # not a well-formed Binding request with FINGERPRINT and USERNAME
    "bad_username",  # USERNAME is not "<server ufrag>:<client ufrag>"
    "hint_malformed",
    "hint_version",
    "hint_unknown_key",
    "hint_bad_tag",
    "hint_expired",
    "hint_future",
    "unknown_cluster",  # the hint names another cluster, and no --route leads there
    "unknown_transceiver",  # transceiver id not in the allowlist
    "pending_ufrag_limit",  # the hint's budget of new pending flows is spent
    "unknown_peer",  # internal packet from an address outside the allowlist
    "encap_malformed",
    "wrong_family",  # encapsulated client address of the other IP family
    "send_error",
    "hop_limit",  # an encapsulated datagram from another relay whose hop limit ran out (a loop)
    "peer_denied",  # a datagram at --peer-listen from a source outside every --peer-network
    # A hinted STUN check over the transceiver's budget at this worker (--transceiver-stun-rate).
    "transceiver_stun_rate",
    # ICE over TCP only (relay.tcpconns): a frame below its class's floor (STUN 20, DTLS 13,
    # RTP 12 bytes); over a confirmed connection's --tcp-byte-rate; a STUN frame of an
    # unconfirmed connection naming another hint than the one it was admitted with.
    "frame_too_short",
    "byte_rate",
    "other_hint",
)
DROP_INDEX = {reason: i for i, reason in enumerate(DROP_REASONS)}

# Upper bounds of the receive-batch histogram buckets (packets per recvmmsg call).
BATCH_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# Per peer index p (above): packets at TRAFFIC + 4p + direction, bytes at TRAFFIC + 4p + 2 +
# direction. PACKETS and BYTES are the transceivers' (the direct tier).
TRAFFIC = 0
PACKETS = TRAFFIC + 4 * PEER_TRANSCEIVER  # + direction index
BYTES = PACKETS + 2  # + direction index
PACKETS_OF = tuple(TRAFFIC + 4 * p for p in range(PEER_SLOTS))  # + direction index
BYTES_OF = tuple(TRAFFIC + 4 * p + 2 for p in range(PEER_SLOTS))  # + direction index
DROPS = TRAFFIC + 4 * PEER_SLOTS  # + DROP_INDEX[reason]
_after_drops = DROPS + len(DROP_REASONS)
FLOWS_CREATED_PENDING = _after_drops
FLOWS_CREATED_CONFIRMED = _after_drops + 1
FLOWS_EXPIRED_PENDING = _after_drops + 2
FLOWS_EXPIRED_CONFIRMED = _after_drops + 3
FLOWS_ACTIVE_PENDING = _after_drops + 4  # gauge
FLOWS_ACTIVE_CONFIRMED = _after_drops + 5  # gauge
FLOWS_RESTORED = _after_drops + 6
CONFIG_GENERATION = _after_drops + 7  # gauge: the control-block generation applied
BATCH_BUCKETS = _after_drops + 8  # one slot per bound, non-cumulative, then +Inf
BATCH_SUM = BATCH_BUCKETS + len(BATCH_BOUNDS) + 1
BATCH_COUNT = BATCH_SUM + 1
FLOWS_RESTORED_REDIS = BATCH_COUNT + 1
REDIS_OPS = FLOWS_RESTORED_REDIS + 1  # + index in REDIS_RESULTS
REDIS_RESULTS = (
    ("write", "ok"),
    ("lookup", "hit"),
    ("lookup", "miss"),
    ("any", "error"),
    ("any", "dropped"),
)
FLOWS_EVICTED = REDIS_OPS + len(REDIS_RESULTS)  # + index in relay.flows.EVICTIONS
PEER_FLOWS = FLOWS_EVICTED + len(EVICTIONS)  # + index in PEER_FLOW_STATS
PEER_FLOW_STATS = ("created", "expired", "evicted", "active_pending", "active_confirmed")
ROUTE_FAILOVERS = PEER_FLOWS + len(PEER_FLOW_STATS)
PEER_FLOWS_RESTORED = ROUTE_FAILOVERS + 1  # from the journal
PEER_FLOWS_RESTORED_REDIS = PEER_FLOWS_RESTORED + 1
# ICE over TCP (--listen-tcp; relay.tcpfront): the same drop reasons and traffic counters as
# UDP's, under transport="tcp", and the connections' own.
TCP_PACKETS = PEER_FLOWS_RESTORED_REDIS + 1  # + direction index
TCP_BYTES = TCP_PACKETS + 2  # + direction index
TCP_DROPS = TCP_BYTES + 2  # + DROP_INDEX[reason]
TCP_ACCEPTED = TCP_DROPS + len(DROP_REASONS)
TCP_CLOSED = TCP_ACCEPTED + 1  # + index in relay.tcpconns.CLOSE_REASONS
TCP_OPEN = TCP_CLOSED + len(CLOSE_REASONS)  # gauge: every connection
TCP_PENDING = TCP_OPEN + 1  # gauge: connections without a valid first frame yet
TCP_PAUSED = TCP_PENDING + 1  # connections not read until the tick (over --tcp-frame-rate)
SLOTS = TCP_PAUSED + 1

# BUCKET_OF[n] is the slot for a batch of n packets; batches never exceed the largest bound.
BUCKET_OF = tuple(
    BATCH_BUCKETS + next((i for i, b in enumerate(BATCH_BOUNDS) if n <= b), len(BATCH_BOUNDS))
    for n in range(BATCH_BOUNDS[-1] + 1)
)


class CounterArea:
    """One shared mapping holding ``workers`` counter blocks of ``SLOTS`` uint64 each."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._map = mmap.mmap(-1, max(workers * SLOTS * 8, mmap.PAGESIZE))
        self._words = memoryview(self._map).cast("Q")

    def block(self, worker: int) -> memoryview:
        """The slots of one worker, as a writable uint64 view."""
        return self._words[worker * SLOTS : (worker + 1) * SLOTS]

    def total(self, slot: int) -> int:
        return sum(self._words[w * SLOTS + slot] for w in range(self.workers))


Metric = CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily
_TRAFFIC_LABELS = ["worker", "direction", "peer", "transport"]
# What /metrics shows, in the order it shows it: (key, kind, name, help, labels). The last four
# (TCP_FAMILIES) only with --listen-tcp.
FAMILIES: tuple[tuple[str, type[Metric], str, str, list[str]], ...] = (
    (
        "packets",
        CounterMetricFamily,
        "rtcedge_relay_packets",
        "Packets (over TCP: frames) forwarded, by the internal peer: transceiver, edge, "
        "cluster_<id> (a route), and by the client's transport: udp, tcp.",
        _TRAFFIC_LABELS,
    ),
    (
        "octets",
        CounterMetricFamily,
        "rtcedge_relay_bytes",
        "Payload bytes forwarded (encapsulation header and framing excluded).",
        _TRAFFIC_LABELS,
    ),
    (
        "drops",
        CounterMetricFamily,
        "rtcedge_relay_dropped_packets",
        "Packets (over TCP: frames) dropped, by reason and the client's transport.",
        ["worker", "reason", "transport"],
    ),
    (
        "created",
        CounterMetricFamily,
        "rtcedge_relay_flows_created",
        "Flows created.",
        ["worker", "table"],
    ),
    (
        "expired",
        CounterMetricFamily,
        "rtcedge_relay_flows_expired",
        "Flows expired.",
        ["worker", "table"],
    ),
    (
        "evicted",
        CounterMetricFamily,
        "rtcedge_relay_flows_evicted",
        "Flows evicted from a full table (the one of that scope idle longest) to make room.",
        ["worker", "table", "scope"],
    ),
    (
        "restored",
        CounterMetricFamily,
        "rtcedge_relay_flows_restored",
        "Confirmed flows restored: from a crashed worker's journal, or from Redis.",
        ["worker", "table", "source"],
    ),
    (
        "redis_ops",
        CounterMetricFamily,
        "rtcedge_relay_redis_operations",
        "Flow cache operations by result (the cache is optional).",
        ["worker", "op", "result"],
    ),
    (
        "active",
        GaugeMetricFamily,
        "rtcedge_relay_flows_active",
        "Flows in the tables now.",
        ["worker", "table"],
    ),
    (
        "batch",
        HistogramMetricFamily,
        "rtcedge_relay_receive_batch_packets",
        "Datagrams returned per recvmmsg call.",
        ["worker"],
    ),
    (
        "failovers",
        CounterMetricFamily,
        "rtcedge_relay_route_failovers",
        "Times a route moved to another of its cluster's relay addresses (probes).",
        ["worker"],
    ),
    (
        "accepted",
        CounterMetricFamily,
        "rtcedge_relay_tcp_connections_accepted",
        "TCP connections accepted at --listen-tcp (refused ones included).",
        ["worker"],
    ),
    (
        "closed",
        CounterMetricFamily,
        "rtcedge_relay_tcp_connections_closed",
        "TCP connections closed (or refused at accept), by reason.",
        ["worker", "reason"],
    ),
    (
        "conns",
        GaugeMetricFamily,
        "rtcedge_relay_tcp_connections",
        "TCP connections open now: pending (no valid first frame yet) or admitted.",
        ["worker", "state"],
    ),
    (
        "paused",
        CounterMetricFamily,
        "rtcedge_relay_tcp_reads_paused",
        "Times a TCP connection was left unread until the next tick: it sent more than "
        "--tcp-frame-rate frames (the rest waits in the kernel, throttling the sender).",
        ["worker"],
    ),
)
TCP_FAMILIES = frozenset(("accepted", "closed", "conns", "paused"))


class RelayCollector:
    """prometheus_client collector that reads the shared counters at scrape time."""

    def __init__(
        self,
        area: CounterArea,
        supervisor_state: object,
        peers: tuple[int, ...] = (0,),
        tcp: bool = False,
    ) -> None:
        self.area = area
        self.state = supervisor_state
        self.peers = peers  # the peer indexes this relay's configuration can count
        self.tcp = tcp  # --listen-tcp: the transport="tcp" samples and the connection metrics

    def collect(self) -> Iterator:
        families = {
            key: kind(name, doc, labels=labels) for key, kind, name, doc, labels in FAMILIES
        }
        for w in range(self.area.workers):
            name, b = str(w), self.area.block(w)
            self._add_traffic(families, name, b)
            if self.tcp:
                _add_tcp(families, name, b)
            _add_flows(families, name, b)
            _add_batch(families["batch"], name, b)
            b.release()
        yield from (families[key] for key in families if self.tcp or key not in TCP_FAMILIES)
        yield from self.state.metrics()  # type: ignore[attr-defined]

    def _add_traffic(self, f: dict[str, Metric], name: str, b: memoryview) -> None:
        """Packets and bytes by direction and peer, and drops by reason: over UDP."""
        for p in self.peers:
            label = peer_label(p)
            for d, direction in enumerate(DIRECTIONS):
                f["packets"].add_metric([name, direction, label, "udp"], b[PACKETS_OF[p] + d])
                f["octets"].add_metric([name, direction, label, "udp"], b[BYTES_OF[p] + d])
        for r, reason in enumerate(DROP_REASONS):
            f["drops"].add_metric([name, reason, "udp"], b[DROPS + r])


def _add_tcp(f: dict[str, Metric], name: str, b: memoryview) -> None:
    """ICE over TCP (--listen-tcp): its traffic and drops, and the connections' own."""
    label = peer_label(PEER_TRANSCEIVER)
    for d, direction in enumerate(DIRECTIONS):
        f["packets"].add_metric([name, direction, label, "tcp"], b[TCP_PACKETS + d])
        f["octets"].add_metric([name, direction, label, "tcp"], b[TCP_BYTES + d])
    for r, reason in enumerate(DROP_REASONS):
        f["drops"].add_metric([name, reason, "tcp"], b[TCP_DROPS + r])
    f["accepted"].add_metric([name], b[TCP_ACCEPTED])
    f["paused"].add_metric([name], b[TCP_PAUSED])
    for r, reason in enumerate(CLOSE_REASONS):
        f["closed"].add_metric([name, reason], b[TCP_CLOSED + r])
    pending = b[TCP_PENDING]
    f["conns"].add_metric([name, "pending"], pending)
    f["conns"].add_metric([name, "admitted"], b[TCP_OPEN] - pending)


def _add_flows(f: dict[str, Metric], name: str, b: memoryview) -> None:
    """The flow tables' counters and gauges, the route failovers and the Redis operations."""
    created, expired, evicted, active = f["created"], f["expired"], f["evicted"], f["active"]
    restored = f["restored"]
    created.add_metric([name, "pending"], b[FLOWS_CREATED_PENDING])
    created.add_metric([name, "confirmed"], b[FLOWS_CREATED_CONFIRMED])
    created.add_metric([name, "peer"], b[PEER_FLOWS])
    expired.add_metric([name, "pending"], b[FLOWS_EXPIRED_PENDING])
    expired.add_metric([name, "confirmed"], b[FLOWS_EXPIRED_CONFIRMED])
    expired.add_metric([name, "peer"], b[PEER_FLOWS + 1])
    evicted.add_metric([name, "peer", "worker"], b[PEER_FLOWS + 2])
    active.add_metric([name, "peer_pending"], b[PEER_FLOWS + 3])
    active.add_metric([name, "peer_confirmed"], b[PEER_FLOWS + 4])
    f["failovers"].add_metric([name], b[ROUTE_FAILOVERS])
    restored.add_metric([name, "confirmed", "journal"], b[FLOWS_RESTORED])
    restored.add_metric([name, "confirmed", "redis"], b[FLOWS_RESTORED_REDIS])
    restored.add_metric([name, "peer", "journal"], b[PEER_FLOWS_RESTORED])
    restored.add_metric([name, "peer", "redis"], b[PEER_FLOWS_RESTORED_REDIS])
    for i, (op, result) in enumerate(REDIS_RESULTS):
        f["redis_ops"].add_metric([name, op, result], b[REDIS_OPS + i])
    for i, (table, scope) in enumerate(EVICTIONS):
        evicted.add_metric([name, table, scope], b[FLOWS_EVICTED + i])
    active.add_metric([name, "pending"], b[FLOWS_ACTIVE_PENDING])
    active.add_metric([name, "confirmed"], b[FLOWS_ACTIVE_CONFIRMED])


def _add_batch(batch: Metric, name: str, b: memoryview) -> None:
    """The receive-batch histogram: its slots are per bucket, Prometheus wants them cumulative."""
    cumulative, buckets = 0, []
    for i, bound in enumerate((*BATCH_BOUNDS, "+Inf")):
        cumulative += b[BATCH_BUCKETS + i]
        buckets.append((str(bound), cumulative))
    batch.add_metric([name], buckets, b[BATCH_SUM])
