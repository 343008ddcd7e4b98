"""``rtcedge``: the umbrella command over both services (keyring, the whole path on one machine,
benchmarks); each service has its own command too (``relay``, ``transceiver``).

``up`` and the benchmarks start the services as child processes through testbed/ and load what
they need (aiortc and av for the benchmarks) only when their subcommand runs: ``rtcedge keygen``
and ``rtcedge --help`` stay light and work in the image, which holds no bench/ or testbed/
(.dockerignore).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import click
from click.core import ParameterSource

from common.config import ConfigError
from common.hint import Keyring, KeyringError
from common.options import refuse_url_credentials_on_command_line
from transceiver import codec_options, https_options

# The transceiver's (transceiver/config.py, which this light module imports only to list the
# backends: tests/rtcedge/test_up_backend_options.py holds them equal).
AUDIO_FORMATS = ("pcm16", "opus")
AUDIO_RATES = ("8000", "16000", "24000", "48000")


def list_backends(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--backend list``: the transceiver's list (built-ins and installed plugins), exit 0."""
    if value != "list":
        return value
    from transceiver.config import list_backends as transceivers

    return transceivers(ctx, param, value)


@click.group()
def main() -> None:
    """rtcedge: WebRTC ingress for real-time voice AI (relay + transceiver)."""


@main.command()
@click.option("--key-id", type=int, default=0, show_default=True, help="Key id, 0..15.")
@click.option(
    "--add-to",
    type=click.File("r"),
    default=None,
    help="Existing keyring JSON: add a new key to it and make it the signing key (rotation).",
)
def keygen(key_id: int, add_to) -> None:  # type: ignore[no-untyped-def]
    """Print a hint keyring as JSON (for a Kubernetes Secret or --keyring FILE)."""
    try:
        fresh = Keyring.generate(key_id)
    except KeyringError as exc:
        raise click.UsageError(f"--key-id: {exc}") from None
    if add_to is not None:
        try:
            old = Keyring.from_json(add_to.read())
        except (KeyringError, UnicodeDecodeError) as exc:
            raise click.UsageError(f"--add-to: {add_to.name}: {exc}") from None
        if key_id in old.keys:
            raise click.UsageError(f"--key-id: key id {key_id} is already in {add_to.name}")
        fresh = Keyring({**old.keys, **fresh.keys}, key_id)
    sys.stdout.write(fresh.to_json() + "\n")


@contextlib.contextmanager
def from_checkout(command: str) -> Iterator[None]:
    """Imports of bench/ or testbed/ inside: a clear message where they are not installed (the
    image)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name not in ("bench", "testbed"):
            raise
        raise click.ClickException(
            f"`{command}` runs from a source checkout (pip install -e .): {exc.name}/ is not "
            "installed here"
        ) from None


UP_EXAMPLES = """
\b
Examples:
  rtcedge up                  # the echo: open http://127.0.0.1:8080/ and press Talk
  rtcedge up --agent          # a voice agent: open http://127.0.0.1:8080/realtime
  rtcedge up --relay 0.0.0.0:3478 --http 0.0.0.0:8443
                              # a phone on the LAN: https, a self-signed certificate
  RTCEDGE_BACKEND_KEY=... rtcedge up --backend realtime \\
      --backend-url 'ws://HOST:PORT/v1/realtime?model=...'     # your own model server
