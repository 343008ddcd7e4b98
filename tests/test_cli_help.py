"""Every option of every command (``relay``, ``transceiver``, ``rtcedge`` and their subcommands,
the benchmarks included) says in ``--help`` what it is for."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from relay.cli import main as relay_main
from rtcedge.cli import main as rtcedge_main
from transceiver.cli import main as transceiver_main


def commands(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    """``command`` and every subcommand below it, each with the words that run it."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} {name} is listed but cannot be loaded"
            yield from commands(sub, f"{path} {name}")


ALL = [
    pair
    for group, name in (
        (relay_main, "relay"),
        (transceiver_main, "transceiver"),
        (rtcedge_main, "rtcedge"),
    )
    for pair in commands(group, name)
]


def test_the_walk_reaches_the_subcommands():
    names = {path for path, _ in ALL}
    assert {"relay serve", "transceiver serve", "transceiver token", "rtcedge up"} <= names
    assert {"rtcedge bench relay", "rtcedge bench sessions", "rtcedge bench recovery"} <= names
    assert "rtcedge bench geo" in names


@pytest.mark.parametrize(("path", "command"), ALL, ids=[path for path, _ in ALL])
def test_every_option_has_help_text(path, command):
    bare = [
        "/".join(param.opts)
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    assert not bare, f"`{path}` options without help text: {bare}"
