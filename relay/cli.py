"""``relay serve``: the command-line entry point of the relay (one per node).

Its options are the option fields of ``RelayConfig`` (relay/config.py), declared there once.
"""

from __future__ import annotations

from typing import Any

import click

from common.config import ConfigError, load_keyring
from common.options import (
    command_options,
    config_from_options,
    log_level_option,
    refuse_secrets_on_command_line,
    refuse_url_credentials_on_command_line,
    setup_logging,
)
from relay.config import RelayConfig

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
@command_options(RelayConfig)
@log_level_option()
def serve(**opts: Any) -> None:
    """Run the relay: a supervisor and its pinned workers on one public UDP port."""
    setup_logging(str(opts["log_level"]))
    ctx = click.get_current_context()
    refuse_secrets_on_command_line(ctx, {"keyring_json": "--keyring-json"})
    refuse_url_credentials_on_command_line(ctx, CREDENTIAL_URL_OPTIONS, REDIS_PASSWORD_INSTEAD)
    try:
        if opts["keyring_path"] and not opts["keyring_json"]:
            # A missing or unreadable keyring file is named before the routing options (a
            # first run without --transceiver would otherwise hear about those first).
            load_keyring(opts["keyring_path"], None)
        config = build_config(opts)
        from relay.supervisor import Supervisor

        supervisor = Supervisor(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    supervisor.serve()


def build_config(opts: dict[str, Any]) -> RelayConfig:
    """Turn parsed CLI options into a validated RelayConfig (ConfigError names the option)."""
    return config_from_options(RelayConfig, opts).validate()