"""


@main.command(epilog=UP_EXAMPLES)
@click.option(
    "--http",
    default="127.0.0.1:8080",
    show_default=True,
    help="Where the page and WHIP are served (the transceiver's media socket on its host); "
    "for an IPv6 --relay, [::1]:8080 unless given.",
)
@click.option(
    "--relay",
    "relay_addr",
    default="127.0.0.1:3478",
    show_default=True,
    help="The relay's public UDP address (the only one a browser sends media to).",
)
@click.option(
    "--advertise",
    default=None,
    metavar="HOST",
    help="The relay address answers give browsers, needed when --relay listens on a wildcard "
    "(0.0.0.0, ::); default: --relay's address, or for a wildcard the address of the interface "
    "with the default route (loopback without one).",
)
@click.option(
    "--relay-tcp",
    "relay_tcp",
    type=int,
    default=None,
    metavar="PORT",
    help="Also ICE over TCP (RFC 6544) on this TCP port of --relay's host, for callers whose "
    "network drops UDP; answers then name it as a passive TCP candidate [default: off].",
)
@click.option("--workers", type=int, default=2, show_default=True, help="Relay workers.")
@click.option(
    "--backend",
    default="echo",
    show_default=True,
    metavar="NAME|MODULE:FACTORY|list",
    is_eager=True,
    callback=list_backends,
    envvar="RTCEDGE_BACKEND",
    show_envvar=True,
    help="What answers the caller: echo plays their audio back; websocket streams it to "
    "--backend-url (our protocol); realtime makes each call a session of a Realtime-API model "
    "server at --backend-url (docs/realtime.md); media-streams a call of a telephony bot "
    "(Twilio's Media Streams protocol, docs/media-streams.md); grpc a stream of a gRPC "
    "backend (our protocol, docs/backend-protocol.md); a plugin's name or MODULE:FACTORY, a "
    "backend in the transceiver's process (docs/plugins.md); 'list' shows them and exits.",
)
@click.option(
    "--backend-url",
    envvar="RTCEDGE_BACKEND_URL",
    show_envvar=True,
    default=None,
    help="ws:// or wss:// URL for --backend websocket, media-streams, or realtime "
    "(ws://HOST:PORT/v1/realtime?model=...), grpc:// or grpcs://HOST:PORT for grpc; one "
    "holding a credential only by the environment (passed on to the transceiver by its "
    "environment too).",
)
@click.option(
    "--backend-key-file",
    envvar="RTCEDGE_BACKEND_KEY_FILE",
    show_envvar=True,
    default=None,
    help="File holding the backend's key (--backend websocket, realtime, media-streams or a "
    "plugin), sent as its bearer; "
    "or set RTCEDGE_BACKEND_KEY (passed on by the environment, never a command line).",
)
@click.option(
    "--audio-format",
    type=click.Choice(AUDIO_FORMATS),
    default="pcm16",
    show_default=True,
    envvar="RTCEDGE_AUDIO_FORMAT",
    show_envvar=True,
    help="What the echo backend takes: decoded PCM16, or the caller's Opus passed through.",
)
@click.option(
    "--audio-rate",
    type=click.Choice(AUDIO_RATES),
    default=None,
    envvar="RTCEDGE_AUDIO_RATE",
    show_envvar=True,
    help="PCM16 rate, in Hz, of the echo and realtime backends [default: echo 48000, realtime "
    "24000].",
)
@click.option(
    "--realtime-session-file",
    envvar="RTCEDGE_REALTIME_SESSION_FILE",
    show_envvar=True,
    default=None,
    help="JSON file of the Realtime session (model, instructions, voice, tools...) sent to the "
    "model server first on every call (--backend realtime or --agent).",
)
@click.option(
    "--agent",
    is_flag=True,
    default=False,
    help="Talk to a voice agent: run the example one (examples/voice_agent/, offline; pip "
    "install -e '.[agent]', apt-get install espeak-ng) on a free loopback port, with a fresh "
    "key, as --backend realtime; open /realtime. Not with --backend, --backend-url or "
    "--backend-key-file.",
)
@click.option(
    "--token-secret-file",
    default=None,
    help="Require signed tokens (see `transceiver token`); open the page with ?token=...",
)
@click.option(
    "--admit-max-cpu",
    "admit_max_cpu",
    type=float,
    default=0.0,
    show_default=True,
    envvar="RTCEDGE_ADMIT_MAX_CPU",
    show_envvar=True,
    help="Refuse new calls while the transceiver uses more than this % of one core. 0: off, "
    "as for a local demo (a busy laptop's first call is not refused); a deployed transceiver's "
    "is 85 (docs/transceiver.md).",
)
@click.option(
    "--admit-max-loop-lag",
    "admit_max_loop_lag",
    type=float,
    default=0.0,
    show_default=True,
    envvar="RTCEDGE_ADMIT_MAX_LOOP_LAG",
    show_envvar=True,
    help="Refuse new calls while the transceiver's event loop runs this many ms late. 0: off, "
    "as for a local demo; a deployed transceiver's is 20.",
)
@click.option(
    "--https/--no-https",
    default=None,
    help="Serve the page and WHIP over https with a self-signed certificate made for this run "
    "(its SHA-256 fingerprint printed), as a browser off this machine needs for the "
    "microphone [default: on when --http listens beyond loopback, said at start].",
)
@click.option(
    "--https-name",
    "https_names",
    multiple=True,
    metavar="NAME",
    help="A host name the certificate of --https is also for (e.g. laptop.local); repeatable.",
)
@https_options.click_options  # the transceiver's --https-cert, --https-key, passed on to it
@codec_options.click_options  # the transceiver's --opus-* options, passed on to it
def up(
    http: str,
    relay_addr: str,
    advertise: str | None,
    relay_tcp: int | None,
    workers: int,
    backend: str,
    backend_url: str | None,
    backend_key_file: str | None,
    audio_format: str,
    audio_rate: str | None,
    realtime_session_file: str | None,
    agent: bool,
    token_secret_file: str | None,
    admit_max_cpu: float,
    admit_max_loop_lag: float,
    https: bool | None,
    https_names: tuple[str, ...],
    https_cert: str | None,
    https_key: str | None,
    **opus: Any,
) -> None:
    """Run relay + transceiver + page locally; open the printed URL and press Talk."""
    from rtcedge.checks import UpAdmission, UpBackend, check_up_options
    from rtcedge.https import HttpsGiven

    ctx = click.get_current_context()
    refuse_url_credentials_on_command_line(ctx, {"backend_url": "--backend-url"})
    ignored = ignored_variables(ctx.command, dict(os.environ))
    if ignored:
        click.echo(
            f"rtcedge up: ignoring {', '.join(ignored)}: not read by `rtcedge up` (its services "
            "start without RTCEDGE_* variables; its options: rtcedge up --help)",
            err=True,
        )
    if agent:
        refuse_with_agent(ctx)
    chosen = UpBackend(
        "realtime" if agent else backend,
        backend_url,
        backend_key_file,
        audio_format,
        audio_rate,
        realtime_session_file,
        agent,
    )
    # Not given: on the loopback of --relay's family (``--relay '[::1]:3478'`` alone on IPv6).
    given_http = None if ctx.get_parameter_source("http") is ParameterSource.DEFAULT else http
    admission = UpAdmission(admit_max_cpu, admit_max_loop_lag)
    try:
        encoder = codec_options.settings_of(opus)
        addresses = check_up_options(
            given_http,
            relay_addr,
            workers,
            chosen,
            token_secret_file,
            advertise,
            relay_tcp,
            admission,
            encoder,
            HttpsGiven(https, https_cert, https_key, https_names),
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if said := addresses.https.announcement(addresses.http):  # https by itself: said at start
        click.echo(said)
    try:
        addresses.check_ports_free()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    with from_checkout("rtcedge up"):
        from rtcedge.up import run_local
        from testbed.voice_agent import INSTALL, agent_missing

        missing = agent_missing() if agent else []
    if missing:
        raise click.UsageError(f"--agent: needs {', '.join(missing)}: {INSTALL}")
    run_local(addresses, workers, chosen, token_secret_file, admission, encoder)


# Read by ``up`` besides its options' variables: the model server's key (passed on as it is).
UP_VARIABLES = frozenset({"RTCEDGE_BACKEND_KEY"})


def ignored_variables(command: click.Command, environ: dict[str, str]) -> list[str]:
    """The RTCEDGE_* variables set for ``command`` that it reads for none of its options: the
    services' own (``up`` starts them without any), which used to be dropped without a word."""
    read = {p.envvar for p in command.params if isinstance(p.envvar, str)} | UP_VARIABLES
    return sorted(k for k in environ if k.startswith("RTCEDGE_") and k not in read)


