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
import sys
from collections.abc import Iterator

import click

from common.config import ConfigError
from common.hint import Keyring, KeyringError
from common.options import refuse_url_credentials_on_command_line


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
        if add_to is not None:
            old = Keyring.from_json(add_to.read())
            if key_id in old.keys:
                raise click.BadParameter(
                    f"key id {key_id} is already in the keyring", param_hint="--key-id"
                )
            fresh = Keyring({**old.keys, **fresh.keys}, key_id)
    except (KeyringError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
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


@main.command()
@click.option(
    "--http",
    default="127.0.0.1:8080",
    show_default=True,
    help="Where the page and WHIP are served.",
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
    type=click.Choice(["echo", "websocket"]),
    default="echo",
    show_default=True,
    help="What answers the caller: echo plays their audio back; websocket streams it to "
    "--backend-url.",
)
@click.option(
    "--backend-url",
    envvar="RTCEDGE_BACKEND_URL",
    show_envvar=True,
    default=None,
    help="ws:// URL for --backend websocket; one holding a credential only by the environment "
    "(passed on to the transceiver by its environment too).",
)
@click.option(
    "--token-secret-file",
    default=None,
    help="Require signed tokens (see `transceiver token`); open the page with ?token=...",
)
def up(
    http: str,
    relay_addr: str,
    advertise: str | None,
    relay_tcp: int | None,
    workers: int,
    backend: str,
    backend_url: str | None,
    token_secret_file: str | None,
) -> None:
    """Run relay + transceiver + page locally; open the printed URL and press Talk."""
    from rtcedge.checks import check_up_options

    refuse_url_credentials_on_command_line(
        click.get_current_context(), {"backend_url": "--backend-url"}
    )

    try:
        addresses = check_up_options(
            http, relay_addr, workers, backend, backend_url, token_secret_file, advertise, relay_tcp
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        addresses.check_ports_free()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    with from_checkout("rtcedge up"):
        from rtcedge.up import run_local

    run_local(addresses, workers, backend, backend_url, token_secret_file)


# name -> (module, command): a benchmark's module is imported only when it is run or listed.
BENCHMARKS = {
    "connect": ("bench.connect", "connect_bench"),
    "forward-abuse": ("bench.forward_abuse", "forward_abuse_bench"),
    "geo": ("bench.geo", "geo_bench"),
    "offer-abuse": ("bench.offer_abuse", "offer_abuse_bench"),
    "plot": ("bench.plots.cli", "plot_command"),
    "recovery": ("bench.recovery", "recovery_bench"),
    "relay": ("bench.relay_pps", "relay_bench"),
    "sctp-attack": ("bench.sctp_attack", "sctp_attack_bench"),
    "sessions": ("bench.sessions", "sessions_bench"),
    "slowloris": ("bench.slowloris", "slowloris_bench"),
    "ssrc": ("bench.ssrc_flood", "ssrc_bench"),
    "tcp": ("bench.relay_tcp", "tcp_bench"),
    "tcp-flood": ("bench.relay_tcp_flood", "tcp_flood_bench"),
}


class Benchmarks(click.Group):
    """``rtcedge bench``: the commands of ``BENCHMARKS``, each imported when it is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(BENCHMARKS)

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
