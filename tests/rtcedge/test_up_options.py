"""``rtcedge up`` checks its own options before it starts anything, with the services' own
configuration rules, and its errors name ``up``'s options and ``rtcedge up --help`` (never a
child's ``--media`` or ``python -m relay serve --help``)."""

from __future__ import annotations

import ipaddress
import re
import socket

import pytest
from click.testing import CliRunner

from rtcedge.checks import UpBackend, check_up_options
from rtcedge.cli import main, up

UP_OPTIONS = {name for param in up.params for name in param.opts} | {"--help"}


def run_up(args: list[str]):
    return CliRunner().invoke(main, ["up", *args], prog_name="rtcedge")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--workers", "0"], "--workers"),
        (["--workers", "300"], "--workers"),
        (["--http", "localhost:8080", "--workers", "0"], "--workers"),  # localhost is fine
        (["--http", "no-such-host.invalid:8080"], "--http"),
        (["--http", "127.0.0.1:x"], "--http"),
        (["--relay", "::1:3478"], "--relay"),
        (["--relay", "127.0.0.1:0"], "--relay"),
        (["--backend", "websocket"], "--backend-url"),
        (["--token-secret-file", "/nonexistent/secret"], "--token-secret-file"),
    ],
)
def test_a_bad_value_fails_in_up_naming_ups_option(args, option):
    result = run_up(args)
    assert result.exit_code == 2, result.output
    assert f"Error: {option}: " in result.output
    assert "Try 'rtcedge up --help'" in result.output
    assert "python -m" not in result.output
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", result.output))
    assert named <= UP_OPTIONS, f"names options `up` does not have: {named - UP_OPTIONS}"


def test_a_short_token_secret_is_refused_by_up(tmp_path):
    path = tmp_path / "secret"
    path.write_text("too short\n")
    result = run_up(["--token-secret-file", str(path)])
    assert result.exit_code == 2 and "Error: --token-secret-file: line 1" in result.output


def test_host_names_resolve_to_the_first_address_they_resolve_to():
    first = socket.getaddrinfo("localhost", 8080, type=socket.SOCK_DGRAM)[0][4][0]
    named = check_up_options("localhost:8080", "localhost:3478", 2, UpBackend(), None)
    assert named.http == (first, 8080) and named.relay == (first, 3478)
    assert ipaddress.ip_address(first).is_loopback
    literal = check_up_options("[::1]:8080", "127.0.0.1:3478", 2, UpBackend(), None)
    assert (literal.http, literal.relay) == (("::1", 8080), ("127.0.0.1", 3478))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--relay", "0.0.0.0:3478", "--advertise", "0.0.0.0"], "0.0.0.0 is a wildcard"),
        (["--relay", "[::]:3478", "--advertise", "::"], ":: is a wildcard"),
        (["--relay", "[::]:3478", "--advertise", "127.0.0.1"], "not of --relay's family"),
        (["--advertise", "no-such-host.invalid"], "cannot resolve"),
    ],
)
def test_advertise_is_never_a_wildcard_and_matches_the_relays_family(args, message):
    result = run_up(args)
    assert result.exit_code == 2, result.output
    assert "Error: --advertise: " in result.output and message in result.output, result.output


def test_the_relay_is_advertised_under_its_own_address_unless_told():
    own = check_up_options("127.0.0.1:8080", "127.0.0.1:3478", 2, UpBackend(), None)
    assert (own.advertised, own.advertised_why) == ("127.0.0.1", "--relay")
    told = check_up_options("127.0.0.1:8080", "0.0.0.0:3478", 2, UpBackend(), None, "127.0.0.1")
    assert told.advertised == "127.0.0.1" and told.internal_host == "127.0.0.1"


def test_a_services_variable_up_does_not_read_is_named_not_dropped_silently():
    """``up`` starts its services without RTCEDGE_* variables; one it does not read for an
    option of its own (RTCEDGE_AUDIO_FORMAT is one it reads) used to vanish without a word."""
    env = {"RTCEDGE_MAX_SESSIONS": "3", "RTCEDGE_AUDIO_FORMAT": "opus", "RTCEDGE_BACKEND_KEY": ""}
    result = CliRunner().invoke(main, ["up", "--workers", "0"], prog_name="rtcedge", env=env)
    assert result.exit_code == 2  # (stops before a start)
    assert result.output.splitlines()[0] == (
        "rtcedge up: ignoring RTCEDGE_MAX_SESSIONS: not read by `rtcedge up` (its services start "
        "without RTCEDGE_* variables; its options: rtcedge up --help)"
    )
