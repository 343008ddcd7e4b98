"""``relay serve`` refuses bad configuration at start with a message naming the option."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from common.hint import Keyring
from relay.addresspolicy import AddressPolicy
from relay.cli import build_config, main, serve
from relay.config import parse_networks

KEYRING = Keyring.generate(1).to_json()
BASE = ["serve", "--transceiver", "0=127.0.0.1:5000", "--metrics", "off"]


def run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, args, env={"RTCEDGE_KEYRING_JSON": KEYRING, **(env or {})})


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
        (["--coalesce-us", "1001"], "--coalesce-us"),  # a wait of at most 1 ms
        (["--coalesce-us", "-1"], "--coalesce-us"),
        (["--metrics", "localhost"], "--metrics"),
        (["--keyring", "/nonexistent/keyring.json"], "--keyring"),
        (["--deny-network", "10.0.0.300/8"], "--deny-network"),
        (["--allow-network", "127.0.0.1/8"], "--allow-network"),
    ],
)
def test_bad_option_fails_at_start_naming_it(args, option):
    result = run(BASE + args)
    assert result.exit_code == 2, result.output
    assert option in result.output


def test_a_transceiver_of_the_other_family_than_internal_is_named_at_start():
    """It used to fail once serving began, as "cannot resolve transceiver ids [0]"."""
    args = ["serve", "--transceiver", "0=[::1]:5000", "--internal", "127.0.0.1:4000"]
    result = run([*args, "--metrics", "off"])
    assert result.exit_code == 2, result.output
    assert (
        "Error: --transceiver: 0=[::1]:5000 is IPv6, --internal (127.0.0.1) IPv4" in result.output
    )


def test_keyring_must_be_given_and_valid():
    result = run(["serve", "--transceiver", "0=127.0.0.1:5000"], {"RTCEDGE_KEYRING_JSON": ""})
    assert result.exit_code == 2 and "--keyring" in result.output
    result = run(["serve", "--transceiver", "0=127.0.0.1:5000"], {"RTCEDGE_KEYRING_JSON": "{}"})
    assert result.exit_code == 2 and "--keyring-json" in result.output


@pytest.mark.parametrize("content", [None, "not json"], ids=["missing", "malformed"])
def test_a_bad_keyring_file_is_named_before_the_routing_options(tmp_path, content):
    path = tmp_path / "keyring.json"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(
        main,
        ["serve", "--keyring", str(path), "--metrics", "off"],  # and no --transceiver yet
        env={"RTCEDGE_KEYRING_JSON": None},
    )
    assert result.exit_code == 2
    assert f"--keyring: cannot load keyring {path}: " in result.output  # which file
    assert "--transceiver" not in result.output


def test_the_keyring_is_refused_on_the_command_line():
    result = run(["serve", "--keyring-json", KEYRING, "--transceiver", "0=127.0.0.1:5000"])
    assert result.exit_code == 2
    assert "--keyring-json" in result.output and "RTCEDGE_KEYRING_JSON" in result.output


def test_transceivers_are_required():
    result = run(["serve"])
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


def parsed(args: list[str]):
    """The RelayConfig a command line (and the environment) would start with."""
    return build_config(serve.make_context("serve", [*BASE[1:], "--keyring", "k", *args]).params)


def test_network_options_add_denials_and_exceptions_also_from_the_environment(monkeypatch):
    default = parsed([])
    assert AddressPolicy(default.deny_networks).denies(bytes([127, 0, 0, 1]))
    assert not default.allow_networks
    monkeypatch.setenv("RTCEDGE_DENY_NETWORKS", "8.8.8.0/24,2001:4860::/32")
    monkeypatch.setenv("RTCEDGE_ALLOW_NETWORKS", "127.0.0.0/8, ::1/128")
    cfg = parsed([])
    assert set(cfg.deny_networks) - set(default.deny_networks) == set(
        parse_networks("-", ["8.8.8.0/24", "2001:4860::/32"])
    ), "added to the built-in ranges, not instead of them"
    assert [str(n) for n in cfg.allow_networks] == ["127.0.0.0/8", "::1/128"]
    policy = AddressPolicy(cfg.deny_networks, cfg.allow_networks)
    assert policy.denies(bytes([8, 8, 8, 8])) and not policy.denies(bytes([127, 0, 0, 1]))
    result = run(BASE, env={"RTCEDGE_ALLOW_NETWORKS": "127.0.0.0/8,bogus"})
    assert result.exit_code == 2 and "--allow-network" in result.output


def test_help_names_the_network_options():
    text = " ".join(run(["serve", "--help"]).output.split())
    for words in ("--deny-network", "RTCEDGE_DENY_NETWORKS", "--allow-network", "Wins over"):
        assert words in text
