"""``transceiver``: command-line entry point of the transceiver service.

The service itself is tracked by the transceiver issue; until it lands, ``serve`` says so and
exits non-zero instead of pretending to run.
"""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """rtcedge transceiver: owns WebRTC sessions behind the relay."""


@main.command()
def serve() -> None:
    """Not available yet: the transceiver is being built (see the transceiver issue)."""
    raise click.ClickException("transceiver serve is not implemented yet")
