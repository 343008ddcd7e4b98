"""``relay serve``: the command-line entry point of the relay (one per node)."""

from __future__ import annotations

import logging
import os
from typing import Any

import click

from relay.config import (
    ConfigError,
    RelayConfig,
    parse_host_port,
    parse_id_range,
    parse_transceiver,
)
from relay.flows import FlowLimits

_defaults = FlowLimits()

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
Every option can also be set by the environment variable shown in brackets.
SIGHUP reloads the keyring and the allowlist; SIGTERM stops.
"""


def _opt(*names: str, env: str, **kw: object):
    return click.option(*names, envvar=f"RTCEDGE_{env}", show_envvar=True, **kw)


@click.group()
def main() -> None:
    """rtcedge relay: forwards WebRTC UDP flows to the transceiver named in their ICE ufrag."""


@main.command(epilog=EXAMPLES)
@_opt(
    "--listen",
    env="LISTEN",
    default="0.0.0.0:3478",
    show_default=True,
    help="Public UDP address shared by all workers (SO_REUSEPORT).",
)
@_opt(
    "--internal",
    env="INTERNAL",
    default="127.0.0.1:4000",
    show_default=True,
    help="Internal HOST:PORT_BASE; worker i binds PORT_BASE+i and talks to transceivers from it.",
)
@_opt(
    "--workers",
    env="WORKERS",
    type=int,
    default=None,
    help="Worker processes [default: usable CPU count].",
)
@_opt(
    "--pin/--no-pin", env="PIN", default=True, show_default=True, help="Pin each worker to one CPU."
)
@_opt(
    "--cluster",
    env="CLUSTER",
    type=int,
    default=0,
    show_default=True,
    help="This relay's cluster id (0-255); hints for other clusters are dropped.",
)
@_opt(
    "--keyring",
    env="KEYRING",
    type=click.Path(dir_okay=False),
    default=None,
    help="Hint keyring JSON file (a mounted Kubernetes Secret).",
)
@_opt(
    "--keyring-json",
    env="KEYRING_JSON",
    default=None,
    help="Hint keyring JSON given inline instead of --keyring.",
)
@_opt(
    "--transceiver",
    "transceivers",
    env="TRANSCEIVERS",
    multiple=True,
    help="Allowlisted transceiver ID=HOST:PORT (repeatable; env: space separated).",
)
@_opt(
    "--transceiver-dns",
    env="TRANSCEIVER_DNS",
    default=None,
    help="DNS template with {id}, e.g. 'rtcedge-transceiver-{id}.rtcedge-transceiver:5000'.",
)
@_opt(
    "--transceiver-ids",
    env="TRANSCEIVER_IDS",
    default=None,
    help="Ids to expand the DNS template with, e.g. 0-15.",
)
@_opt(
    "--dns-interval",
    env="DNS_INTERVAL",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds between background re-resolutions of the DNS template.",
)
@_opt(
    "--max-pending-flows",
    env="MAX_PENDING_FLOWS",
    type=int,
    default=_defaults.max_pending_flows,
    show_default=True,
    help="Pending flows per worker.",
)
@_opt(
    "--max-pending-per-ufrag",
    env="MAX_PENDING_PER_UFRAG",
    type=int,
    default=_defaults.max_pending_per_ufrag,
    show_default=True,
    help="Pending flows one hint may open.",
)
@_opt(
    "--max-pending-per-prefix",
    env="MAX_PENDING_PER_PREFIX",
    type=int,
    default=_defaults.max_pending_per_prefix,
    show_default=True,
    help="Pending flows per source /24 (IPv4) or /64 (IPv6).",
)
@_opt(
    "--pending-ttl",
    env="PENDING_TTL",
    type=int,
    default=_defaults.pending_ttl_s,
    show_default=True,
    help="Seconds a pending flow waits for its transceiver's reply.",
)
@_opt(
    "--max-flows",
    env="MAX_FLOWS",
    type=int,
    default=_defaults.max_confirmed_flows,
    show_default=True,
    help="Confirmed flows per worker.",
)
@_opt(
    "--idle-ttl",
    env="IDLE_TTL",
    type=int,
    default=_defaults.idle_ttl_s,
    show_default=True,
    help="Seconds a confirmed flow lives without traffic from its transceiver.",
)
@_opt(
    "--max-hint-age",
    env="MAX_HINT_AGE",
    type=int,
    default=4 * 3600,
    show_default=True,
    help="Maximum session age in seconds; older hints are rejected.",
)
@_opt(
    "--metrics",
    env="METRICS",
    default="127.0.0.1:9478",
    show_default=True,
    help="HOST:PORT for /metrics, /healthz and /readyz, or 'off'.",
)
@_opt(
    "--batch",
    env="BATCH",
    type=int,
    default=256,
    show_default=True,
    help="Datagrams per recvmmsg/sendmmsg call.",
)
@_opt(
    "--socket-buffer",
    env="SOCKET_BUFFER",
    type=int,
    default=4 << 20,
    show_default=True,
    help="SO_RCVBUF/SO_SNDBUF bytes per socket.",
)
@_opt(
    "--redis-url",
    env="REDIS_URL",
    default=None,
    help="Optional Redis for faster recovery after a relay restart, e.g. redis://redis:6379/0.",
)
@_opt(
    "--redis-timeout-ms",
    env="REDIS_TIMEOUT_MS",
    type=int,
    default=50,
    show_default=True,
    help="Timeout of one Redis operation; the relay never waits for Redis to forward.",
)
@_opt(
    "--redis-lookups-per-s",
    env="REDIS_LOOKUPS_PER_S",
    type=int,
    default=200,
    show_default=True,
    help="Per worker, lookups for packets of unknown clients.",
)
@_opt(
    "--log-level",
    env="LOG_LEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def serve(**opts: Any) -> None:
    """Run the relay: a supervisor and its pinned workers on one public UDP port."""
    logging.basicConfig(
        level=str(opts["log_level"]).upper(),
        format="%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s",
    )
    try:
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
        limits=FlowLimits(
            max_pending_flows=int(opts["max_pending_flows"]),
            max_pending_per_ufrag=int(opts["max_pending_per_ufrag"]),
            max_pending_per_prefix=int(opts["max_pending_per_prefix"]),
            pending_ttl_s=int(opts["pending_ttl"]),
            max_confirmed_flows=int(opts["max_flows"]),
            idle_ttl_s=int(opts["idle_ttl"]),
        ),
        max_hint_age_s=int(opts["max_hint_age"]),
        metrics=None if metrics == "off" else parse_host_port("--metrics", metrics),
        batch_size=int(opts["batch"]),
        socket_buffer_bytes=int(opts["socket_buffer"]),
        redis_url=opts["redis_url"],
        redis_timeout_ms=int(opts["redis_timeout_ms"]),
        redis_lookups_per_s=int(opts["redis_lookups_per_s"]),
    ).validate()
