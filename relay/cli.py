"""``relay serve``: the command-line entry point of the relay (one per node)."""

from __future__ import annotations

import os
from typing import Any

import click

from common.config import ConfigError, load_keyring, parse_host_port, parse_transceiver
from common.listener import HEADER_TIMEOUT_S, ListenerLimits
from common.options import (
    env_option,
    log_level_option,
    refuse_secrets_on_command_line,
    refuse_url_credentials_on_command_line,
    setup_logging,
)
from relay.addresspolicy import DEFAULT_DENY_NETWORKS
from relay.config import (
    METRICS_MAX_CONNECTIONS,
    TRANSCEIVER_STUN_RATE_PER_S,
    RelayConfig,
    parse_id_range,
    parse_networks,
    parse_route,
    redis_password,
)
from relay.flowcache import RedisAuth
from relay.flows import FlowLimits
from relay.tcpconns import TcpLimits

_defaults = FlowLimits()
_tcp_defaults = TcpLimits()
# URL options that may hold a credential: such a URL is taken from the environment only.
CREDENTIAL_URL_OPTIONS = {"redis_url": "--redis-url"}
REDIS_PASSWORD_INSTEAD = {
    "redis_url": ", or keep the password out of the URL: RTCEDGE_REDIS_PASSWORD or "
    "--redis-password-file"
}

EXAMPLES = """
\b
Examples:
  # two workers on one public port, two static transceivers
  relay serve --listen 0.0.0.0:3478 --internal 10.0.0.5:4000 --workers 2 \\
      --keyring /etc/rtcedge/keyring.json \\
      --transceiver 0=10.0.1.10:5000 --transceiver 1=10.0.1.11:5000
\b
  # transceivers of a StatefulSet found through its headless Service
  RTCEDGE_KEYRING=/secrets/keyring.json relay serve \\
      --transceiver-dns 'rtcedge-transceiver-{id}.rtcedge-transceiver:5000' \\
      --transceiver-ids 0-15
\b
  # clients on a private network (on premises, VPN): allow it past the built-in denials
  relay serve ... --allow-network 10.20.0.0/16
\b
  # an edge relay (no transceivers): cluster 1's relays, the second as a backup
  relay serve --cluster 9 --route 1=10.1.0.5:3479,10.1.0.6:3479 ...
\b
  # also ICE over TCP (RFC 6544) for callers whose networks drop UDP
  relay serve --listen 0.0.0.0:3478 --listen-tcp 0.0.0.0:443 ...
\b
  # a cluster relay that also takes media from edges on 10.0.0.0/8
  relay serve --cluster 1 --peer-listen 10.1.0.5:3479 --peer-network 10.0.0.0/8 ...
\b
Every option can also be set by the environment variable shown in brackets.
SIGHUP reloads the keyring and the allowlist; SIGTERM stops.
"""


@click.group()
def main() -> None:
    """rtcedge relay: forwards WebRTC UDP flows to the transceiver named in their ICE ufrag."""


