"""The backend options agree with ``--backend`` at start: each mistake is one line naming the
option, and the realtime backend's key, session and policy come from files or the environment."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from common.hint import Keyring
from transceiver.cli import build_config, main

KEYRING = Keyring.generate(1).to_json()
BASE = ["serve", "--id", "0", "--advertise", "127.0.0.1:3478"]  # every case fails before a start
REALTIME = ["--backend", "realtime", "--backend-url", "ws://127.0.0.1:9/v1/realtime?model=m"]
MEDIA_STREAMS = ["--backend", "media-streams", "--backend-url", "ws://127.0.0.1:9/twilio"]


def run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, args, env={"RTCEDGE_KEYRING_JSON": KEYRING, **(env or {})})


def config(monkeypatch, args: list[str], env: dict[str, str] | None = None):
    monkeypatch.setenv("RTCEDGE_KEYRING_JSON", KEYRING)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    context = main.commands["serve"].make_context("serve", BASE[1:] + args)
    return build_config(context.params)


@pytest.mark.parametrize(
    ("args", "option", "says"),
    [
        (["--backend-url", "ws://b/"], "--backend-url", "echo backend takes none"),
        (["--backend", "realtime"], "--backend-url", "required with --backend realtime"),
        (["--backend", "realtime", "--backend-url", "http://b/v1/realtime"], "--backend-url", "ws"),
        (
            ["--backend", "realtime", "--backend-url", "ws://b/v1/chat"],
            "--backend-url",
            "/realtime",
        ),
        (["--backend", "websocket", "--backend-url", "http://b/"], "--backend-url", "ws"),
        ([*REALTIME, "--audio-format", "opus"], "--audio-format", "only for --backend echo"),
        (
            ["--backend", "websocket", "--backend-url", "ws://b/", "--audio-rate", "16000"],
            "--audio-rate",
            "per call",
        ),
        (["--audio-rate", "44100"], "--audio-rate", "44100"),
        (
            ["--backend-ca-file", "/etc/hostname"],
            "--backend-ca-file",
            "only for --backend websocket, realtime, media-streams, grpc or a plugin",
        ),
        ([*REALTIME, "--backend-ca-file", "/etc/hostname"], "--backend-url", "wss"),
        ([*REALTIME, "--backend-key-file", "/nonexistent"], "--backend-key-file", "cannot read"),
        (["--backend", "media-streams"], "--backend-url", "required with --backend media-streams"),
        (["--backend", "media-streams", "--backend-url", "http://b/"], "--backend-url", "ws"),
        ([*MEDIA_STREAMS, "--audio-rate", "16000"], "--audio-rate", "8000 Hz mu-law"),
        ([*MEDIA_STREAMS, "--backend-ca-file", "/etc/hostname"], "--backend-url", "wss"),
        (
            [*REALTIME, "--realtime-session-file", "/nonexistent"],
            "--realtime-session-file",
            "cannot read",
        ),
    ],
)
def test_a_backend_mistake_is_one_line_naming_the_option(args, option, says):
    result = run(BASE + args)
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error) == 1 and option in error[0] and says in error[0], result.output
    assert "Traceback" not in result.output


def test_realtime_only_options_are_refused_elsewhere(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-" + "k" * 40 + "\n")
    result = run([*BASE, "--backend-key-file", str(key)])
    assert result.exit_code == 2
    assert "--backend-key-file: only for --backend websocket, realtime" in result.output


def test_the_realtime_backend_is_built_from_its_files(monkeypatch, tmp_path):
    key, session, policy = tmp_path / "key", tmp_path / "session.json", tmp_path / "policy.json"
    key.write_text("# the model server's key\nsk-" + "k" * 40 + "\n")
    session.write_text(json.dumps({"model": "m1", "instructions": "be brief"}))
    policy.write_text(json.dumps({"allow": {"response.create": []}}))
    cfg = config(
        monkeypatch,
        [
            *REALTIME,
            "--backend-key-file",
            str(key),
            "--realtime-session-file",
            str(session),
            "--realtime-policy-file",
            str(policy),
            "--audio-rate",
            "16000",
        ],
    )
    backend = cfg.realtime_backend_config()
    assert backend.api_key == "sk-" + "k" * 40 and backend.sample_rate == 16000
    assert backend.session == {"model": "m1", "instructions": "be brief"}
    update = backend.session_update()["session"]
    assert update["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16000}
    assert "sk-" not in repr(cfg)
    assert set(backend.policy.allowed) == {"response.create"}


def test_the_backend_key_comes_from_the_environment_never_both(monkeypatch, tmp_path):
    cfg = config(monkeypatch, REALTIME, {"RTCEDGE_BACKEND_KEY": "sk-env"})
    assert cfg.realtime_backend_config().api_key == "sk-env"
    monkeypatch.delenv("RTCEDGE_BACKEND_KEY")
    key = tmp_path / "key"
    key.write_text("sk-file\n")
    result = run(
        [*BASE, *REALTIME, "--backend-key-file", str(key)], env={"RTCEDGE_BACKEND_KEY": "sk-env"}
    )
    assert result.exit_code == 2 and "not both" in result.output
    two = tmp_path / "two"
    two.write_text("a\nb\n")
    result = run([*BASE, *REALTIME, "--backend-key-file", str(two)])
    assert result.exit_code == 2 and "one key on one line" in result.output


def test_a_session_that_sets_the_audio_format_is_refused(tmp_path):
    session = tmp_path / "session.json"
    session.write_text(json.dumps({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}))
    result = run([*BASE, *REALTIME, "--realtime-session-file", str(session)])
    assert result.exit_code == 2 and "--realtime-session-file" in result.output
    session.write_text("{not json")
    result = run([*BASE, *REALTIME, "--realtime-session-file", str(session)])
    assert result.exit_code == 2 and "not JSON" in result.output


def test_the_api_keys_are_long_and_from_a_file_or_the_environment(monkeypatch, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("short\n")
    result = run([*BASE, *REALTIME, "--realtime-key-file", str(keys)])
    assert result.exit_code == 2 and "--realtime-key-file" in result.output
    cfg = config(monkeypatch, REALTIME, {"RTCEDGE_REALTIME_KEY": "a" * 32})
    assert cfg.realtime_keys == (b"a" * 32,)


def test_the_echo_backend_takes_a_rate(monkeypatch):
    cfg = config(monkeypatch, ["--audio-rate", "16000"])
    backend = cfg.make_backend()
    assert cfg.audio_rate == 16000 and backend.sample_rate == 16000


def test_the_network_backends_take_the_key_and_the_ca_the_echo_refuses_them(monkeypatch):
    cfg = config(monkeypatch, MEDIA_STREAMS, {"RTCEDGE_BACKEND_KEY": "sk-bot"})
    backend = cfg.make_backend()
    assert backend.name == "media-streams" and backend.config.bearer == "sk-bot"
    assert backend.config.url == "ws://127.0.0.1:9/twilio" and "sk-bot" not in repr(cfg)
    secure = ["--backend", "media-streams", "--backend-url", "wss://bot.example/twilio"]
    cfg = config(monkeypatch, [*secure, "--backend-ca-file", "/etc/hostname"])
    assert cfg.media_streams_backend_config().ca_file == "/etc/hostname"
    cfg = config(monkeypatch, ["--backend", "websocket", "--backend-url", "ws://b/"])
    backend = cfg.make_backend()
    assert backend.name == "websocket" and backend.config.bearer == "sk-bot"
    assert backend.config.headers() == {"Authorization": "Bearer sk-bot"}
    assert "sk-bot" not in repr(backend.config)
    websocket = ["--backend", "websocket", "--backend-url", "wss://b/"]
    cfg = config(monkeypatch, [*websocket, "--backend-ca-file", "/etc/hostname"])
    assert cfg.websocket_backend_config().ca_file == "/etc/hostname"
    monkeypatch.delenv("RTCEDGE_BACKEND_KEY")
    plain = ["--backend", "websocket", "--backend-url", "ws://b/"]
    result = run([*BASE, *plain, "--backend-ca-file", "/etc/hostname"])
    assert "--backend-url: a CA file is for wss:// backend urls" in result.output
    result = run([*BASE, "--backend-ca-file", "/etc/hostname"])
    assert "--backend-ca-file: only for --backend websocket, realtime, media-streams" in (
        result.output
    )
