"""``transceiver serve`` refuses bad configuration at start with a message naming the option;
secrets come from the environment or a file, never the command line; ``transceiver token``."""

from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner

from common.hint import Keyring
from transceiver.cli import build_config, main
from transceiver.signaling.tokens import TokenVerifier

KEYRING = Keyring.generate(1).to_json()
BASE = ["serve", "--id", "0", "--advertise", "127.0.0.1:3478"]
SECRET = "s" * 32


def run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, args, env={"RTCEDGE_KEYRING_JSON": KEYRING, **(env or {})})


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
        (
            ["--backend", "websocket", "--backend-url", "ws://b/", "--audio-format", "opus"],
            "--audio-format",
        ),
        (["--max-sessions", "0"], "--max-sessions"),
        (["--ice-timeout", "0"], "--ice-timeout"),
        (["--idle-timeout", "-1"], "--idle-timeout"),
        (["--body-timeout", "0"], "--body-timeout"),
        (["--address-ttl", "0"], "--address-ttl"),
        (["--drain-grace", "-1"], "--drain-grace"),
        (["--relay-network", "10.0.0.0/33"], "--relay-network"),
        (["--keyring", "/tmp/keyring.json"], "--keyring"),  # and --keyring-json: one only
        (["--first-check-timeout", "0"], "--first-check-timeout"),
        (["--metrics", "127.0.0.1"], "--metrics"),
        (["--metrics", "localhost:9479"], "--metrics"),
        (["--client-rate", "-1"], "--client-rate"),
        (["--client-burst", "0"], "--client-burst"),
        (["--client-max-sessions", "-1"], "--client-max-sessions"),
        (["--trusted-proxy", "10.0.0.0/8 nonsense"], "--trusted-proxy"),
        (["--token-max-ttl", "0"], "--token-max-ttl"),
        (["--token-secret-file", "/nonexistent/secret"], "--token-secret-file"),
        (["--region", "eu=relay.example:3478"], "--region"),
        (["--region", "eu"], "--region"),
        (["--region", "eu=192.0.2.1:3478", "--region-prefix", "10.0.0.0/8=us"], "--region-prefix"),
        (["--region", "eu=192.0.2.1:3478", "--region-header", "X-Region"], "--region-header"),
        (["--peer-http", "1:10.0.0.1:8080"], "--peer-http"),
        (["--peer-http", "70000=10.0.0.1:8080"], "--peer-http"),
        (["--peer-http", "1=10.0.0.1"], "--peer-http"),
        (["--peer-http", "1=10.0.0.1:8080 1=10.0.0.2:8080"], "--peer-http"),
        (["--peer-http-dns", "trx-0.headless:8080"], "--peer-http-dns"),
        (["--peer-http-dns", "trx-{id}.headless"], "--peer-http-dns"),
        (["--peer-timeout", "0"], "--peer-timeout"),
        (["--peer-max-forwards", "0"], "--peer-max-forwards"),
        (["--peer-max-per-owner", "0"], "--peer-max-per-owner"),
        (["--peer-max-per-client", "0"], "--peer-max-per-client"),
        (["--peer-max-claims", "0"], "--peer-max-claims"),
        (["--peer-connect-timeout", "0"], "--peer-connect-timeout"),
        (["--peer-fail-fast", "-1"], "--peer-fail-fast"),
        (["--max-sdp-bytes", "0"], "--max-sdp-bytes"),
    ],
)
def test_bad_option_fails_at_start_naming_it(args, option):
    result = run(BASE + args)
    assert result.exit_code == 2, result.output
    assert option in result.output


@pytest.mark.parametrize(
    ("args", "missing"),
    [(["--advertise", "127.0.0.1:3478"], "'--id'"), (["--id", "0"], "'--advertise'")],
)
def test_the_id_and_the_advertised_address_are_required(args, missing):
    result = run(["serve", *args, "--max-sessions", "0"])  # (were it not required: no start)
    assert result.exit_code == 2 and f"Missing option {missing}" in result.output, result.output


def test_an_unreadable_keyring_is_named():
    args = ["serve", "--id", "0", "--keyring", "/nonexistent/keyring.json"]
    result = CliRunner().invoke(
        main, [*args, "--advertise", "127.0.0.1:3478", "--media", "127.0.0.1:0"], env={}
    )
    assert result.exit_code == 2
    assert "--keyring: cannot load keyring /nonexistent/keyring.json: No such file" in result.output


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


@pytest.mark.parametrize(
    ("args", "option", "env"),
    [
        (["--auth-token", "s3cret"], "--auth-token", "RTCEDGE_AUTH_TOKEN"),
        (["--keyring-json", KEYRING], "--keyring-json", "RTCEDGE_KEYRING_JSON"),
    ],
)
def test_a_secret_on_the_command_line_is_refused(args, option, env):
    # (--max-sessions 0: nothing would start even if the secret were taken)
    result = run([*BASE, *args, "--max-sessions", "0"])
    assert result.exit_code == 2
    assert option in result.output and env in result.output and "every local user" in result.output


