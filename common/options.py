"""What the ``relay`` and ``transceiver`` command lines share: env-backed options and logging."""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

ENV_PREFIX = "RTCEDGE_"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"


def env_option(*names: str, env: str, **kw: Any) -> Callable[[Any], Any]:
    """A click option also settable as ``RTCEDGE_<env>`` (shown in ``--help``)."""
    return click.option(*names, envvar=f"{ENV_PREFIX}{env}", show_envvar=True, **kw)


def log_level_option() -> Callable[[Any], Any]:
    """``--log-level``, the same on every service."""
    return env_option(
        "--log-level",
        env="LOG_LEVEL",
        default="info",
        show_default=True,
        type=click.Choice(["debug", "info", "warning", "error"]),
        help="Least severe log records written (to stderr).",
    )


def setup_logging(level: str) -> None:
    """One log format for every process; the pid tells workers apart."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)


def refuse_secrets_on_command_line(ctx: click.Context, secrets: dict[str, str]) -> None:
    """Fail at start when a secret option (parameter name -> option) came from the command line.

    Every local user reads a process's arguments (``ps``, /proc/PID/cmdline); the environment
    (``RTCEDGE_*``, e.g. from a Kubernetes Secret) or a 0600 file is readable by its owner only.
    """
    for name, option in secrets.items():
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            env = next(p.envvar for p in ctx.command.params if p.name == name)
            hint = " or --keyring FILE" if name == "keyring_json" else ""
            raise click.UsageError(
                f"{option}: a secret on the command line is readable by every local user: "
                f"set {env}{hint}"
            )


# Query parameters that carry a secret in the URLs people write for Redis and WebSocket services
# (redis-py reads ``password=``; WebSocket services take tokens and API keys in the query).
CREDENTIAL_QUERY_KEYS = frozenset(
    {"password", "passwd", "pwd", "token", "access_token", "api_key", "apikey", "secret", "auth"}
)


def url_credential(url: str) -> str | None:
    """What in ``url`` is a credential ('a user or password', 'the password= parameter'), or
    None. Any userinfo counts: a token is often written as the user (``wss://TOKEN@host``)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return None  # not a URL: the option's own check says so
    if "@" in parts.netloc:
        return "a user or password"
    for key, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() in CREDENTIAL_QUERY_KEYS:
            return f"the {key}= parameter"
    return None


def refuse_url_credentials_on_command_line(
    ctx: click.Context, urls: dict[str, str], instead: dict[str, str] | None = None
) -> None:
    """Fail at start when a URL option (parameter name -> option) holding a credential came from
    the command line, as ``refuse_secrets_on_command_line`` does for secrets: the same URL from
    the environment is accepted. ``instead``: per parameter, another place the secret may go."""
    for name, option in urls.items():
        value = ctx.params.get(name)
        if not value or ctx.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue
        what = url_credential(str(value))
        if what is None:
            continue
        env = next(p.envvar for p in ctx.command.params if p.name == name)
        extra = (instead or {}).get(name, "")
        raise click.UsageError(
            f"{option}: the URL holds {what}, and a command line is readable by every local "
            f"user: set {env} instead{extra}"
        )
