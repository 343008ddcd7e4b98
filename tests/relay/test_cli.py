"""``relay serve`` refuses bad configuration at start with a message naming the option."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from common.hint import Keyring
from relay.cli import main

KEYRING = Keyring.generate(1).to_json()
BASE = ["serve", "--keyring-json", KEYRING, "--transceiver", "0=127.0.0.1:5000", "--metrics", "off"]


def run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, args, env=env or {})


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--listen", "nonsense"], "--listen"),
        (["--listen", "::1:3478"], "--listen"),
        (["--listen", "relay.example:3478"], "--listen"),
        (["--internal", "127.0.0.1:x"], "--internal"),
        (["--workers", "0"], "--workers"),
        (["--cluster", "300"], "--cluster"),
        (["--transceiver", "abc=127.0.0.1:1"], "--transceiver"),
        (["--transceiver", "0=127.0.0.1:1"], "--transceiver"),  # id 0 twice
        (["--transceiver", "70000=127.0.0.1:1"], "--transceiver"),
        (["--transceiver-dns", "name:5000", "--transceiver-ids", "0-3"], "--transceiver-dns"),
        (["--transceiver-dns", "t-{id}.svc:5000"], "--transceiver-ids"),
        (["--transceiver-dns", "t-{id}.svc:5000", "--transceiver-ids", "a-b"], "--transceiver-ids"),
        (["--idle-ttl", "2"], "--idle-ttl"),
        (["--max-flows", "0"], "--max-flows"),
        (["--batch", "1000"], "--batch"),
        (["--metrics", "localhost"], "--metrics"),
        (["--keyring", "/nonexistent/keyring.json"], "--keyring"),
    ],
)
def test_bad_option_fails_at_start_naming_it(args, option):
    result = run(BASE + args)
    assert result.exit_code == 2, result.output
    assert option in result.output


def test_keyring_must_be_given_and_valid():
    result = run(["serve", "--transceiver", "0=127.0.0.1:5000"])
    assert result.exit_code == 2 and "--keyring" in result.output
    result = run(["serve", "--keyring-json", "{}", "--transceiver", "0=127.0.0.1:5000"])
    assert result.exit_code == 2 and "--keyring-json" in result.output


def test_transceivers_are_required():
    result = run(["serve", "--keyring-json", KEYRING])
    assert result.exit_code == 2 and "--transceiver" in result.output


def test_environment_variables_set_options_and_errors_name_them():
    result = run(BASE, env={"RTCEDGE_CLUSTER": "999"})
    assert result.exit_code == 2 and "--cluster" in result.output
    result = run(BASE, env={"RTCEDGE_WORKERS": "many"})
    assert result.exit_code == 2 and "--workers" in result.output


def test_an_occupied_listen_port_is_reported_as_such():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))  # no SO_REUSEPORT: the relay cannot join
        port = s.getsockname()[1]
        result = run([*BASE, "--listen", f"127.0.0.1:{port}"])
    assert result.exit_code == 2 and "--listen: cannot bind" in result.output


def test_help_shows_examples_and_environment_names():
    result = run(["serve", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output and "RTCEDGE_LISTEN" in result.output