def test_the_token_secret_comes_from_the_environment_or_a_file(tmp_path):
    never_start = [*BASE, "--max-sessions", "0"]  # if the secret were taken, this still fails
    short = run(never_start, env={"RTCEDGE_TOKEN_SECRET": "short"})
    assert short.exit_code == 2 and "RTCEDGE_TOKEN_SECRET: line 1" in short.output
    path = tmp_path / "secret"
    path.write_text(SECRET)
    both = run(
        [*never_start, "--token-secret-file", str(path)], env={"RTCEDGE_TOKEN_SECRET": SECRET}
    )
    assert both.exit_code == 2 and "not both" in both.output
    (path.parent / "empty").write_text("# none yet\n")
    empty = run([*never_start, "--token-secret-file", str(path.parent / "empty")])
    assert empty.exit_code == 2 and "--token-secret-file: no secret" in empty.output
    good = run([*never_start, "--token-secret-file", str(path)])
    assert good.exit_code == 2 and "--max-sessions" in good.output, "the secret was taken"


def test_token_prints_a_token_the_transceiver_accepts(tmp_path):
    result = run(
        ["token", "--subject", "alice", "--ttl", "60"], env={"RTCEDGE_TOKEN_SECRET": SECRET}
    )
    assert result.exit_code == 0, result.output
    claims = TokenVerifier((SECRET.encode(),), 3600).verify(result.output.strip(), time.time())
    assert claims.subject == "alice" and claims.expires_at <= time.time() + 60
    path = tmp_path / "secret"
    path.write_text(f"{SECRET}\n{'older secret, still verifying ' * 2}\n")
    from_file = run(["token", "--token-secret-file", str(path)])
    assert TokenVerifier((SECRET.encode(),), 3600).verify(from_file.output.strip(), time.time())
    nothing = run(["token"])
    assert nothing.exit_code == 2 and "RTCEDGE_TOKEN_SECRET" in nothing.output


def test_regions_come_from_the_environment_space_separated(monkeypatch):
    for name, value in {
        "RTCEDGE_KEYRING_JSON": KEYRING,
        "RTCEDGE_REGIONS": "eu=192.0.2.1:3478,192.0.2.2:3478 us=198.51.100.1:3478",
        "RTCEDGE_REGION_PREFIXES": "10.0.0.0/8=us 10.1.0.0/16=eu",
        "RTCEDGE_REGION_HEADER": "X-Region",
        "RTCEDGE_TRUSTED_PROXIES": "127.0.0.1/32",
    }.items():
        monkeypatch.setenv(name, value)
    params = main.commands["serve"].make_context("serve", BASE[1:]).params
    table = build_config(params).region_table()
    eu = (("192.0.2.1", 3478), ("192.0.2.2", 3478), ("127.0.0.1", 3478))
    assert table.addresses("eu") == eu, "--advertise appended as the backup"
    assert table.choose(None, "10.1.0.5").region == "eu" and table.choose("us", None).region == "us"
    monkeypatch.undo()
    result = run(
        [*BASE, "--no-backup-candidate"], env={"RTCEDGE_REGIONS": "eu=192.0.2.1:1 EU=192.0.2.2:1"}
    )
    assert result.exit_code == 2 and "--region: region 'EU' given twice" in result.output


def test_peers_come_from_the_environment_space_separated(monkeypatch):
    monkeypatch.setenv("RTCEDGE_KEYRING_JSON", KEYRING)
    monkeypatch.setenv("RTCEDGE_PEER_HTTP", "1=10.0.0.1:8080 2=[fd00::2]:8080")
    monkeypatch.setenv("RTCEDGE_PEER_HTTP_DNS", "trx-{id}.trx-headless.ns.svc:8080")
    params = main.commands["serve"].make_context("serve", BASE[1:]).params
    peers = build_config(params).peers()
    assert peers.address(1) == ("10.0.0.1", 8080)
    assert peers.address(2) == ("fd00::2", 8080)
    assert peers.address(7) == ("trx-7.trx-headless.ns.svc", 8080), "the template for the rest"


def test_the_forward_budgets_and_offer_size_reach_the_config(monkeypatch):
    monkeypatch.setenv("RTCEDGE_KEYRING_JSON", KEYRING)
    monkeypatch.setenv("RTCEDGE_PEER_MAX_CLAIMS", "9")
    args = [*BASE[1:], "--peer-max-per-owner", "3", "--peer-max-per-client", "1",
            "--peer-fail-fast", "0", "--peer-connect-timeout", "0.5",
            "--max-sdp-bytes", "8192"]  # fmt: skip
    cfg = build_config(main.commands["serve"].make_context("serve", args).params)
    limits = cfg.peer_limits()
    assert (limits.max_forwards, limits.max_per_owner, limits.max_per_client) == (32, 3, 1)
    assert limits.max_claims == 9 and limits.fail_fast_s == 0
    assert cfg.peer_connect_timeout_s == 0.5 and cfg.max_sdp_bytes == 8192
