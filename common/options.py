"""What the ``relay`` and ``transceiver`` command lines share: options declared on the fields of
their config dataclasses, env-backed options, logging, and the refusal of secrets in arguments.

An option is declared once, on the config field it fills (``option(...)``): its flag, environment
variable, default, help, how a given value is parsed and checked, and the chart value that sets
it. The click options (``command_options``) and the config from parsed options
(``config_from_options``) are made from those fields; the config's ``validate`` runs every
field's own checks (``check_fields``) and then the rules that span fields.
"""

from __future__ import annotations

import dataclasses
import logging
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from common.config import ConfigError, address_family, parse_host_port

ENV_PREFIX = "RTCEDGE_"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"
OPTION = "rtcedge.option"  # the metadata key of an option field

Parse = Callable[[str, Any], Any]  # (the option, the value given) -> the field's value
Check = Callable[[str, Any], None]  # (the option, the field's value); raises ConfigError
C = TypeVar("C")
F = TypeVar("F", bound=Callable[..., Any])
REQUIRED: Any = dataclasses.MISSING  # ``code_default``: no default when built in code


@dataclasses.dataclass(frozen=True)
class Option:
    """One command-line option, as the config field it fills declares it."""

    flag: str  # "--listen"; "--pin/--no-pin" for an on/off pair
    env: str  # its environment variable, RTCEDGE_ included
    help: str
    default: Any  # as a command line gives it: what --help and the docs show
    parse: Parse | None  # the given value -> the field's; None: taken as given
    checks: tuple[Check, ...]  # the field's own rules, for a value that is set (not None)
    chart: str | None  # the helm value that sets it, or the chart's extraArgs / extraEnv
    only_with: str | None  # another field without which the checks do not apply
    into: tuple[str, ...]  # the fields a parsed tuple fills, when more than one
    env_secret: str | None  # a variable the parser also reads: the secret of a file option
    click: Mapping[str, Any]  # type=, multiple=, is_flag=, required=, show_default=

    @property
    def name(self) -> str:
        """The option as messages name it (the first flag of a pair)."""
        return self.flag.split("/")[0]

    def value(self, given: Any) -> Any:
        return given if self.parse is None else self.parse(self.name, given)

    def check(self, value: Any) -> None:
        if value is not None:
            for check in self.checks:
                check(self.name, value)


def option(
    flag: str,
    *,
    help: str,
    default: Any = None,
    env: str | None = None,
    parse: Parse | None = None,
    check: Check | tuple[Check, ...] = (),
    chart: str | None = None,
    only_with: str | None = None,
    into: tuple[str, ...] = (),
    env_secret: str | None = None,
    code_default: Any = ...,
    repr: bool = True,
    **click_kw: Any,
) -> Any:
    """A config field that is also a command-line option (see ``Option``).

    ``env`` defaults to the flag's name in capitals (``--max-flows``: ``RTCEDGE_MAX_FLOWS``).
    The field's default, when a config is built in code (tests, ``rtcedge up``), is the parsed
    command-line default, unless ``code_default`` says otherwise (``REQUIRED``: none).
    """
    name = flag.split("/")[0].removeprefix("--")
    if default is not None and not (click_kw.get("is_flag") or click_kw.get("multiple")):
        click_kw.setdefault("show_default", True)
    spec = Option(
        flag,
        ENV_PREFIX + (env or name.replace("-", "_").upper()),
        help,
        default,
        parse,
        check if isinstance(check, tuple) else (check,),
        chart,
        only_with,
        into,
        env_secret,
        click_kw,
    )
    kw: dict[str, Any] = {"metadata": {OPTION: spec}, "repr": repr}
    if code_default is not ...:
        kw["default"] = code_default
    elif click_kw.get("required"):
        pass  # required on the command line, and in code
    elif parse is None:
        kw["default"] = default
    else:
        given = () if click_kw.get("multiple") and default is None else default
        kw["default_factory"] = lambda: _first(spec.value(given), into)
    return dataclasses.field(**kw)


def _first(value: Any, into: tuple[str, ...]) -> Any:
    return value[0] if into else value


def option_fields(config: Any) -> list[tuple[str, Option]]:
    """(field name, option) of each option field of a config class or object, in field order."""
    return [
        (f.name, f.metadata[OPTION]) for f in dataclasses.fields(config) if OPTION in f.metadata
    ]


def command_options(config: type) -> Callable[[F], F]:
    """Decorate a click command with an option per option field of ``config``, in field order
    (so ``--help`` lists them so); each parameter is named after its field."""
    return click_options(option_fields(config))


