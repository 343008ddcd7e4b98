"""``transceiver serve``: one process = one transceiver id = one UDP socket.

Its options are the option fields of ``TransceiverConfig`` (transceiver/config.py), declared there
once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import click

from common.config import ConfigError
from common.options import (
    command_options,
    config_from_options,
    env_option,
    log_level_option,
    refuse_secrets_on_command_line,
    refuse_url_credentials_on_command_line,
    setup_logging,
)
from transceiver.config import TOKEN_SECRET_ENV, TransceiverConfig, read_token_secrets
from transceiver.process import run
from transceiver.signaling.tokens import mint

log = logging.getLogger("rtcedge.transceiver")

# Options that carry a secret: accepted from the environment (or a file), never from the command
# line, where every local user reads them (ps, /proc/<pid>/cmdline).
SECRET_OPTIONS = {"keyring_json": "--keyring-json", "auth_token": "--auth-token"}
# URL options that may hold a credential (a user, a password, a token parameter): such a URL is
# taken from the environment only.
CREDENTIAL_URL_OPTIONS = {"backend_url": "--backend-url"}
NO_RELAY_NETWORK_WARNING = (
    "--relay-network is not set: ANY host that can send UDP to the media port %s:%d can "
    "speak for any client (encapsulated datagrams name the client they carry) and move a "
    "call's media. Set --relay-network (RTCEDGE_RELAY_NETWORKS) to the relays' network."
)

EXAMPLES = """
\b
Examples:
  # behind a local relay listening on 127.0.0.1:3478
  transceiver serve --id 0 --keyring keyring.json --media 127.0.0.1:5000 \\
      --advertise 127.0.0.1:3478 --http 127.0.0.1:8080
\b
  # bridge every call to an external service over WebSocket
  transceiver serve ... --backend websocket --backend-url ws://inference:8765/call
\b
Every option can also be set by the environment variable shown in brackets; secrets
(--keyring-json, --auth-token, the token secret) only by the environment or a file.
SIGTERM, SIGINT and SIGHUP drain: /readyz turns 503, no new sessions, live ones get
--drain-grace seconds.
"""


@click.group()
def main() -> None:
    """rtcedge transceiver: owns the WebRTC sessions behind the relay."""


@main.command(epilog=EXAMPLES)
@command_options(TransceiverConfig)
@log_level_option()
def serve(**opts: Any) -> None:
    """Run a transceiver: WHIP over HTTP, every session's media on one UDP socket."""
    setup_logging(str(opts["log_level"]))
    refuse_secrets_on_command_line(click.get_current_context(), SECRET_OPTIONS)
    refuse_url_credentials_on_command_line(click.get_current_context(), CREDENTIAL_URL_OPTIONS)
    try:
        config = build_config(opts)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if not config.relay_networks:
        log.warning(NO_RELAY_NETWORK_WARNING, *config.media)
    try:
        asyncio.run(run(config))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def build_config(opts: dict[str, Any]) -> TransceiverConfig:
    """Turn parsed CLI options into a validated TransceiverConfig (ConfigError names the option)."""
    return config_from_options(TransceiverConfig, opts).validate()


@main.command()
@env_option(
    "--token-secret-file",
    env="TOKEN_SECRET_FILE",
    default=None,
    help="The secrets file the transceivers read (its first secret signs); or set "
    "RTCEDGE_TOKEN_SECRET.",
)
@click.option("--ttl", type=float, default=300.0, show_default=True, help="Seconds valid.")
@click.option("--subject", default=None, help="Who the token is for ('sub'; goes to the backend).")
def token(token_secret_file: str | None, ttl: float, subject: str | None) -> None:
    """Print a short-lived signed WHIP token (what your app's backend does; for trying it out).

    \b
    RTCEDGE_TOKEN_SECRET="$(cat secret)" transceiver token --subject alice --ttl 60
    """
    try:
        secrets = read_token_secrets("--token-secret-file", token_secret_file)
        if not secrets:
            raise ConfigError("--token-secret-file", f"give it or set {TOKEN_SECRET_ENV}")
        if ttl <= 0:
            raise ConfigError("--ttl", f"must be > 0, got {ttl}")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(mint(secrets[0], time.time(), ttl, subject))