@main.command(epilog=EXAMPLES)
@env_option(
    "--listen",
    env="LISTEN",
    default="0.0.0.0:3478",
    show_default=True,
    help="Public UDP address shared by all workers (SO_REUSEPORT).",
)
@env_option(
    "--internal",
    env="INTERNAL",
    default="127.0.0.1:4000",
    show_default=True,
    help="Internal HOST:PORT_BASE; worker i binds PORT_BASE+i and talks to transceivers from it.",
)
@env_option(
    "--workers",
    env="WORKERS",
    type=int,
    default=None,
    help="Worker processes [default: usable CPU count].",
)
@env_option(
    "--pin/--no-pin", env="PIN", default=True, show_default=True, help="Pin each worker to one CPU."
)
@env_option(
    "--cluster",
    env="CLUSTER",
    type=int,
    default=0,
    show_default=True,
    help="This relay's cluster id (0-255); hints for other clusters go to their --route, or "
    "are dropped (unknown_cluster).",
)
@env_option(
    "--keyring",
    env="KEYRING",
    type=click.Path(dir_okay=False),
    default=None,
    help="Hint keyring JSON file (a mounted Kubernetes Secret).",
)
@env_option(
    "--keyring-json",
    env="KEYRING_JSON",
    default=None,
    help="Hint keyring JSON given inline instead of --keyring. Set it through the environment "
    "(RTCEDGE_KEYRING_JSON): on the command line, which every local user can read (ps), it is "
    "refused.",
)
@env_option(
    "--transceiver",
    "transceivers",
    env="TRANSCEIVERS",
    multiple=True,
    help="Allowlisted transceiver ID=HOST:PORT (repeatable; env: space separated).",
)
@env_option(
    "--transceiver-dns",
    env="TRANSCEIVER_DNS",
    default=None,
    help="DNS template with {id}, e.g. 'rtcedge-transceiver-{id}.rtcedge-transceiver:5000'.",
)
@env_option(
    "--transceiver-ids",
    env="TRANSCEIVER_IDS",
    default=None,
    help="Ids to expand the DNS template with, e.g. 0-15.",
)
@env_option(
    "--dns-interval",
    env="DNS_INTERVAL",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds between background re-resolutions of the DNS template.",
)
@env_option(
    "--dns-grace",
    env="DNS_GRACE",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds a transceiver whose name stopped resolving stays allowlisted (DNS blips must "
    "not drop calls); then it is removed. At least twice --dns-interval.",
)
@env_option(
    "--max-pending-flows",
    env="MAX_PENDING_FLOWS",
    type=int,
    default=_defaults.max_pending_flows,
    show_default=True,
    help="Pending flows per worker; a full table evicts the oldest pending flow of the hint "
    "holding the most.",
)
@env_option(
    "--max-pending-per-ufrag",
    env="MAX_PENDING_PER_UFRAG",
    type=int,
    default=_defaults.max_pending_per_ufrag,
    show_default=True,
    help="Pending flows one hint may open at once; then one more per --pending-ufrag-refill.",
)
@env_option(
    "--pending-ufrag-refill",
    env="PENDING_UFRAG_REFILL",
    type=int,
    default=_defaults.pending_ufrag_refill_s,
    show_default=True,
    help="Seconds for a hint to earn back one pending flow (a call that rebinds its NAT needs "
    "one now and then).",
)
@env_option(
    "--max-pending-per-prefix",
    env="MAX_PENDING_PER_PREFIX",
    type=int,
    default=_defaults.max_pending_per_prefix,
    show_default=True,
    help="Pending flows per source /24 (IPv4) or /64 (IPv6); at the cap the prefix's oldest "
    "is evicted.",
)
@env_option(
    "--pending-ttl",
    env="PENDING_TTL",
    type=int,
    default=_defaults.pending_ttl_s,
    show_default=True,
    help="Seconds a pending flow (or an admitted ICE-TCP connection) waits for its "
    "transceiver's reply.",
)
@env_option(
    "--max-flows",
    env="MAX_FLOWS",
    type=int,
    default=_defaults.max_confirmed_flows,
    show_default=True,
    help="Confirmed flows per worker; a full table evicts the flow idle longest.",
)
@env_option(
    "--max-flows-per-transceiver",
    env="MAX_FLOWS_PER_TRANSCEIVER",
    type=int,
    default=_defaults.max_flows_per_transceiver,
    show_default=True,
    help="Confirmed flows per worker of one transceiver (its sessions x their client "
    "addresses); at the cap its flow idle longest is evicted.",
)
@env_option(
    "--max-flows-per-hint",
    env="MAX_FLOWS_PER_HINT",
    type=int,
    default=_defaults.max_flows_per_hint,
    show_default=True,
    help="Confirmed flows per worker of one session's hint (a session has ~4 client addresses "
    "at most); at the cap its flow idle longest is evicted.",
)
@env_option(
    "--idle-ttl",
    env="IDLE_TTL",
    type=int,
    default=_defaults.idle_ttl_s,
    show_default=True,
    help="Seconds a confirmed flow lives without traffic from its transceiver.",
)
@env_option(
    "--max-hint-age",
    env="MAX_HINT_AGE",
    type=int,
    default=4 * 3600,
    show_default=True,
    help="Maximum session age in seconds; older hints are rejected.",
)
@env_option(
    "--metrics",
    env="METRICS",
    default="127.0.0.1:9478",
    show_default=True,
    help="HOST:PORT for /metrics, /healthz and /readyz, or 'off'.",
)
@env_option(
    "--metrics-header-timeout",
    env="METRICS_HEADER_TIMEOUT",
    type=float,
    default=HEADER_TIMEOUT_S,
    show_default=True,
    help="Seconds a connection to --metrics has to send its request's headers; then it is "
    "closed (slowloris).",
)
@env_option(
    "--metrics-max-connections",
    env="METRICS_MAX_CONNECTIONS",
    type=int,
    default=METRICS_MAX_CONNECTIONS,
    show_default=True,
    help="Connections --metrics holds open at once (each a thread); beyond, a newcomer gets "
    "503 and is closed at once.",
)
@env_option(
    "--batch",
    env="BATCH",
    type=int,
    default=256,
    show_default=True,
    help="Datagrams per recvmmsg/sendmmsg call.",
)
@env_option(
    "--socket-buffer",
    env="SOCKET_BUFFER",
    type=int,
    default=4 << 20,
    show_default=True,
    help="SO_RCVBUF/SO_SNDBUF bytes per socket.",
)
@env_option(
    "--redis-url",
    env="REDIS_URL",
    default=None,
    help="Optional Redis for faster recovery after a relay restart, e.g. redis://redis:6379/0. "
    "A URL holding a credential (a user, a password) only by the environment; the password "
    "is better in RTCEDGE_REDIS_PASSWORD or --redis-password-file.",
)
@env_option(
    "--redis-password-file",
    env="REDIS_PASSWORD_FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="File holding the Redis password; or the password itself in RTCEDGE_REDIS_PASSWORD "
    "(environment only: never give a secret on the command line).",
)
@env_option(
    "--redis-ca-file",
    env="REDIS_CA_FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="CA bundle that signed a rediss:// server's certificate [default: the system CAs].",
)
@env_option(
    "--redis-timeout-ms",
    env="REDIS_TIMEOUT_MS",
    type=int,
    default=50,
    show_default=True,
    help="Timeout of one Redis operation; the relay never waits for Redis to forward.",
)
@env_option(
    "--redis-lookups-per-s",
    env="REDIS_LOOKUPS_PER_S",
    type=int,
    default=200,
    show_default=True,
    help="Per worker, lookups for packets of unknown clients.",
)
@env_option(
    "--first-packet-rate",
    env="FIRST_PACKET_RATE",
    type=int,
    default=500,
    show_default=True,
    help="Per worker, STUN first packets per second one source /24 (IPv4) or /64 (IPv6) may "
    "send before their hint's HMAC is checked; bursts of twice that. 16384 prefixes are tracked; "
    "beyond, new prefixes share one such budget.",
)
@env_option(
    "--transceiver-stun-rate",
    env="TRANSCEIVER_STUN_RATE",
    type=int,
    default=TRANSCEIVER_STUN_RATE_PER_S,
    show_default=True,
    help="Per worker, hinted STUN checks per second forwarded to one transceiver from clients "
    "without a confirmed flow, from any prefixes (bursts of as many); beyond, dropped as "
    "transceiver_stun_rate.",
)
@env_option(
    "--deny-network",
    "deny_networks",
    env="DENY_NETWORKS",
    multiple=True,
    help="Client CIDR the relay never admits a flow from nor sends to, in addition to the "
    "built-in special-purpose ranges (loopback, private RFC 1918/100.64/10/fc00::/7, "
    "link-local, multicast, reserved, documentation, IPv4-mapped; docs/relay.md). Repeatable; "
    "env: comma separated.",
)
@env_option(
    "--allow-network",
    "allow_networks",
    env="ALLOW_NETWORKS",
    multiple=True,
    help="Client CIDR allowed even though a denied range holds it, e.g. 10.0.0.0/8 when "
    "clients reach the relay over a private network, 127.0.0.0/8 on one machine. Wins over "
    "--deny-network. Repeatable; env: comma separated.",
)
@env_option(
    "--takeover",
    env="TAKEOVER",
    is_flag=True,
    default=False,
    help="Start even though another live relay holds the --listen port, and share it with "
    "that relay (SO_REUSEPORT) until it stops: for a restart of the same deployment. Without "
    "it a relay refuses a port another relay holds, naming its pid.",
)
@env_option(
    "--route",
    "routes",
    env="ROUTES",
    multiple=True,
    help="CLUSTER=HOST:PORT[,HOST:PORT...]: forward hints for another cluster to its relays' "
    "--peer-listen addresses, most preferred first (failover by probes). Repeatable; env: "
    "space separated. With a route, --transceiver is optional (an edge relay).",
)
@env_option(
    "--route-probe-interval",
    env="ROUTE_PROBE_INTERVAL",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds between probes of each route address; one is down after 3 unanswered "
    "probes, up again on one answer.",
)
@env_option(
    "--peer-listen",
    env="PEER_LISTEN",
    default=None,
    help="HOST:PORT where this relay takes encapsulated datagrams from edge relays (the "
    "address their --route names; replies leave from it). Needs --peer-network.",
)
@env_option(
    "--peer-network",
    "peer_networks",
    env="PEER_NETWORKS",
    multiple=True,
    help="CIDR of edge relays --peer-listen accepts; other sources are dropped (peer_denied). "
    "Repeatable; env: comma separated.",
)
@env_option(
    "--peer-path-ttl",
    env="PEER_PATH_TTL",
    type=int,
    default=10,
    show_default=True,
    help="Seconds replies for a client go back through the edge it last came through; after "
    "that without a packet from that edge they go to the client directly.",
)
@env_option(
    "--listen-tcp",
    env="LISTEN_TCP",
    default=None,
    help="Public TCP HOST:PORT for ICE over TCP (RFC 6544, RFC 4571 framing), shared by all "
    "workers (SO_REUSEPORT), of --listen's address family [default: off].",
)
@env_option(
    "--tcp-max-connections",
    env="TCP_MAX_CONNECTIONS",
    type=int,
    default=_tcp_defaults.max_connections,
    show_default=True,
    help="Per worker, TCP connections open at once; a full worker evicts its oldest pending "
    "connection, or refuses the newcomer when none is pending.",
)
@env_option(
    "--tcp-max-per-prefix",
    env="TCP_MAX_PER_PREFIX",
    type=int,
    default=_tcp_defaults.max_per_prefix,
    show_default=True,
    help="Per worker, TCP connections of one source /24 (IPv4) or /64 (IPv6); at the cap the "
    "prefix's oldest pending connection is evicted, or the newcomer refused.",
)
@env_option(
    "--tcp-max-pending",
    env="TCP_MAX_PENDING",
    type=int,
    default=_tcp_defaults.max_pending,
    show_default=True,
    help="Per worker, TCP connections without a valid first frame; beyond, the oldest is evicted.",
)
@env_option(
    "--tcp-pending-timeout",
    env="TCP_PENDING_TIMEOUT",
    type=int,
    default=_tcp_defaults.pending_timeout_s,
    show_default=True,
    help="Seconds a TCP connection may go without a valid first frame, or hold a half frame.",
)
@env_option(
    "--tcp-max-frame",
    env="TCP_MAX_FRAME",
    type=int,
    default=_tcp_defaults.max_frame_bytes,
    show_default=True,
    help="Largest RFC 4571 frame taken from a client; a longer one closes the connection.",
)
@env_option(
    "--tcp-write-buffer",
    env="TCP_WRITE_BUFFER",
    type=int,
    default=_tcp_defaults.max_write_bytes,
    show_default=True,
    help="Bytes queued toward a TCP client that does not read; beyond, the connection is "
    "closed (a slow reader is dropped, not buffered).",
)
@env_option(
    "--tcp-max-per-hint",
    env="TCP_MAX_PER_HINT",
    type=int,
    default=_tcp_defaults.max_per_hint,
    show_default=True,
    help="Per worker, TCP connections admitted with one hint; at the cap its oldest unconfirmed "
    "connection is evicted, or the newcomer closed.",
)
@env_option(
    "--tcp-frame-rate",
    env="TCP_FRAME_RATE",
    type=int,
    default=_tcp_defaults.frame_rate_per_s,
    show_default=True,
    help="Frames per second one confirmed TCP connection may send (bursts of a quarter second's "
    "worth); beyond, dropped as frame_rate.",
)
@env_option(
    "--tcp-byte-rate",
    env="TCP_BYTE_RATE",
    type=int,
    default=_tcp_defaults.byte_rate_per_s,
    show_default=True,
    help="Payload bytes per second one confirmed TCP connection may send (bursts of a quarter "
    "second's worth); beyond, dropped as byte_rate.",
)
@env_option(
    "--tcp-frames-per-read",
    env="TCP_FRAMES_PER_READ",
    type=int,
    default=_tcp_defaults.max_frames_per_read,
    show_default=True,
    help="Frames taken from one TCP connection per round; the rest waits in the kernel, so the "
    "TCP window throttles a fast sender.",
)
@log_level_option()
def serve(**opts: Any) -> None:
    """Run the relay: a supervisor and its pinned workers on one public UDP port."""
    setup_logging(str(opts["log_level"]))
    ctx = click.get_current_context()
    refuse_secrets_on_command_line(ctx, {"keyring_json": "--keyring-json"})
    refuse_url_credentials_on_command_line(ctx, CREDENTIAL_URL_OPTIONS, REDIS_PASSWORD_INSTEAD)
    try:
        if opts["keyring"] and not opts["keyring_json"]:
            # A missing or unreadable keyring file is named before the routing options (a
            # first run without --transceiver would otherwise hear about those first).
            load_keyring(opts["keyring"], None)
        config = build_config(opts)
        from relay.supervisor import Supervisor

        supervisor = Supervisor(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    supervisor.serve()


def build_config(opts: dict[str, Any]) -> RelayConfig:
    """Turn parsed CLI options into a validated RelayConfig (ConfigError names the option)."""
    internal_host, port_base = parse_host_port("--internal", str(opts["internal"]))
    transceivers: dict[int, tuple[str, int]] = {}
    for spec in opts["transceivers"] or ():
        for item in str(spec).split():
            tid, addr = parse_transceiver("--transceiver", item)
            if tid in transceivers:
                raise ConfigError("--transceiver", f"transceiver id {tid} given twice")
            transceivers[tid] = addr
    routes: dict[int, tuple[tuple[str, int], ...]] = {}
    for spec in opts.get("routes") or ():
        for item in str(spec).split():
            cluster, addresses = parse_route("--route", item)
            if cluster in routes:
                raise ConfigError("--route", f"cluster {cluster} given twice")
            routes[cluster] = addresses
    peer_listen = opts.get("peer_listen")
    listen_tcp = opts.get("listen_tcp")
    metrics = str(opts["metrics"])
    ids = opts["transceiver_ids"]
    return RelayConfig(
        listen=parse_host_port("--listen", str(opts["listen"])),
        internal_host=internal_host,
        internal_port_base=port_base,
        cluster=int(opts["cluster"]),
        workers=len(os.sched_getaffinity(0)) if opts["workers"] is None else int(opts["workers"]),
        pin=bool(opts["pin"]),
        keyring_path=opts["keyring"],
        keyring_json=opts["keyring_json"],
        transceivers=transceivers,
        transceiver_dns=opts["transceiver_dns"],
        transceiver_ids=parse_id_range("--transceiver-ids", str(ids)) if ids else (),
        dns_interval_s=float(opts["dns_interval"]),
        dns_grace_s=float(opts["dns_grace"]),
        limits=FlowLimits(
            max_pending_flows=int(opts["max_pending_flows"]),
            max_pending_per_ufrag=int(opts["max_pending_per_ufrag"]),
            pending_ufrag_refill_s=int(opts["pending_ufrag_refill"]),
            max_pending_per_prefix=int(opts["max_pending_per_prefix"]),
            pending_ttl_s=int(opts["pending_ttl"]),
            max_confirmed_flows=int(opts["max_flows"]),
            max_flows_per_transceiver=int(opts["max_flows_per_transceiver"]),
            max_flows_per_hint=int(opts["max_flows_per_hint"]),
            idle_ttl_s=int(opts["idle_ttl"]),
        ),
        max_hint_age_s=int(opts["max_hint_age"]),
        metrics=None if metrics == "off" else parse_host_port("--metrics", metrics),
        metrics_limits=ListenerLimits(
            float(opts.get("metrics_header_timeout", HEADER_TIMEOUT_S)),
            int(opts.get("metrics_max_connections", METRICS_MAX_CONNECTIONS)),
        ),
        batch_size=int(opts["batch"]),
        socket_buffer_bytes=int(opts["socket_buffer"]),
        redis_url=opts["redis_url"],
        redis_auth=RedisAuth(
            password=redis_password(opts["redis_password_file"], os.environ),
            ca_file=opts["redis_ca_file"],
        ),
        redis_timeout_ms=int(opts["redis_timeout_ms"]),
        redis_lookups_per_s=int(opts["redis_lookups_per_s"]),
        first_packet_rate_per_s=int(opts["first_packet_rate"]),
        transceiver_stun_rate_per_s=int(
            opts.get("transceiver_stun_rate", TRANSCEIVER_STUN_RATE_PER_S)
        ),
        deny_networks=parse_networks("--deny-network", DEFAULT_DENY_NETWORKS)
        + parse_networks("--deny-network", opts["deny_networks"] or ()),
        allow_networks=parse_networks("--allow-network", opts["allow_networks"] or ()),
        takeover=bool(opts["takeover"]),
        routes=routes,
        route_probe_interval_s=float(opts.get("route_probe_interval", 1.0)),
        peer_listen=parse_host_port("--peer-listen", str(peer_listen)) if peer_listen else None,
        peer_networks=parse_networks("--peer-network", opts.get("peer_networks") or ()),
        peer_path_ttl_s=int(opts.get("peer_path_ttl", 10)),
        listen_tcp=parse_host_port("--listen-tcp", str(listen_tcp)) if listen_tcp else None,
        tcp_limits=TcpLimits(
            max_connections=int(opts.get("tcp_max_connections", _tcp_defaults.max_connections)),
            max_per_prefix=int(opts.get("tcp_max_per_prefix", _tcp_defaults.max_per_prefix)),
            max_pending=int(opts.get("tcp_max_pending", _tcp_defaults.max_pending)),
            pending_timeout_s=int(opts.get("tcp_pending_timeout", _tcp_defaults.pending_timeout_s)),
            idle_timeout_s=int(opts["idle_ttl"]),
            max_frame_bytes=int(opts.get("tcp_max_frame", _tcp_defaults.max_frame_bytes)),
            max_write_bytes=int(opts.get("tcp_write_buffer", _tcp_defaults.max_write_bytes)),
            # An admitted connection waits for its transceiver as long as a pending UDP flow.
            unconfirmed_timeout_s=int(opts["pending_ttl"]),
            max_per_hint=int(opts.get("tcp_max_per_hint", _tcp_defaults.max_per_hint)),
            frame_rate_per_s=int(opts.get("tcp_frame_rate", _tcp_defaults.frame_rate_per_s)),
            byte_rate_per_s=int(opts.get("tcp_byte_rate", _tcp_defaults.byte_rate_per_s)),
            max_frames_per_read=int(
                opts.get("tcp_frames_per_read", _tcp_defaults.max_frames_per_read)
            ),
        ),
    ).validate()