def click_options(fields: Iterable[tuple[str, Option]]) -> Callable[[F], F]:
    """Decorate a click command with an option per (field name, option), in that order: a
    config's (``command_options``), or some of them on another command that passes them on
    (``rtcedge up``)."""
    specs = list(fields)

    def decorate(command: F) -> F:
        for name, spec in reversed(specs):
            kw = dict(spec.click)
            if spec.default is not None or not (kw.get("multiple") or kw.get("required")):
                kw["default"] = spec.default  # (none for a repeatable or a required one)
            command = click.option(
                spec.flag, name, envvar=spec.env, show_envvar=True, help=spec.help, **kw
            )(command)
        return command

    return decorate


def arguments(spec: Option, value: Any) -> list[str]:
    """The command-line arguments that give ``value`` (as the field holds it, a plain scalar)
    to an option: ``--flag value``, or one flag of an on/off pair."""
    if "/" in spec.flag:
        on, off = spec.flag.split("/")
        return [on if value else off]
    return [spec.flag, str(value)]


def config_from_options(config: type[C], params: Mapping[str, Any]) -> C:
    """``config`` from parsed options (parameter name -> value; a missing one: its default),
    each value through its field's parser; ConfigError names the option."""
    values: dict[str, Any] = {}
    for name, spec in option_fields(config):
        value = spec.value(params.get(name, spec.default))
        values.update(zip(spec.into, value, strict=True) if spec.into else [(name, value)])
    return config(**values)


def check_fields(config: Any) -> None:
    """Every option field's own checks, in field order: ConfigError for the first bad value."""
    for name, spec in option_fields(config):
        if spec.only_with is None or getattr(config, spec.only_with):
            spec.check(getattr(config, name))


# Parsers: (the option, the value given) -> the field's value.


def host_port(option: str, text: str) -> tuple[str, int]:
    return parse_host_port(option, str(text))


def host_port_or_none(option: str, text: str | None) -> tuple[str, int] | None:
    """HOST:PORT, or None for an option left out (or given empty)."""
    return parse_host_port(option, str(text)) if text else None


def host_port_or_off(option: str, text: str) -> tuple[str, int] | None:
    """HOST:PORT, or None for 'off'."""
    return None if text == "off" else parse_host_port(option, str(text))


def each_word(parse_one: Callable[[str, str], Any]) -> Parse:
    """A repeatable option whose every value may hold several, space separated (the
    environment's form) -> a tuple of ``parse_one(option, word)``."""

    def parse(option: str, given: Iterable[str]) -> tuple[Any, ...]:
        return tuple(parse_one(option, word) for spec in given for word in str(spec).split())

    return parse


def words(option: str, given: Iterable[str]) -> tuple[str, ...]:
    return each_word(lambda _, word: word)(option, given)


def unique_map(parse_one: Callable[[str, str], tuple[Any, Any]], twice: str) -> Parse:
    """Like ``each_word``, of (key, value) pairs, into a dict; a key given twice is refused
    (``twice``: the message, ``{}`` the key)."""

    def parse(option: str, given: Iterable[str]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, value in each_word(parse_one)(option, given):
            if key in out:
                raise ConfigError(option, twice.format(key))
            out[key] = value
        return out

    return parse


# Checks: (the option, the field's value), ConfigError naming the option.


def must(ok: Callable[[Any], bool], message: str) -> Check:
    """ConfigError(option, ``message`` with the value in place of ``{}``) unless ``ok(value)``."""

    def check(option: str, value: Any) -> None:
        if not ok(value):
            raise ConfigError(option, message.format(value))

    return check


def between(low: float, high: float) -> Check:
    return must(lambda v: low <= v <= high, f"must be {low}..{high}, got {{}}")


def at_least(low: float, note: str = "") -> Check:
    """``note``: what the lowest value means, e.g. ' (0: off)'."""
    return must(lambda v: v >= low, f"must be >= {low}{note}, got {{}}")


POSITIVE = must(lambda v: v > 0, "must be > 0, got {}")


def ip_literal(option: str, host: str) -> None:
    """A host (or the host of a (host, port)) must be an IP address: ICE candidates, and the
    sockets bound, carry no names."""
    address_family(option, host[0] if isinstance(host, tuple) else host)


def each(check: Check) -> Check:
    """``check`` on every element of a tuple field."""

    def check_all(option: str, values: Iterable[Any]) -> None:
        for value in values:
            check(option, value)

    return check_all


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
