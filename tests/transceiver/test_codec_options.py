"""The ``--opus-*`` options: parsed from the command line or the environment into the encoder's
settings, bad values and combinations refused at start naming the option (``transceiver
serve``, ``rtcedge up``), and passed on by ``rtcedge up`` to its transceiver, every setting
said."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from common.config import ConfigError
from common.hint import Keyring
from rtcedge import cli as rtcedge_cli
from rtcedge.checks import UpAddresses, UpAdmission, UpBackend
from rtcedge.up import transceiver_process
from testbed.processes import RelayProcess
from transceiver import codec_options
from transceiver.call.libopus import DEFAULTS, EncoderSettings
from transceiver.cli import build_config, main
from transceiver.config import TransceiverConfig

KEYRING = Keyring.generate(1).to_json()
BASE = ["serve", "--id", "0", "--advertise", "127.0.0.1:3478"]
NON_DEFAULT = [
    "--opus-application", "audio", "--opus-bitrate", "48000", "--opus-complexity", "5",
    "--opus-fec", "--opus-packet-loss", "15", "--opus-dtx",
]  # fmt: skip
SET = EncoderSettings("audio", 48000, 5, fec=True, packet_loss_pct=15, dtx=True)


def serve(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, args, env={"RTCEDGE_KEYRING_JSON": KEYRING, **(env or {})})


def config_of(args: list[str]) -> TransceiverConfig:
    """The config ``transceiver serve`` would run with (its parsing, without the start; the
    environment is the process's: ``monkeypatch.setenv``)."""
    with main.commands["serve"].make_context("serve", [*BASE[1:], *args]) as ctx:
        return build_config(dict(ctx.params))


def test_the_defaults_are_todays_settings(monkeypatch):
    monkeypatch.setenv("RTCEDGE_KEYRING_JSON", KEYRING)
    config = config_of([])
    assert config.opus_settings() == DEFAULTS
    assert EncoderSettings("voip", 32000, 10, fec=False, packet_loss_pct=0, dtx=False) == DEFAULTS


def test_each_option_sets_its_setting(monkeypatch):
    monkeypatch.setenv("RTCEDGE_KEYRING_JSON", KEYRING)
    assert config_of(NON_DEFAULT).opus_settings() == SET


def test_the_environment_sets_them_too(monkeypatch):
    monkeypatch.setenv("RTCEDGE_KEYRING_JSON", KEYRING)
    for name, value in {
        "RTCEDGE_OPUS_APPLICATION": "audio",
        "RTCEDGE_OPUS_BITRATE": "48000",
        "RTCEDGE_OPUS_COMPLEXITY": "5",
        "RTCEDGE_OPUS_FEC": "true",
        "RTCEDGE_OPUS_PACKET_LOSS": "15",
        "RTCEDGE_OPUS_DTX": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert config_of([]).opus_settings() == SET


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--opus-application", "music"], "--opus-application"),
        (["--opus-bitrate", "5999"], "--opus-bitrate: must be 6000..510000, got 5999"),
        (["--opus-bitrate", "600000"], "--opus-bitrate: must be 6000..510000"),
        (["--opus-bitrate", "fast"], "--opus-bitrate"),
        (["--opus-complexity", "11"], "--opus-complexity: must be 0..10, got 11"),
        (["--opus-complexity", "-1"], "--opus-complexity: must be 0..10"),
        (["--opus-packet-loss", "101"], "--opus-packet-loss: must be 0..100, got 101"),
        (["--opus-fec"], "--opus-packet-loss: must be > 0 with --opus-fec"),
        (
            ["--opus-fec", "--opus-packet-loss", "10", "--opus-application", "restricted-lowdelay"],
            "--opus-fec: needs SILK, which --opus-application restricted-lowdelay leaves out",
        ),
    ],
)
def test_a_bad_value_fails_at_start_naming_the_option(args, says):
    result = serve(BASE + args + ["--media", "127.0.0.1:0"])
    assert result.exit_code == 2, result.output
    assert says in result.output, result.output


def test_a_bad_value_from_the_environment_is_named_too():
    result = serve(BASE, env={"RTCEDGE_OPUS_COMPLEXITY": "12"})
    assert result.exit_code == 2 and "--opus-complexity: must be 0..10, got 12" in result.output


def test_a_config_built_in_code_is_checked_the_same_way():
    with pytest.raises(ConfigError, match=re.escape("--opus-complexity: must be 0..10")):
        TransceiverConfig(
            transceiver_id=0,
            advertise=("127.0.0.1", 3478),
            keyring_json=KEYRING,
            opus_complexity=42,
        ).validate()


def test_arguments_say_every_setting_and_parse_back():
    args = codec_options.arguments(SET)
    assert args == NON_DEFAULT
    assert codec_options.arguments(DEFAULTS) == [
        "--opus-application", "voip", "--opus-bitrate", "32000", "--opus-complexity", "10",
        "--no-opus-fec", "--opus-packet-loss", "0", "--no-opus-dtx",
    ]  # fmt: skip


def run_up(args: list[str]):
    return CliRunner().invoke(rtcedge_cli.main, ["up", *args], prog_name="rtcedge")


@pytest.fixture
def nothing_starts(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("`up` started its services")

    monkeypatch.setattr("rtcedge.up.run_local", started)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--opus-complexity", "11"], "Error: --opus-complexity: must be 0..10, got 11"),
        (["--opus-fec"], "Error: --opus-packet-loss: must be > 0 with --opus-fec"),
        (["--opus-application", "x"], "Invalid value for '--opus-application'"),
    ],
)
def test_up_refuses_a_bad_setting_naming_the_option(nothing_starts, args, says):
    result = run_up(args)
    assert result.exit_code == 2, result.output
    assert says in result.output, result.output


def test_ups_options_are_the_transceivers():
    serve_options = {opt: p for p in main.commands["serve"].params for opt in p.opts}
    up_options = {opt: p for p in rtcedge_cli.up.params for opt in p.opts}
    for _, spec in codec_options.specs():
        flag = spec.name
        ours, theirs = up_options[flag], serve_options[flag]
        assert isinstance(ours, click.Option) and isinstance(theirs, click.Option)
        assert (ours.envvar, ours.default, ours.secondary_opts, ours.help) == (
            theirs.envvar,
            theirs.default,
            theirs.secondary_opts,
            theirs.help,
        )


def test_up_passes_every_setting_on_to_its_transceiver(nothing_starts, monkeypatch):
    seen = {}
    monkeypatch.setattr("rtcedge.up.run_local", lambda *args: seen.setdefault("encoder", args[-1]))
    result = run_up(NON_DEFAULT)
    assert result.exit_code == 0, result.output
    assert seen["encoder"] == SET
    # ...which become the transceiver's arguments, after the backend's.
    relay = RelayProcess({}, workers=1)  # (never started: only the arguments are read)
    where = UpAddresses(("127.0.0.1", 8080), ("127.0.0.1", 3478), "127.0.0.1", "", "127.0.0.1")
    trx = transceiver_process(where, relay, UpBackend(), None, None, UpAdmission(), SET)
    assert trx.extra_args[-len(NON_DEFAULT) :] == NON_DEFAULT
    assert trx.command()[-len(NON_DEFAULT) :] == NON_DEFAULT
