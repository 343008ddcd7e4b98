"""``transceiver serve`` refuses bad configuration at start with a message naming the option."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from common.hint import Keyring
from transceiver.cli import main

KEYRING = Keyring.generate(1).to_json()
BASE = ["serve", "--id", "0", "--keyring-json", KEYRING, "--advertise", "127.0.0.1:3478"]


def run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, args, env=env or {})


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--id", "70000"], "--id"),
        (["--cluster", "256"], "--cluster"),
        (["--media", "nonsense"], "--media"),
        (["--advertise", "127.0.0.1:0"], "--advertise"),
        (["--advertise", "relay.example:3478"], "--advertise"),
        (["--http", "127.0.0.1:x"], "--http"),
        (["--backend", "grpc"], "--backend"),
        (["--backend", "websocket"], "--backend-url"),
        (["--max-sessions", "0"], "--max-sessions"),
        (["--ice-timeout", "0"], "--ice-timeout"),
        (["--idle-timeout", "-1"], "--idle-timeout"),
        (["--body-timeout", "0"], "--body-timeout"),
        (["--address-ttl", "0"], "--address-ttl"),
        (["--drain-grace", "-1"], "--drain-grace"),
        (["--relay-network", "10.0.0.0/33"], "--relay-network"),
        (["--keyring", "/tmp/keyring.json"], "--keyring"),  # and --keyring-json: one only
    ],
)
def test_bad_option_fails_at_start_naming_it(args, option):
    result = run(BASE + args)
    assert result.exit_code == 2, result.output
    assert option in result.output


def test_an_unreadable_keyring_is_named():
    args = ["serve", "--id", "0", "--keyring", "/nonexistent/keyring.json"]
    result = run([*args, "--advertise", "127.0.0.1:3478", "--media", "127.0.0.1:0"])
    assert result.exit_code == 2
    assert "--keyring: cannot load keyring" in result.output and "No such file" in result.output


def test_environment_variables_set_options_and_errors_name_them():
    result = run(BASE, env={"RTCEDGE_ADDRESS_TTL": "-5"})
    assert result.exit_code == 2 and "--address-ttl" in result.output


def test_an_occupied_media_port_is_reported_as_such():
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        result = run([*BASE, "--media", f"127.0.0.1:{port}", "--http", "127.0.0.1:0"])
    finally:
        taken.close()
    assert result.exit_code == 2 and "--media" in result.output, result.output