# What ``--agent`` stands for (``up``'s parameter -> its option): none of them goes with it.
AGENT_REPLACES = {
    "backend": "--backend",
    "backend_url": "--backend-url",
    "backend_key_file": "--backend-key-file",
}


def refuse_with_agent(ctx: click.Context) -> None:
    """A UsageError for an option ``--agent`` stands for, from the command line or the
    environment (a model server of the user's, which ``--agent`` would silently not call)."""
    for name, option in AGENT_REPLACES.items():
        source = ctx.get_parameter_source(name)
        if source is ParameterSource.COMMANDLINE:
            raise click.UsageError(f"--agent: runs its own model server: drop {option}")
        if source is ParameterSource.ENVIRONMENT:
            env = next(p.envvar for p in ctx.command.params if p.name == name)
            raise click.UsageError(f"--agent: runs its own model server: unset {env} ({option})")


# name -> (module, command): a benchmark's module is imported only when it is run or listed.
BENCHMARKS = {
    "backends": ("bench.backends", "backends_bench"),
    "connect": ("bench.connect", "connect_bench"),
    "forward-abuse": ("bench.forward_abuse", "forward_abuse_bench"),
    "geo": ("bench.geo", "geo_bench"),
    "offer-abuse": ("bench.offer_abuse", "offer_abuse_bench"),
    "peer": ("bench.peer", "peer_bench"),
    "plot": ("bench.plots.cli", "plot_command"),
    "realtime": ("bench.realtime", "realtime_bench"),
    "recovery": ("bench.recovery", "recovery_bench"),
    "relay": ("bench.relay_pps", "relay_bench"),
    "sctp-attack": ("bench.sctp_attack", "sctp_attack_bench"),
    "sessions": ("bench.sessions", "sessions_bench"),
    "slowloris": ("bench.slowloris", "slowloris_bench"),
    "ssrc": ("bench.ssrc_flood", "ssrc_bench"),
    "tcp": ("bench.relay_tcp", "tcp_bench"),
    "tcp-flood": ("bench.relay_tcp_flood", "tcp_flood_bench"),
    "turn": ("bench.turn", "turn_bench"),
}


