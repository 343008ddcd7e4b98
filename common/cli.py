"""``rtcedge``: the umbrella command (keys, benchmarks); each service has its own CLI too."""

from __future__ import annotations

import sys

import click

from common.hint import Keyring, KeyringError


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


@main.group()
def bench() -> None:
    """Benchmarks that print ratios against references measured in the same run."""


def _mount_subcommands() -> None:
    from bench.recovery import recovery_bench
    from bench.relay_pps import relay_bench
    from bench.sessions import sessions_bench
    from transceiver.up import up

    bench.add_command(relay_bench, "relay")
    bench.add_command(recovery_bench, "recovery")
    bench.add_command(sessions_bench, "sessions")
    main.add_command(up, "up")


_mount_subcommands()

if __name__ == "__main__":
    main()