def backend_named(args: list[str], option: str = "--backend") -> bool:
    """``--backend NAME`` or ``--backend=NAME`` (or another ``option``) among ``args``."""
    return any(a == option or a.startswith(f"{option}=") for a in args)


class Benchmarks(click.Group):
    """``rtcedge bench``: the commands of ``BENCHMARKS``, each imported when it is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(BENCHMARKS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """``sessions --backend NAME`` (a network backend) is ``backends --backend NAME``: the
        echo sessions benchmark measures the echo backend only (issue 24 names the command).
        ``sessions --reference janus`` is ``peer``: the opus echo beside Janus's EchoTest
        (issue 26 names it)."""
        name, command, rest = super().resolve_command(ctx, args)
        if name == "sessions" and backend_named(rest):
            return "backends", self.get_command(ctx, "backends"), rest
        if name == "sessions" and backend_named(rest, "--reference"):
            return "peer", self.get_command(ctx, "peer"), rest
        return name, command, rest

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in BENCHMARKS:
            return None
        module, name = BENCHMARKS[cmd_name]
        with from_checkout(f"rtcedge bench {cmd_name}"):
            return getattr(importlib.import_module(module), name)
        return None  # from_checkout reported the missing checkout


@main.group(cls=Benchmarks)
def bench() -> None:
    """Benchmarks that print ratios against references measured in the same run."""


if __name__ == "__main__":
    main()
